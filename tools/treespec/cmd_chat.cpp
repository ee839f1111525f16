// treespec chat -m MODEL [-sys TEXT] [-p FIRST] [-n N] [--spec METHOD ...]
// (also `treespec run -cnv ...`). A conversation in the terminal with the model's chat
// template (cli/conversation.h): each line read is a user message (a line ending in '\'
// continues on the next), the answer streams as it is decoded, the KV cache of earlier
// turns is reused. Commands: /exit, /reset, /save FILE, /stats, /help. Ctrl-C stops the
// current answer (at the prompt it ends the program), end of input ends it too.
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "chat/formatter.h"
#include "cli/conversation.h"
#include "cli/options.h"
#include "command.h"
#include "core/log.h"
#include "engine/grammar_step.h"
#include "gguf/gguf.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct ChatArgs {
  cli::ModelOptions model;
  cli::SamplingOptions sampling;
  cli::GrammarOptions grammar;
  drafters::SpecConfig spec;
  std::string system_prompt;
  std::string first_message;
  int64_t n_predict = -1;
  bool ignore_eos = false;
  std::string chat_template;
  std::string chat_template_file;
  bool verbose = false;
};

cli::Conversation* g_chat_conversation = nullptr;  // for the SIGINT handler

extern "C" void chat_on_sigint(int) {
  if (g_chat_conversation != nullptr) g_chat_conversation->cancel();  // an atomic store
}

// Ctrl-C stops the answer while this lives; afterwards it ends the program again.
class ChatInterruptScope {
 public:
  explicit ChatInterruptScope(cli::Conversation& c) {
    g_chat_conversation = &c;
    struct sigaction sa {};
    sa.sa_handler = chat_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~ChatInterruptScope() {
    sigaction(SIGINT, &old_, nullptr);
    g_chat_conversation = nullptr;
  }

 private:
  struct sigaction old_ {};
};

std::string chat_stats_line(const cli::TurnResult& r, const std::string& method) {
  const auto& s = r.stats;
  return fmt::format(
      "{:.1f} tokens/s | {:.2f} tokens/step | {} tokens in {} steps | prompt {} tokens, {} reused from the "
      "cache, {} prefilled in {:.2f} s | spec {} | stop: {}",
      s.tokens_per_s(), s.mean_accepted_length(), s.n_generated, s.n_steps, s.n_prompt, s.n_prompt_cached,
      s.n_prompt - s.n_prompt_cached, s.t_prompt, method, engine::finish_reason_name(r.finish));
}

constexpr const char* kChatHelp =
    "/exit (or end of input) ends the conversation, /reset starts it again, /save FILE writes the messages as JSON,\n"
    "/stats shows the last answer's speed, /help this text; a line ending in '\\' continues on the next;\n"
    "Ctrl-C stops an answer.";

// Reads one message (joined continuation lines); false at end of input.
bool chat_read_message(bool tty, std::string& msg) {
  msg.clear();
  std::string line;
  for (bool first = true;; first = false) {
    if (tty) {
      std::fputs(first ? "> " : ". ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) return !first;
    if (!line.empty() && line.back() == '\\') {
      msg += line.substr(0, line.size() - 1) + "\n";
      continue;
    }
    msg += line;
    return true;
  }
}

// A "/command": true when handled (or unknown, with a message), false for /exit.
bool chat_command(const std::string& line, cli::Conversation& conv, const ChatArgs& a) {
  const size_t sp = line.find(' ');
  const std::string cmd = line.substr(0, sp);
  std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  arg.erase(0, arg.find_first_not_of(' '));
  arg.erase(arg.find_last_not_of(' ') + 1);
  if (cmd == "/exit" || cmd == "/quit") return false;
  if (cmd == "/reset") {
    conv.reset();
    std::puts("(conversation reset)");
  } else if (cmd == "/save") {
    if (arg.empty()) {
      std::puts("(/save needs a file name: /save FILE)");
    } else {
      conv.save(arg);
      std::printf("(%zu messages saved to %s)\n", conv.messages().size(), arg.c_str());
    }
  } else if (cmd == "/stats") {
    if (conv.last() == nullptr) {
      std::puts("(no answer yet)");
    } else {
      std::printf("(%s)\n", chat_stats_line(*conv.last(), a.spec.method).c_str());
    }
  } else if (cmd == "/help") {
    std::puts(kChatHelp);
  } else {
    std::printf("(unknown command %s; /help lists the commands)\n", cmd.c_str());
  }
  std::fflush(stdout);
  return true;
}

// One answer, streamed; errors (too long for the context, a template error) are printed
// and the conversation goes on.
void chat_answer(cli::Conversation& conv, const std::string& msg) {
  ChatInterruptScope interrupt(conv);
  try {
    const cli::TurnResult r = conv.reply(msg, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    if (r.finish == engine::FinishReason::cancelled) std::fputs(" [stopped]", stdout);
    std::fputs("\n", stdout);
  } catch (const chat::TemplateError& e) {
    std::fprintf(stderr, "treespec chat: the chat template failed: %s\n", e.describe().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "treespec chat: %s\n", e.what());
  }
  std::fflush(stdout);
}

int run_chat(const ChatArgs& a) {
  if (a.verbose) core::set_log_level(core::LogLevel::info);
  const auto constraint = cli::resolve_grammar(a.grammar);  // every answer follows it
  const cli::LoadedModel lm = cli::load_model(a.model.model);
  chat::FormatterConfig fc;
  fc.template_file = a.chat_template_file;
  fc.family = a.chat_template;
  const chat::Formatter fmt(lm.model->gguf(), *lm.tok, fc, a.model.model);
  engine::Engine eng(*lm.model, cli::make_chat_engine_params(a.model, lm.model->hparams()));
  cli::ConversationConfig cc;
  cc.sequence = cli::resolve_sequence_params(a.sampling, a.n_predict, a.ignore_eos);
  if (constraint) cc.sequence.grammar = {constraint, engine::make_token_mask(*lm.tok)};
  cc.spec = a.spec;
  cc.system_prompt = a.system_prompt;
  cli::Conversation conv(lm, eng, fmt, cc);
  const bool tty = isatty(STDIN_FILENO) != 0;
  if (tty) {
    std::fprintf(stderr, "treespec chat: %s, chat template %s (%s), spec %s. /help lists the commands.\n",
                 a.model.model.c_str(), fmt.engine_name(), chat::chat_family_name(fmt.family()), a.spec.method.c_str());
  }
  if (!a.first_message.empty()) chat_answer(conv, a.first_message);
  std::string msg;
  while (chat_read_message(tty, msg)) {
    if (msg.empty()) continue;
    if (msg[0] == '/') {
      if (!chat_command(msg, conv, a)) break;
      continue;
    }
    chat_answer(conv, msg);
  }
  return 0;
}

std::function<int()> setup_chat(CLI::App& sub) {
  auto a = std::make_shared<ChatArgs>();
  cli::add_model_options(sub, a->model);
  sub.add_option("--system-prompt", a->system_prompt, "system message that starts the conversation (-sys works too)");
  sub.add_option("-p,--prompt", a->first_message, "first user message (answered before reading stdin)");
  sub.add_option("-n,--n-predict", a->n_predict, "most tokens per answer (-1 = until end of turn or context)")
      ->capture_default_str();
  sub.add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-generation tokens (then -n ends each answer)");
  cli::add_chat_template_options(sub, a->chat_template, a->chat_template_file);
  cli::add_sampling_options(sub, a->sampling);
  cli::add_grammar_options(sub, a->grammar);
  cli::add_spec_options(sub, a->spec);
  sub.add_flag("-v,--verbose", a->verbose, "log more");
  return [a, &sub] {
    cli::resolve_spec_method(sub, a->spec);
    return run_chat(*a);
  };
}

}  // namespace

TREESPEC_COMMAND("chat", "Chat with the model in the terminal (its chat template; KV reused across turns)", setup_chat);
