// docs/reliability.md, "Command line": llama.cpp flags, flags that imply a method, paths
// checked at start, errors before stdout, one error line per problem. Each test runs the
// built binary on a tiny model written by the test.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/test_util.h"
#include "common/tiny_model.h"

using namespace treespec;

namespace {

using Result = test::CliResult;

Result treespec_cmd(const std::string& args) { return test::run_treespec(args); }

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/tiny.gguf";
    test::write_tiny_model(p, test::TinyModelConfig{});  // n_ctx_train 256
    return p;
  }();
  return path;
}

const std::string& prompts_file() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/prompts.txt";
    std::ofstream(p) << "t3 t4\n";
    return p;
  }();
  return path;
}

std::string run_args() { return "run -m '" + tiny_model() + "' -p 't3 t4' -n 3 -t 1 --temp 0 --ignore-eos "; }

std::string spec_of(const Result& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_object()) {
    ADD_FAILURE() << "not JSON: " << r.out << "\n" << r.err;
    return {};
  }
  return j["stats"]["spec"].get<std::string>();
}

}  // namespace

// Item 3: GPU-only llama.cpp flags are accepted (with their value) and warned about once.
TEST(CliFlags, GpuOnlyLlamaFlagsWarnOnceAndRun) {
  for (const std::string flag :
       {"-ngl 99", "--n-gpu-layers 99", "--gpu-layers=99", "-fa", "-fa on", "--flash-attn", "--mlock", "--no-mmap",
        "-sm row", "--split-mode layer", "-mg 0", "--main-gpu 0", "-ts 1,1", "-nkvo", "-ngld 99"}) {
    const Result r = treespec_cmd(run_args() + "--json " + flag);
    EXPECT_EQ(spec_of(r), "none") << flag;
    EXPECT_EQ(count_of(r.err, "treespec: warning: " + flag + " ignored"), 1u) << flag << "\n" << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << flag << "\n" << r.err;  // one line, nothing else
  }
}

// Item 3: the same handling in serve and bench (one place: main).
TEST(CliFlags, GpuOnlyLlamaFlagsWarnInServeAndBench) {
  const Result s = treespec_cmd("serve -m /nonexistent_model.gguf --port 0 -ngl 99 -fa");
  EXPECT_EQ(s.status, 1);
  EXPECT_NE(s.err.find("warning: -ngl 99 ignored"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("warning: -fa ignored"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("nonexistent_model.gguf"), std::string::npos) << s.err;
  const Result b = treespec_cmd("bench --from /nonexistent_report.json -ngl 99");
  EXPECT_EQ(b.status, 1);
  EXPECT_NE(b.err.find("warning: -ngl 99 ignored"), std::string::npos) << b.err;
  EXPECT_NE(b.err.find("nonexistent_report.json"), std::string::npos) << b.err;
  EXPECT_EQ(b.err.find("n-predict"), std::string::npos) << b.err;
}

// Item 3: llama-cli's chat-mode flags turn `run` into `chat` (-p is then the first user
// message, answered exactly as `chat -p` answers it); never "--ctx-size = nv". Other
// subcommands name `treespec chat`.
TEST(CliFlags, ChatModeFlagsStartTheChat) {
  const Result chat =
      treespec_cmd("chat -m '" + tiny_model() + "' -p 't3 t4' -n 3 -t 1 --temp 0 --ignore-eos </dev/null");
  ASSERT_EQ(chat.status, 0) << chat.err;
  ASSERT_FALSE(chat.out.empty());
  for (const std::string flag : {"-cnv", "--conversation", "-i", "--interactive", "-if"}) {
    const Result r = treespec_cmd(run_args() + flag + " </dev/null");
    EXPECT_EQ(r.status, 0) << flag << "\n" << r.err;
    EXPECT_EQ(r.out, chat.out) << flag;
    EXPECT_EQ(r.err.find("ctx-size"), std::string::npos) << r.err;
  }
  const Result serve = treespec_cmd("serve -m '" + tiny_model() + "' -cnv");
  EXPECT_EQ(serve.status, 1);
  EXPECT_NE(serve.err.find("-cnv starts a conversation: use `treespec chat -m MODEL`"), std::string::npos) << serve.err;
}

// Item 3: a multi-letter flag after one dash is never split into single-letter flags.
TEST(CliFlags, MultiLetterShortFlagsAreNeverSplit) {
  const Result r = treespec_cmd(run_args() + "-xyz 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("unknown option '-xyz'"), std::string::npos) << r.err;
  const Result ngl = treespec_cmd(run_args() + "--json -ngl 99");
  EXPECT_EQ(ngl.err.find("n-predict"), std::string::npos) << ngl.err;
  // A short flag with its value attached, and negative numbers, are still values.
  const Result attached =
      treespec_cmd("run -m '" + tiny_model() + "' -p 't3' -n2 -t 1 --temp 0 --ignore-eos --json -s -1");
  EXPECT_EQ(attached.status, 0) << attached.err;
  EXPECT_EQ(nlohmann::json::parse(attached.out)["tokens"].size(), 2u);
  // After "--" nothing is rewritten.
  const Result literal = treespec_cmd(run_args() + "-- -ngl");
  EXPECT_EQ(literal.err.find("warning"), std::string::npos) << literal.err;
}

// Item 2: -md, --draft-*, --heads and the other drafters' own flags select their method.
TEST(CliFlags, MethodFlagsSelectTheirMethod) {
  EXPECT_EQ(spec_of(treespec_cmd(run_args() + "--json -md '" + tiny_model() + "'")), "draft");
  EXPECT_EQ(spec_of(treespec_cmd(run_args() + "--json --model-draft '" + tiny_model() + "' --draft-max 2")), "draft");
  EXPECT_EQ(spec_of(treespec_cmd(run_args() + "--json --draft-layers 0")), "draft");
  EXPECT_EQ(spec_of(treespec_cmd(run_args() + "--json --ptd-depth 3")), "ptd");
  EXPECT_EQ(spec_of(treespec_cmd(run_args() + "--json --lookup-ngram-max 3")), "lookup");
  // --draft-max alone selects draft, which then says what it lacks.
  const Result d = treespec_cmd(run_args() + "--draft-max 4");
  EXPECT_EQ(d.status, 1);
  EXPECT_NE(d.err.find("--spec draft needs a draft model"), std::string::npos) << d.err;
  // --heads selects medusa, which loads the file (ignored before: the run succeeded).
  const std::string heads = test::temp_dir() + "/not_heads.gguf";
  std::ofstream(heads) << "x";
  const Result h = treespec_cmd(run_args() + "--heads '" + heads + "'");
  EXPECT_EQ(h.status, 1);
  EXPECT_NE(h.err.find("not_heads.gguf: file is 1 bytes"), std::string::npos) << h.err;
}

// Item 2: a drafter's flag with a --spec that does not use it, or two drafters' flags.
TEST(CliFlags, MethodFlagsOfAnotherMethodAreAnError) {
  const Result r = treespec_cmd(run_args() + "--spec lookup -md '" + tiny_model() + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(
                "-md/--model-draft is an option of --spec draft or --spec auto; it does nothing with --spec lookup"),
            std::string::npos)
      << r.err;
  const Result none = treespec_cmd(run_args() + "--spec none --draft-max 3");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("--draft-max is an option of --spec draft"), std::string::npos) << none.err;
  const Result two = treespec_cmd(run_args() + "-md '" + tiny_model() + "' --ptd-depth 3");
  EXPECT_EQ(two.status, 1);
  EXPECT_NE(two.err.find("name the method with --spec"), std::string::npos) << two.err;
  // --spec auto takes the options of the methods it chooses from; its own need it named.
  const Result a = treespec_cmd(run_args() + "--auto-explore 0.1");
  EXPECT_EQ(a.status, 1);
  EXPECT_NE(a.err.find("--auto-explore is an option of --spec auto; name the method with --spec auto"),
            std::string::npos)
      << a.err;
  const Result ab = treespec_cmd(run_args() + "--spec auto --budget 8");
  EXPECT_EQ(ab.status, 1);
  EXPECT_NE(ab.err.find("--budget 8 does not apply to --spec auto"), std::string::npos) << ab.err;
  const Result ok = treespec_cmd(run_args() + "--spec auto --ptd-depth 3 --lookup-draft 4 --auto-arms lookup,ptd");
  EXPECT_EQ(ok.status, 0) << ok.err;
  // bench's method specs are checked the same way.
  const Result b = treespec_cmd("bench -m '" + tiny_model() + "' --prompts '" + prompts_file() +
                                "' --method lookup:--draft-max=3 -n 2 -r 1 -t 1 --no-membw --no-warmup --no-progress");
  EXPECT_EQ(b.status, 1);
  EXPECT_NE(b.err.find("--draft-max is an option of --spec draft"), std::string::npos) << b.err;
}

// Item 2: -md and --heads paths are checked before the model is loaded.
TEST(CliFlags, DrafterPathsAreCheckedAtStart) {
  for (const std::string flag : {"-md", "--heads", "--propd-heads"}) {
    // The model does not exist either: the drafter's file is reported first, at start.
    const Result r = treespec_cmd("run -m /nonexistent_model.gguf -p x " + flag + " /nonexistent_drafter.gguf");
    EXPECT_EQ(r.status, 1) << flag;
    EXPECT_NE(r.err.find("cannot open '/nonexistent_drafter.gguf'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("nonexistent_model"), std::string::npos) << r.err;
  }
  const Result s = treespec_cmd("serve -m '" + tiny_model() + "' --port 0 --heads /nonexistent_heads.gguf");
  EXPECT_EQ(s.status, 1);
  EXPECT_NE(s.err.find("--heads: cannot open '/nonexistent_heads.gguf'"), std::string::npos) << s.err;
}

// Item 2: propd's missing heads name propd; bench suggests its own syntax.
TEST(CliFlags, MissingHeadsNameTheMethodAndEachCommandsSyntax) {
  const Result p = treespec_cmd(run_args() + "--spec propd");
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("--spec propd: model"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("--spec medusa"), std::string::npos) << p.err;
  const Result b = treespec_cmd("bench -m '" + tiny_model() + "' --prompts '" + prompts_file() +
                                "' --spec medusa -n 2 -r 1 -t 1 --no-membw --no-warmup --no-progress");
  EXPECT_EQ(b.status, 1);
  EXPECT_NE(b.err.find("bench: --method medusa:--heads=FILE"), std::string::npos) << b.err;
}

// Item 2: a prompt the context cannot hold is an error before anything is on stdout.
TEST(CliFlags, TooLongPromptErrorsBeforeStdout) {
  const std::string file = test::temp_dir() + "/long.txt";
  {
    std::ofstream f(file);
    for (int i = 0; i < 40; ++i) f << "t3 t4 ";
  }
  const Result r = treespec_cmd("run -m '" + tiny_model() + "' -f '" + file + "' -c 16 -n 4 -t 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("but the context holds 16"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
  // A prompt that fits is still echoed before the generated text.
  const Result ok = treespec_cmd("run -m '" + tiny_model() + "' -p 't3 t4' -n 2 -t 1 --temp 0 --ignore-eos");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("t3"), std::string::npos) << ok.out;
}

// Item 2: -c beyond the training context warns once; within it, nothing.
TEST(CliFlags, ContextBeyondTrainingWarnsOnce) {
  const Result r = treespec_cmd(run_args() + "--json -c 512");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "-c/--ctx-size 512 is beyond the model's training context (256)"), 1u) << r.err;
  const Result in = treespec_cmd(run_args() + "--json -c 256");
  EXPECT_EQ(in.status, 0) << in.err;
  EXPECT_TRUE(in.err.empty()) << in.err;
}

// llama.cpp's KV cache type flags, in run, bench and serve; a type the model cannot use
// is an error naming it (tiny model: head size 8, so no q8_0 rows).
TEST(CliFlags, CacheTypeFlagsAreLlamaCppsAndCheckedAtStart) {
  const std::string m = "-m '" + tiny_model() + "' ";
  for (const char* flags : {"-ctk f32 -ctv bf16", "--cache-type-k F16 --cache-type-v f32"}) {
    const Result r = treespec_cmd("run " + m + "-p 't3' -n 3 -t 1 " + flags);
    EXPECT_EQ(r.status, 0) << flags << "\n" << r.err;
    EXPECT_FALSE(r.out.empty()) << flags;
  }
  const Result bad = treespec_cmd("run " + m + "-p 't3' -n 3 -t 1 -ctv q4");
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  EXPECT_EQ(count_of(bad.err, "unknown KV cache type 'q4'"), 1u) << bad.err;
  EXPECT_NE(bad.err.find("-ctv/--cache-type-v"), std::string::npos) << bad.err;
  const Result q8 = treespec_cmd("run " + m + "-p 't3' -n 3 -t 1 -ctk q8_0");
  EXPECT_EQ(q8.status, 1);
  EXPECT_NE(q8.err.find("q8_0 needs a head size that is a multiple of 32; this model's is 8"), std::string::npos)
      << q8.err;
  const Result bench = treespec_cmd("bench " + m + "--pp 4 --tg 2 -r 1 -t 1 --no-progress -ctk bf16 -o json");
  EXPECT_EQ(bench.status, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"type_k\": \"bf16\""), std::string::npos) << bench.out;
  const Result serve = treespec_cmd("serve " + m + "--port 0 -ctk q9");
  EXPECT_EQ(serve.status, 1);
  EXPECT_NE(serve.err.find("unknown KV cache type 'q9'"), std::string::npos) << serve.err;
}
