// `treespec info` and `treespec run` on tiny Qwen2 and Llama 3 style models (byte-level
// BPE vocabularies): run --json's greedy tokens equal our own step-by-step decode
// (one token per forward pass), with and without speculation, and every generated
// token is the float64 reference's argmax (up to float noise).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "common/reference_forward.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace treespec;

namespace {

test::TinyModelConfig qwen2_config() {
  test::TinyModelConfig c;
  c.arch = "qwen2", c.qkv_bias = true, c.tied = true, c.rope_theta = 1e6f, c.rms_eps = 1e-6f;
  c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2";
  c.seed = 22, c.weight_scale = 1.0f;  // varied greedy output (not one repeated token)
  return c;
}

test::TinyModelConfig llama3_config() {
  test::TinyModelConfig c;
  c.n_embd = 32, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 16, c.n_vocab = 320, c.rope_theta = 500000.0f;
  c.rope_freqs = test::llama3_rope_factors(16, 500000.0f, 8.0f, 1.0f, 4.0f, 64.0f);
  c.tokenizer = "gpt2", c.bpe_pre = "llama-bpe", c.write_vocab_size = true;
  c.seed = 21;  // greedy output cycles with period 10 after the prompt: lookup gets to accept drafts
  return c;
}

// The engine's order: prefill all prompt tokens but the last, then one token per pass.
std::vector<int32_t> greedy_step_by_step(const model::Model& m, const std::vector<int32_t>& prompt, int n) {
  model::ForwardContext ctx(m, 1);
  kv::KvCache kv(m.kv_shape(1, 256));
  const int32_t V = m.hparams().n_vocab;
  std::vector<float> logits(prompt.size() * static_cast<size_t>(V));
  auto feed = [&](std::span<const int32_t> toks) {
    model::Batch b;
    b.add_chain(0, kv.n_past(0), toks);
    EXPECT_TRUE(m.forward(ctx, b, kv, {}, logits.data()).ok());
    std::vector<int32_t> path(toks.size());
    for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
    EXPECT_TRUE(kv.commit(0, path).ok());
  };
  if (prompt.size() > 1) feed(std::span<const int32_t>(prompt).first(prompt.size() - 1));
  std::vector<int32_t> out;
  int32_t cur = prompt.back();
  for (int i = 0; i < n; ++i) {
    feed(std::span<const int32_t>(&cur, 1));
    cur = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    out.push_back(cur);
  }
  return out;
}

nlohmann::json run_json(const std::string& model, const std::string& extra) {
  std::string out;
  const std::string cmd = test::treespec_binary() + " run -m '" + model +
                          "' -p 'Once upon a time there was' -n 16 --temp 0 -t 1 --ignore-eos --json " + extra;
  EXPECT_EQ(test::run_command(cmd, &out), 0) << cmd << "\n" << out;
  return nlohmann::json::parse(out);
}

void check_family(const test::TinyModelConfig& cfg, const std::string& arch, bool adds_bos, bool expect_accepts) {
  const std::string path = test::temp_dir() + "/" + arch + ".gguf";
  test::write_tiny_model(path, cfg);

  std::string info;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " info '" + path + "'", &info), 0);
  EXPECT_NE(info.find("general.architecture"), std::string::npos) << info;
  EXPECT_NE(info.find("\"" + arch + "\""), std::string::npos) << info;
  EXPECT_NE(info.find("tokenizer.ggml.merges"), std::string::npos) << info;

  const auto file = std::shared_ptr<const gguf::GgufFile>(gguf::GgufFile::open(path));
  const auto m = model::Model::from_gguf(file);
  const auto tok = tokenizer::Tokenizer::from_gguf(*file);
  const auto prompt = tok->encode("Once upon a time there was", true, true);
  ASSERT_GT(prompt.size(), 2u);
  EXPECT_EQ(prompt.front() == tok->bos_id(), adds_bos);
  const auto want = greedy_step_by_step(*m, prompt, 16);
  EXPECT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 5u) << "degenerate fixture: pick another seed";

  const auto plain = run_json(path, "");
  EXPECT_EQ(plain.at("prompt_tokens").get<std::vector<int32_t>>(), prompt);
  EXPECT_EQ(plain.at("tokens").get<std::vector<int32_t>>(), want);
  EXPECT_EQ(plain.at("stats").at("finish_reason"), "length");
  EXPECT_TRUE(plain.at("text").is_string());
  // A fixed tree: the default budget controller may rightly draft nothing on a tiny model.
  const auto spec = run_json(path, "--spec lookup --budget 8");
  EXPECT_EQ(spec.at("tokens").get<std::vector<int32_t>>(), want);
  if (expect_accepts) {
    EXPECT_GT(spec.at("stats").at("num_accepted_tokens").get<int64_t>(), 0);
  }

  // Each generated token is (within float noise) the reference model's greedy choice.
  const test::ReferenceModel ref(*file);
  std::vector<int> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), want.begin(), want.end() - 1);
  const auto logits = ref.causal(seq);
  for (size_t k = 0; k < want.size(); ++k) {
    const auto& row = logits[prompt.size() - 1 + k];
    const double best = *std::max_element(row.begin(), row.end());
    EXPECT_GE(row[static_cast<size_t>(want[k])], best - 1e-4 * std::max(1.0, std::fabs(best))) << "token " << k;
  }
}

}  // namespace

TEST(ArchCli, Qwen2InfoAndRun) { check_family(qwen2_config(), "qwen2", false, false); }

TEST(ArchCli, Llama3InfoAndRun) { check_family(llama3_config(), "llama", true, true); }

TEST(ArchCli, RunErrors) {
  // Qwen2 adds no BOS: an empty prompt has nothing to condition on.
  const std::string path = test::temp_dir() + "/qwen2.gguf";
  test::write_tiny_model(path, qwen2_config());
  std::string out;
  EXPECT_NE(test::run_command(test::treespec_binary() + " run -m '" + path + "' -p '' -n 4 2>&1", &out), 0);
  EXPECT_NE(out.find("prompt is empty"), std::string::npos) << out;
  // An unsupported architecture is named, with the supported ones.
  auto c = qwen2_config();
  c.arch = "mamba";
  const std::string bad = test::temp_dir() + "/mamba.gguf";
  test::write_tiny_model(bad, c);
  EXPECT_NE(test::run_command(test::treespec_binary() + " run -m '" + bad + "' -p 'hi' -n 4 2>&1", &out), 0);
  EXPECT_NE(out.find("architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, gemma2, gemma3, phi3, "
                     "smollm3, ernie4_5, granite)"),
            std::string::npos)
      << out;
}
