// treespec chat-template (--template-file F | -m MODEL) --messages MESSAGES.json
//                        [--tools TOOLS.json] [--add-generation-prompt]
//                        [--bos-token S] [--eos-token S] [--now YYYY-MM-DD]
// Renders a conversation with a Jinja2 chat template exactly as transformers'
// apply_chat_template does (docs/chat.md) and prints the text, with no added newline.
// With -m the template and the BOS/EOS token texts come from the GGUF. A template error
// (raise_exception, syntax, undefined, ...) exits 1 with its message on stderr.
#include <cstdio>
#include <ctime>

#include "chat/builtin_formats.h"
#include "chat/chat.h"
#include "command.h"
#include "core/files.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct ChatTemplateArgs {
  std::string template_file;
  std::string model;
  std::string messages_file;
  std::string tools_file;
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  std::string now;
};

nlohmann::ordered_json read_json_file(const std::string& path, const char* what) {
  const std::string text = core::read_text_file(path, what);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgument(fmt::format("{} '{}' is not valid JSON: {}", what, path, e.what()));
  }
}

std::tm parse_now(const std::string& s) {
  std::tm tm{};
  int y = 0, m = 0, d = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || s.size() != 10 || m < 1 || m > 12 || d < 1 ||
      d > 31)
    throw InvalidArgument(fmt::format("--now must be a date YYYY-MM-DD, got '{}'", s));
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  tm.tm_isdst = -1;
  std::tm probe = tm;
  if (timegm(&probe) == -1 || probe.tm_mday != d)
    throw InvalidArgument(fmt::format("--now: '{}' is not a calendar date", s));
  return probe;  // timegm filled in the weekday and the day of the year
}

int run_chat_template(const ChatTemplateArgs& a, const CLI::App& sub) {
  chat::ChatInput in;
  in.messages = read_json_file(a.messages_file, "messages file");
  if (!in.messages.is_array())
    throw InvalidArgument(fmt::format("messages file '{}' must hold a JSON list of messages, got {}", a.messages_file,
                                      in.messages.type_name()));
  if (!a.tools_file.empty()) {
    in.tools = read_json_file(a.tools_file, "tools file");
    if (!in.tools.is_array())
      throw InvalidArgument(
          fmt::format("tools file '{}' must hold a JSON list of tools, got {}", a.tools_file, in.tools.type_name()));
  }
  in.add_generation_prompt = a.add_generation_prompt;

  std::string source;
  if (!a.template_file.empty()) {
    source = core::read_text_file(a.template_file, "template file");
  } else {
    const auto file = gguf::GgufFile::open(a.model);
    source = chat::gguf_chat_template(*file, !in.tools.is_null());
    if (source.empty()) throw InvalidArgument(fmt::format("{} has no tokenizer.chat_template", a.model));
    const auto tok = tokenizer::Tokenizer::from_gguf(*file);
    if (tok->bos_id() >= 0) in.bos_token = tok->token_to_piece(tok->bos_id(), true);
    if (tok->eos_id() >= 0) in.eos_token = tok->token_to_piece(tok->eos_id(), true);
  }
  if (sub.count("--bos-token")) in.bos_token = a.bos_token;
  if (sub.count("--eos-token")) in.eos_token = a.eos_token;

  chat::RenderOptions opt;
  if (!a.now.empty()) opt.now = parse_now(a.now);
  std::string out;
  try {
    chat::Template t(source, opt);
    out = chat::render_chat(t, in);
  } catch (const chat::TemplateError& e) {
    std::fprintf(stderr, "treespec chat-template: %s\n", e.describe().c_str());
    return 1;
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

std::function<int()> setup_chat_template(CLI::App& sub) {
  auto args = std::make_shared<ChatTemplateArgs>();
  auto* tf = sub.add_option("--template-file", args->template_file, "Jinja2 chat template file");
  auto* m = sub.add_option("-m,--model", args->model, "GGUF whose tokenizer.chat_template (and BOS/EOS texts) to use");
  tf->excludes(m);
  m->excludes(tf);
  sub.add_option("--messages", args->messages_file, "JSON file with the list of messages")->required();
  sub.add_option("--tools", args->tools_file, "JSON file with the list of tool schemas (the template's `tools`)");
  sub.add_flag("--add-generation-prompt", args->add_generation_prompt, "end with the assistant's turn header");
  sub.add_option("--bos-token", args->bos_token, "text of bos_token (default: the model's, or empty)");
  sub.add_option("--eos-token", args->eos_token, "text of eos_token (default: the model's, or empty)");
  sub.add_option("--now", args->now, "date strftime_now() sees, YYYY-MM-DD (default: now)");
  return [args, &sub]() -> int {
    if (args->template_file.empty() && args->model.empty())
      throw InvalidArgument("chat-template needs --template-file FILE or -m MODEL");
    return run_chat_template(*args, sub);
  };
}

}  // namespace

TREESPEC_COMMAND("chat-template", "Render messages with a Jinja2 chat template (as transformers' apply_chat_template)",
                 setup_chat_template);
