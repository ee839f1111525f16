// The limits of docs/reliability.md through `treespec run`: each gives exit status 0
// with a documented finish reason, or exit status 1 with one clear line on stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/memory.h"
#include "kv/kv_cache.h"
#include "model/model.h"

using namespace treespec;

namespace {

using Result = test::CliResult;

Result run(const std::string& args) { return test::run_treespec("run " + args); }

const std::string& spm_model() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/spm.gguf";
    test::write_tiny_model(p, test::TinyModelConfig{});
    return p;
  }();
  return path;
}

// Qwen2-style: byte-level BPE, no BOS added.
const std::string& bpe_model() {
  static const std::string path = [] {
    test::TinyModelConfig c;
    c.arch = "qwen2", c.qkv_bias = true, c.tied = true, c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2";
    const std::string p = test::temp_dir() + "/bpe.gguf";
    test::write_tiny_model(p, c);
    return p;
  }();
  return path;
}

nlohmann::json json_of(const Result& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << r.out << "\n" << r.err;
    return {};
  }
}

std::string common() { return " -t 1 --temp 0 --ignore-eos --json "; }

}  // namespace

TEST(CliLimits, ContextOverflowStopsWithContextExitZero) {
  const auto j = json_of(run("-m '" + spm_model() + "' -p 't3 t4' -c 12 -n 100" + common()));
  const size_t n_prompt = j["prompt_tokens"].size();
  EXPECT_EQ(j["tokens"].size(), 12 - n_prompt + 1);
  EXPECT_EQ(j["stats"]["finish_reason"], "context");
  EXPECT_EQ(j["stats"]["context_full"], true);
  // Streaming mode says so on stderr and exits 0 as well.
  const Result r = run("-m '" + spm_model() + "' -p 't3 t4' -c 12 -n 100 -t 1 --temp 0 --ignore-eos --spec lookup");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("stop: context"), std::string::npos) << r.err;
}

TEST(CliLimits, NPredictZeroPrintsNoTokensExitZero) {
  const auto j = json_of(run("-m '" + spm_model() + "' -p 't3' -n 0" + common()));
  EXPECT_TRUE(j["tokens"].empty());
  EXPECT_EQ(j["text"], "");
  EXPECT_EQ(j["stats"]["finish_reason"], "length");
  const Result r = run("-m '" + spm_model() + "' -p 't3' -n 0 -t 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("stop: length"), std::string::npos) << r.err;
}

TEST(CliLimits, HugeNPredictIsBoundedByTheContext) {
  const auto j = json_of(run("-m '" + spm_model() + "' -p 't3' -c 16 -n 1000000000000" + common()));
  EXPECT_EQ(j["tokens"].size(), 16 - j["prompt_tokens"].size() + 1);
  EXPECT_EQ(j["stats"]["finish_reason"], "context");
  const Result bad = run("-m '" + spm_model() + "' -p 't3' -n -2");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("-n/--n-predict must be >= 0 or -1"), std::string::npos) << bad.err;
}

TEST(CliLimits, ThreadsZeroMeansAllCoresNegativeIsAnError) {
  const auto j = json_of(run("-m '" + spm_model() + "' -p 't3' -n 2 --temp 0 --json -t 0"));
  EXPECT_GE(j["stats"]["n_threads"].get<int>(), 1);
  const Result neg = run("-m '" + spm_model() + "' -p 't3' -n 2 -t -1");
  EXPECT_EQ(neg.status, 1);
  EXPECT_NE(neg.err.find("-t/--threads must be a positive thread count or 0 (all cores), got -1"), std::string::npos)
      << neg.err;
  EXPECT_EQ(neg.err.find("internal error"), std::string::npos) << neg.err;
}

TEST(CliLimits, EmptyPromptIsBosOnlyOrAClearError) {
  const auto j = json_of(run("-m '" + spm_model() + "' -p '' -n 3" + common()));
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json::array({1}));
  EXPECT_EQ(j["tokens"].size(), 3u);
  // No BOS in this vocabulary: the empty prompt has no tokens at all.
  for (const char* mode : {"--json", ""}) {
    const Result r = run("-m '" + bpe_model() + "' -p '' -n 3 -t 1 " + mode);
    EXPECT_EQ(r.status, 1) << mode;
    EXPECT_NE(r.err.find("prompt is empty"), std::string::npos) << r.err;
  }
}

TEST(CliLimits, PromptOfOnlySpecialTokens) {
  const auto j = json_of(run("-m '" + spm_model() + "' -p '<s></s>' -n 3" + common()));
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json::array({1, 1, 2}));
  EXPECT_EQ(j["tokens"].size(), 3u);
  const auto q = json_of(run("-m '" + bpe_model() + "' -p '<|im_start|><|im_end|>' -n 3" + common()));
  EXPECT_EQ(q["prompt_tokens"].size(), 2u);
  EXPECT_EQ(q["tokens"].size(), 3u);
  // As plain text, the same characters are ordinary tokens.
  const auto p = json_of(run("-m '" + bpe_model() + "' -p '<|im_start|>' -n 1 --no-parse-special" + common()));
  EXPECT_GT(p["prompt_tokens"].size(), 1u);
}

TEST(CliLimits, InvalidUtf8PromptUsesByteFallback) {
  const std::string prompt_file = test::temp_dir() + "/prompt.txt";
  {
    std::FILE* f = std::fopen(prompt_file.c_str(), "wb");
    std::fputs("a\xff\xfe b\xc3", f);
    std::fclose(f);
  }
  const auto j = json_of(run("-m '" + bpe_model() + "' -f '" + prompt_file + "' -n 2" + common()));
  // Byte-level BPE: "a", FF, FE, " b", C3 each as (at least) one token: nothing dropped.
  EXPECT_GE(j["prompt_tokens"].size(), 5u);
  // The prompt given on the command line goes the same way.
  const auto k = json_of(run("-m '" + bpe_model() + "' -p \"$(printf 'a\\377\\376 b\\303')\" -n 2" + common()));
  EXPECT_EQ(k["prompt_tokens"], j["prompt_tokens"]);
}

TEST(CliLimits, HugeContextIsAClearOutOfMemoryError) {
  const auto m = model::Model::load(spm_model());
  kv::KvShape shape = m->kv_shape(1, 1000000000);
  shape.type_k = shape.type_v = tensor::DType::f16;  // run's default cache type
  const uint64_t need = kv::KvCache::required_bytes(shape);
  if (need <= core::available_memory().available) GTEST_SKIP() << "this machine has " << need << " bytes available";
  const Result r = run("-m '" + spm_model() + "' -p 't3' -n 2 -c 1000000000 -t 1");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("treespec: error: out of memory: the KV cache"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(need) + " bytes"), std::string::npos) << r.err;
  const Result neg = run("-m '" + spm_model() + "' -p 't3' -n 2 -c -1 -t 1");
  EXPECT_EQ(neg.status, 1);
  EXPECT_NE(neg.err.find("-c/--ctx-size must be >= 0"), std::string::npos) << neg.err;
}

TEST(CliLimits, ModelTruncatedBeforeLoadNamesTheTensor) {
  const std::string path = test::temp_dir() + "/cut.gguf";
  test::write_tiny_model(path, test::TinyModelConfig{});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 8);
  const Result r = run("-m '" + path + "' -p 't3' -n 2 -t 1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("treespec: error: " + path + ": tensor '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("past the end of the file"), std::string::npos) << r.err;
}

// The model file shrinks while `treespec run` streams tokens: one clear line, status 1.
TEST(CliLimits, ModelTruncatedWhileRunningIsAClearError) {
  const std::string path = test::temp_dir() + "/shrinking.gguf";
  test::write_tiny_model(path, test::TinyModelConfig{});
  const std::string err_path = test::temp_dir() + "/stderr.txt";
  const std::string cmd = "timeout -s KILL 300 " + test::treespec_binary() + " run -m '" + path +
                          "' -p 't3' -c 1000000 -n -1 -t 1 --ignore-eos 2>'" + err_path + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256];
  ASSERT_GT(std::fread(buf, 1, sizeof buf, p), 0u);  // generation has started
  std::filesystem::resize_file(path, 0);
  while (std::fread(buf, 1, sizeof buf, p) > 0) {
  }
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = test::read_file(err_path);
  EXPECT_NE(err.find("treespec: error: model file '" + path + "' was truncated or rewritten while in use"),
            std::string::npos)
      << err;
}
