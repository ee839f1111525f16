// `treespec chat-template`: prints exactly what the library renders, takes the template
// and BOS/EOS texts from a GGUF with -m, and exits 1 with a clear message on template
// errors and bad input.
#include <gtest/gtest.h>

#include <fstream>

#include "chat/chat.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "gguf/gguf.h"

namespace treespec::test {

namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if not loop.last %}\n{% endif %}{% endfor "
    "%}"
    "{% if tools %}[{{ tools|map(attribute='name')|join(',') }}]{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}{{ eos_token }} {{ strftime_now('%Y-%m-%d') }}\n";

const char* kMessages = R"([{"role": "user", "content": "héllo 🌍"}, {"role": "assistant", "content": "hi"}])";

TEST(ChatTemplateCli, PrintsExactlyTheRenderedText) {
  const std::string dir = temp_dir();
  const std::string t = write_file(dir, "t.jinja", kTemplate);
  const std::string m = write_file(dir, "m.json", kMessages);
  const std::string tools = write_file(dir, "tools.json", R"([{"name": "a"}, {"name": "b"}])");
  CliResult r = run_treespec("chat-template --template-file " + t + " --messages " + m + " --tools " + tools +
                             " --add-generation-prompt --bos-token '<s>' --eos-token '</s>' --now 2024-02-29");
  ASSERT_EQ(r.status, 0) << r.err;
  // The library renders the same text (trim_blocks eats the "\n" after the if tag, and
  // one trailing newline of the template is dropped).
  chat::ChatInput in;
  in.messages = nlohmann::ordered_json::parse(kMessages);
  in.tools = nlohmann::ordered_json::parse(R"([{"name": "a"}, {"name": "b"}])");
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  chat::RenderOptions opt;
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 1;
  tm.tm_mday = 29;
  opt.now = tm;
  EXPECT_EQ(r.out, chat::render_chat(chat::Template(kTemplate, opt), in));
  EXPECT_EQ(r.out, "<s><|user|>héllo 🌍<|assistant|>hi[a,b]<|assistant|></s> 2024-02-29");
}

TEST(ChatTemplateCli, TemplateErrorsExitOneWithTheMessage) {
  const std::string dir = temp_dir();
  const std::string m = write_file(dir, "m.json", kMessages);
  CliResult r = run_treespec("chat-template --template-file " +
                             write_file(dir, "r.jinja", "{{ raise_exception('Only user and assistant roles!') }}") +
                             " --messages " + m);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("Only user and assistant roles!"), std::string::npos) << r.err;
  r = run_treespec("chat-template --template-file " + write_file(dir, "s.jinja", "ok\n{% for x in %}") +
                   " --messages " + m);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("TemplateSyntaxError"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
}

TEST(ChatTemplateCli, BadInputIsAClearError) {
  const std::string dir = temp_dir();
  const std::string t = write_file(dir, "t.jinja", kTemplate);
  auto expect_error = [&](const std::string& args, const std::string& needle) {
    CliResult r = run_treespec("chat-template " + args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  };
  expect_error("--template-file " + dir + "/missing.jinja --messages " + write_file(dir, "m.json", kMessages),
               "missing.jinja");
  expect_error("--template-file " + t + " --messages " + dir + "/none.json", "none.json");
  expect_error("--template-file " + t + " --messages " + write_file(dir, "bad.json", "[{"), "not valid JSON");
  expect_error("--template-file " + t + " --messages " + write_file(dir, "obj.json", R"({"role": "user"})"),
               "JSON list");
  expect_error("--template-file " + t + " --messages " + write_file(dir, "n.json", "[5]"), "message 0");
  expect_error("--template-file " + t + " --messages " + dir + "/m.json --now 2024-13-01", "--now");
  expect_error("--messages " + dir + "/m.json", "--template-file");
}

TEST(ChatTemplateCli, ReadsTemplateAndSpecialTokensFromTheGguf) {
  const std::string dir = temp_dir();
  TinyModelConfig cfg;
  cfg.customize = [](gguf::GgufWriter& w) {
    w.set("tokenizer.chat_template", gguf::Value::string(kTemplate));
    w.set("tokenizer.chat_template.tool_use", gguf::Value::string("TOOLS {{ tools|length }}"));
  };
  const std::string model = dir + "/m.gguf";
  write_tiny_model(model, cfg);
  const std::string m = write_file(dir, "m.json", kMessages);
  CliResult r = run_treespec("chat-template -m " + model + " --messages " + m + " --now 2024-01-02");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto file = gguf::GgufFile::open(model);
  const auto tokens = file->get_string_array("tokenizer.ggml.tokens");
  const std::string bos = tokens.at(static_cast<size_t>(file->get_int("tokenizer.ggml.bos_token_id")));
  const std::string eos = tokens.at(static_cast<size_t>(file->get_int("tokenizer.ggml.eos_token_id")));
  EXPECT_EQ(r.out, bos + "<|user|>héllo 🌍<|assistant|>hi" + eos + " 2024-01-02");
  // --bos-token overrides the model's; tools select the tool_use template
  r = run_treespec("chat-template -m " + model + " --messages " + m + " --bos-token X --tools " +
                   write_file(dir, "t.json", "[{}, {}]"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "TOOLS 2");
  // a GGUF without a template
  TinyModelConfig plain;
  write_tiny_model(dir + "/plain.gguf", plain);
  r = run_treespec("chat-template -m " + dir + "/plain.gguf --messages " + m);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no tokenizer.chat_template"), std::string::npos) << r.err;
}

}  // namespace

}  // namespace treespec::test
