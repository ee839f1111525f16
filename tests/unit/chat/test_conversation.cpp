// treespec chat (cli/conversation.h, tools/treespec/cmd_chat.cpp): every answer equals
// plain greedy decoding of the rendered conversation, for every drafter, while the next
// turn reuses the KV of the previous ones; Ctrl-C / cancel() stops one answer only; a
// conversation too long for the context is a clear error that loses nothing; the REPL's
// commands through the binary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "chat/formatter.h"
#include "cli/conversation.h"
#include "common/golden.h"
#include "common/test_util.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

constexpr const char* kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const std::string& chatml_model() {
  static const std::string path = test::stories_with_chat_template(kChatml, "conversation_chatml.gguf");
  return path;
}

struct Chat {
  cli::LoadedModel lm;
  std::unique_ptr<chat::Formatter> fmt;
  std::unique_ptr<engine::Engine> eng;
  std::unique_ptr<cli::Conversation> conv;
};

Chat open_chat(const std::string& model, const std::string& spec, int32_t n_ctx = 512, int32_t n_predict = 24,
               bool ignore_eos = false) {
  Chat c;
  c.lm = cli::load_model(model);
  c.fmt = std::make_unique<chat::Formatter>(c.lm.model->gguf(), *c.lm.tok, chat::FormatterConfig{}, model);
  cli::ModelOptions mo;
  mo.n_threads = 1;
  mo.n_ctx = n_ctx;
  c.eng = std::make_unique<engine::Engine>(*c.lm.model, cli::make_chat_engine_params(mo, c.lm.model->hparams()));
  cli::ConversationConfig cc;
  cli::SamplingOptions so;
  so.params.temp = 0.0f;
  cc.sequence = cli::resolve_sequence_params(so, n_predict, ignore_eos);
  cc.spec = cli::spec_config_from_string(spec);
  cc.system_prompt = "You tell short stories.";
  c.conv = std::make_unique<cli::Conversation>(c.lm, *c.eng, *c.fmt, cc);
  return c;
}

// Plain greedy decoding of `prompt` in an engine of its own (no prefix cache).
std::vector<int32_t> plain_greedy(const cli::LoadedModel& lm, const std::vector<int32_t>& prompt, int32_t n_predict) {
  engine::EngineParams ep;
  ep.n_threads = 1;
  ep.n_ctx = 512;
  engine::Engine eng(*lm.model, ep);
  cli::SamplingOptions so;
  so.params.temp = 0.0f;
  auto seq = cli::make_sequence(eng, lm, prompt, cli::resolve_sequence_params(so, n_predict, false),
                                cli::spec_config_from_string("none"));
  EXPECT_TRUE(eng.generate(*seq).ok());
  return seq->generated();
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin()).first -
      a.begin());
}

const char* const kTurns[] = {"Tell me about a cat.", "What did the cat do next?", "And then? Ünïcödé ☃"};

}  // namespace

TEST(Conversation, EveryAnswerIsPlainGreedyAndTheNextTurnReusesTheKv) {
  TREESPEC_REQUIRE_SHARED();
  for (const std::string spec : {"none", "lookup", "lookahead", "ptd"}) {
    Chat c = open_chat(chatml_model(), spec);
    std::vector<int32_t> context;  // the previous turn's prompt and answer
    for (const char* user : kTurns) {
      std::string streamed;
      const cli::TurnResult r = c.conv->reply(user, [&](const std::string& s) { streamed += s; });
      EXPECT_EQ(streamed, r.text) << spec;
      EXPECT_EQ(r.tokens, plain_greedy(c.lm, r.prompt, 24)) << spec << ": " << user;
      EXPECT_EQ(r.stats.n_prompt, static_cast<int64_t>(r.prompt.size()));
      if (!context.empty()) {
        // Every cell the previous turn computed that the new prompt starts with is reused
        // (the last answer token is fed only when the turn did not end at -n).
        const size_t common = std::min(common_prefix(context, r.prompt), r.prompt.size() - 1);
        EXPECT_GE(common + 1, context.size() - 1) << spec << ": the previous turn re-tokenizes differently";
        EXPECT_LE(r.stats.n_prompt_cached, static_cast<int64_t>(common)) << spec;
        EXPECT_GE(r.stats.n_prompt_cached, static_cast<int64_t>(std::min(common, context.size() - 1))) << spec;
      } else {
        EXPECT_EQ(r.stats.n_prompt_cached, 0);
      }
      context = r.prompt;
      context.insert(context.end(), r.tokens.begin(), r.tokens.end());
    }
    const auto& m = c.conv->messages();
    ASSERT_EQ(m.size(), 7u);  // system + 3 x (user, assistant)
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[5]["content"], kTurns[2]);
    EXPECT_EQ(m[6]["content"], c.conv->last()->text);
  }
}

TEST(Conversation, CancelStopsOneAnswerAndKeepsIt) {
  TREESPEC_REQUIRE_SHARED();
  Chat c = open_chat(chatml_model(), "lookup", 512, 200, /*ignore_eos=*/true);
  int pieces = 0;
  const cli::TurnResult r = c.conv->reply(kTurns[0], [&](const std::string&) {
    if (++pieces == 3) c.conv->cancel();
  });
  EXPECT_EQ(r.finish, engine::FinishReason::cancelled);
  EXPECT_LT(r.tokens.size(), 200u);
  EXPECT_EQ(c.conv->messages().back()["content"], r.text);
  const cli::TurnResult next = c.conv->reply(kTurns[1]);
  EXPECT_EQ(next.finish, engine::FinishReason::length) << "a cancel ends one answer, not the next";
  EXPECT_EQ(next.tokens.size(), 200u);
}

TEST(Conversation, TooLongForTheContextIsAClearErrorThatLosesNothing) {
  TREESPEC_REQUIRE_SHARED();
  Chat c = open_chat(chatml_model(), "none", 160, 8);
  c.conv->reply("Hi.");
  const auto before = c.conv->messages();
  std::string longer;
  for (int i = 0; i < 80; ++i) longer += "the cat sat on the mat ";
  try {
    c.conv->reply(longer);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the context holds 160 (-c/--ctx-size): /reset"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c.conv->messages(), before);
  c.conv->reset();
  EXPECT_EQ(c.conv->messages().size(), 1u);  // the system prompt
  EXPECT_EQ(c.conv->reply("Hi.").finish, engine::FinishReason::length);
}

TEST(Conversation, BuiltInFormatStopsAtTheNextUserTurn) {
  TREESPEC_REQUIRE_SHARED();
  // stories260K has no template: the plain transcript, whose stop string is "\nuser:".
  Chat c = open_chat(test::stories_gguf(), "none", 512, 120);
  EXPECT_FALSE(c.fmt->jinja());
  for (const char* user : kTurns) {
    const cli::TurnResult r = c.conv->reply(user);
    EXPECT_EQ(r.text.find("\nuser:"), std::string::npos) << r.text;
  }
}

// The binary: answers stream to stdout and equal the library's, commands answer in
// parentheses, /save writes the messages, end of input ends the program.
TEST(ChatCli, CommandsAndAnswersThroughTheBinary) {
  TREESPEC_REQUIRE_SHARED();
  Chat c = open_chat(chatml_model(), "none");
  const std::string a1 = c.conv->reply(kTurns[0]).text, a2 = c.conv->reply(kTurns[1]).text;
  const std::string dir = test::temp_dir();
  {
    std::ofstream in(dir + "/in.txt");
    in << kTurns[0] << "\n/stats\n/bogus\n/save " << dir << "/conv.json\n"
       << "What did the cat \\\ndo next?\n";
  }
  // the continuation line joins into "What did the cat \ndo next?", not kTurns[1]
  const test::CliResult r =
      test::run_treespec("chat -m '" + chatml_model() +
                         "' -sys 'You tell short stories.' -n 24 -t 1 -c 512 --temp 0 < '" + dir + "/in.txt'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind(a1 + "\n(", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("tokens/s |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prompt "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(unknown command /bogus; /help lists the commands)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(3 messages saved to "), std::string::npos) << r.out;
  const auto saved = nlohmann::ordered_json::parse(test::read_file(dir + "/conv.json"));
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved[2]["content"], a1);
  (void)a2;
}

// Ctrl-C while an answer streams stops that answer only: the program reads on.
TEST(ChatCli, InterruptStopsTheAnswerNotTheProgram) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  {
    std::ofstream in(dir + "/in.txt");
    in << "Tell me a long story.\n/stats\n/exit\nnot read\n";
  }
  const std::string cmd = "sh -c '" + test::treespec_binary() + " chat -m \"" + chatml_model() +
                          "\" -n 100000 --ignore-eos -t 1 -c 8192 --temp 0 <\"" + dir + "/in.txt\" >\"" + dir +
                          "/out.txt\" 2>\"" + dir + "/err.txt\" & p=$!; " + "i=0; while [ ! -s \"" + dir +
                          "/out.txt\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; " +
                          "kill -INT $p; wait $p'";
  const int rc = test::run_command(cmd);
  const std::string out = test::read_file(dir + "/out.txt");
  EXPECT_EQ(rc, 0) << test::read_file(dir + "/err.txt");
  EXPECT_NE(out.find(" [stopped]\n("), std::string::npos) << out.substr(0, 300);
  EXPECT_NE(out.find("stop: cancelled)"), std::string::npos) << out.substr(out.size() > 300 ? out.size() - 300 : 0);
}
