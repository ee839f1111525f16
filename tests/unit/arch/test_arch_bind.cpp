// Model::bind on each family's metadata: hyperparameters read per architecture, and a
// clear error (naming the file, key or tensor) for every unsupported or broken variant.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

std::unique_ptr<model::Model> load(const test::TinyModelConfig& c, const std::string& name = "m.gguf") {
  const std::string path = test::temp_dir() + "/" + name;
  test::write_tiny_model(path, c);
  return model::Model::load(path);
}

// Loading throws E whose message contains every fragment.
template <class E>
void expect_error(const test::TinyModelConfig& c, std::vector<std::string> fragments) {
  try {
    load(c, "bad.gguf");
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
    EXPECT_NE(msg.find("bad.gguf"), std::string::npos) << msg;
  }
}

std::vector<float> ones(size_t n) { return std::vector<float>(n, 1.0f); }

}  // namespace

TEST(ArchBind, LlamaHparams) {
  test::TinyModelConfig c;
  const auto m = load(c);
  const auto& hp = m->hparams();
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_FALSE(hp.rope_neox);
  EXPECT_FALSE(hp.has_qkv_bias);
  EXPECT_FALSE(hp.tied_output);
  EXPECT_EQ(hp.head_dim, 8);
  EXPECT_EQ(hp.n_rot, 8);
  EXPECT_EQ(hp.n_head_kv, 2);
}

TEST(ArchBind, Llama3Hparams) {
  test::TinyModelConfig c;
  c.head_dim = 16;  // key_length: n_head * head_dim = 64 != n_embd 32
  c.rope_theta = 500000.0f;
  c.rope_freqs = test::llama3_rope_factors(16, 500000.0f, 8.0f, 1.0f, 4.0f, 64.0f);
  c.tied = true;
  c.write_vocab_size = true;
  const auto m = load(c);
  const auto& hp = m->hparams();
  EXPECT_EQ(hp.head_dim, 16);
  EXPECT_EQ(hp.n_embd_q(), 64);
  EXPECT_EQ(hp.n_rot, 16);
  EXPECT_TRUE(hp.tied_output);
  EXPECT_FLOAT_EQ(hp.rope_theta, 500000.0f);
}

TEST(ArchBind, Llama3FactorsFollowMetasFormula) {
  // Short wavelengths keep factor 1, long ones get `factor`, in between it is smooth.
  const auto f = test::llama3_rope_factors(16, 500000.0f, 8.0f, 1.0f, 4.0f, 64.0f);
  ASSERT_EQ(f.size(), 8u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);  // wavelength 2*pi < 16
  EXPECT_GT(f[1], 1.0f);        // 32.5: between 16 and 64
  EXPECT_LT(f[1], 8.0f);
  const double wavelen = 2 * M_PI * std::pow(500000.0, 2.0 / 16);  // of pair 1
  const double smooth = (64 / wavelen - 1.0) / (4.0 - 1.0);
  EXPECT_NEAR(f[1], 1.0 / ((1 - smooth) / 8 + smooth), 1e-5);
  for (size_t i = 2; i < f.size(); ++i) EXPECT_FLOAT_EQ(f[i], 8.0f);
  // Llama 3.1's own setting (8192, factor 8): the first pairs are untouched.
  const auto real = test::llama3_rope_factors(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
  EXPECT_FLOAT_EQ(real[0], 1.0f);
  EXPECT_FLOAT_EQ(real.back(), 8.0f);
}

TEST(ArchBind, Qwen2Hparams) {
  test::TinyModelConfig c;
  c.arch = "qwen2";
  c.qkv_bias = true;
  c.tied = true;
  c.rope_theta = 1e6f;
  c.rms_eps = 1e-6f;
  const auto m = load(c);
  const auto& hp = m->hparams();
  EXPECT_EQ(hp.arch, "qwen2");
  EXPECT_TRUE(hp.rope_neox);
  EXPECT_TRUE(hp.has_qkv_bias);
  EXPECT_TRUE(hp.tied_output);
  EXPECT_FLOAT_EQ(hp.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-6f);
  EXPECT_EQ(m->layer(1).bq.size(), 32u);
  EXPECT_EQ(m->layer(1).bk.size(), 16u);
}

TEST(ArchBind, UnsupportedArchitectureNamesItAndTheSupportedOnes) {
  test::TinyModelConfig c;
  c.arch = "deepseek2";
  expect_error<Unsupported>(c, {"architecture 'deepseek2'", "llama, qwen2, qwen3, gemma2, gemma3, phi3"});
}

// A family's own tensors are required: Gemma 2 without its post norms, Qwen3 without its
// Q/K norms are named, not computed as a plainer family.
TEST(ArchBind, FamilyTensorsAreRequired) {
  test::TinyModelConfig c;
  c.arch = "gemma2";
  expect_error<FormatError>(c, {"blk.0.post_attention_norm.weight", "missing"});
  c.arch = "qwen3";
  expect_error<FormatError>(c, {"blk.0.attn_q_norm.weight", "missing"});
  c.arch = "llama";
  c.qk_norm = true;  // llama does not read Q/K norms: an unsupported variant
  expect_error<Unsupported>(c, {"blk.0.attn_q_norm.weight", "not part of the supported llama layout"});
}

TEST(ArchBind, Qwen2NeedsBiases) {
  test::TinyModelConfig c;
  c.arch = "qwen2";
  expect_error<FormatError>(c, {"blk.0.attn_q.bias", "missing"});
}

TEST(ArchBind, BiasesInSomeLayersOnly) {
  test::TinyModelConfig c;
  c.customize = [](gguf::GgufWriter& w) {
    const std::vector<float> b(32, 0.1f), bk(16, 0.1f);
    w.add_tensor("blk.1.attn_q.bias", tensor::DType::f32, {32}, b.data(), b.size() * 4);
    w.add_tensor("blk.1.attn_k.bias", tensor::DType::f32, {16}, bk.data(), bk.size() * 4);
    w.add_tensor("blk.1.attn_v.bias", tensor::DType::f32, {16}, bk.data(), bk.size() * 4);
  };
  expect_error<FormatError>(c, {"layer 1 has QKV bias tensors but layer 0 does not"});
}

TEST(ArchBind, UnreadLayerTensorsAreUnsupported) {
  test::TinyModelConfig c;
  c.customize = [](gguf::GgufWriter& w) {
    const std::vector<float> b(32, 0.1f);
    w.add_tensor("blk.0.attn_output.bias", tensor::DType::f32, {32}, b.data(), b.size() * 4);
  };
  expect_error<Unsupported>(c, {"tensor 'blk.0.attn_output.bias'", "llama"});
  // A layer beyond block_count is as suspicious.
  c.customize = [](gguf::GgufWriter& w) {
    const std::vector<float> b(32, 1.0f);
    w.add_tensor("blk.7.attn_norm.weight", tensor::DType::f32, {32}, b.data(), b.size() * 4);
  };
  expect_error<Unsupported>(c, {"blk.7.attn_norm.weight"});
  // Tensors outside the layers (e.g. a drafter's heads) are allowed.
  c.customize = [](gguf::GgufWriter& w) {
    const std::vector<float> b(32, 1.0f);
    w.add_tensor("medusa.0.weight", tensor::DType::f32, {32}, b.data(), b.size() * 4);
  };
  EXPECT_NO_THROW(load(c));
}

TEST(ArchBind, MetadataErrors) {
  test::TinyModelConfig c;
  c.customize = [](gguf::GgufWriter& w) { w.set("llama.attention.value_length", gguf::Value::u32(4)); };
  expect_error<Unsupported>(c, {"llama.attention.value_length 4", "key head size 8"});
  c.customize = [](gguf::GgufWriter& w) { w.set("llama.vocab_size", gguf::Value::u32(65)); };
  expect_error<FormatError>(c, {"llama.vocab_size = 65", "64 rows"});
  c.customize = [](gguf::GgufWriter& w) { w.set("llama.expert_count", gguf::Value::u32(8)); };
  expect_error<Unsupported>(c, {"llama.expert_count = 8", "mixture-of-experts"});
  c.customize = [](gguf::GgufWriter& w) { w.set("llama.rope.scaling.type", gguf::Value::string("yarn")); };
  expect_error<Unsupported>(c, {"llama.rope.scaling.type 'yarn'", "none, linear"});
  c.customize = nullptr;
  c.rope_freqs = ones(3);  // n_rot / 2 = 4 expected
  expect_error<FormatError>(c, {"rope_freqs.weight", "[3]", "[4]"});
  c.rope_freqs = {1.0f, 1.0f, 0.0f, 1.0f};
  expect_error<FormatError>(c, {"rope_freqs.weight", "non-positive factor at 2"});
  c.rope_freqs.clear();
  c.write_vocab_size = true;
  EXPECT_NO_THROW(load(c));
}
