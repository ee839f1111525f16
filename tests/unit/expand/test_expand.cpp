// Function-preserving expansion of stories260K: the expanded model reproduces every
// golden exactly (plain greedy and with a tree drafter), its logits equal the source's
// (bit for bit when the width ratio is a power of 4 and head_dim is kept), the Q8_0
// expansion decodes exactly like the Q8_0 source, and the construction has the promised
// structure (zero output projections in pass-through layers, no all-zero input blocks).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/arch_families.h"
#include "common/golden.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/expand.h"
#include "model/quantize.h"
#include "tensor/quant.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

test::DrafterMaker maker(const std::string& method) {
  return [method](const model::Model& m) {
    drafters::SpecConfig cfg;
    cfg.method = method;
    return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
  };
}

test::StoriesModel load(const std::string& path) {
  test::StoriesModel m;
  m.model = model::Model::load(path);
  m.tok = tokenizer::Tokenizer::from_gguf(m.model->gguf());
  return m;
}

std::string expand(const std::string& src, int32_t dim, int32_t ffn, int32_t layers, int32_t head_dim = 0,
                   std::optional<tensor::DType> type = std::nullopt) {
  const std::string out = test::temp_dir() + "/expanded.gguf";
  model::ExpandOptions o;
  o.n_embd = dim;
  o.n_ff = ffn;
  o.n_layer = layers;
  o.head_dim = head_dim;
  o.type = type;
  model::expand_gguf(src, out, o);
  return out;
}

// Logits of every position of a fixed token sequence (prefill), [n, n_vocab].
std::vector<float> prefill_logits(const model::Model& m, const std::vector<int32_t>& toks) {
  model::ForwardContext ctx(m, 1);
  kv::KvCache kv(m.kv_shape(1, 64));
  model::Batch b;
  b.add_chain(0, 0, toks);
  std::vector<float> logits(toks.size() * static_cast<size_t>(m.hparams().n_vocab));
  EXPECT_TRUE(m.forward(ctx, b, kv, {}, logits.data()).ok());
  return logits;
}

std::vector<int32_t> greedy(const test::StoriesModel& m, const std::string& prompt, int32_t n) {
  engine::EngineParams ep;
  ep.n_threads = 1;
  ep.n_ctx = 256;
  engine::Engine eng(*m.model, ep);
  eng.set_eog_ids(m.tok->eog_ids());
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = n;
  engine::Sequence seq(m.tok->encode(prompt, true, false), sp, maker("none")(*m.model));
  EXPECT_TRUE(eng.generate(seq).ok());
  return seq.generated();
}

const std::vector<int32_t> kToks = {1, 403, 407, 261, 378, 267, 271, 280, 300, 290, 301, 500, 12, 99, 45, 46, 47};

TEST(Expand, F32Dim128ReproducesEveryGolden) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = load(expand(test::stories_gguf(), 128, 256, 8));
  EXPECT_EQ(m.model->hparams().n_embd, 128);
  EXPECT_EQ(m.model->hparams().n_layer, 8);
  EXPECT_EQ(m.model->hparams().n_head, 16);
  EXPECT_EQ(m.model->hparams().n_head_kv, 8);
  test::expect_goldens(m, maker("none"));
  test::expect_goldens(m, maker("lookup"), 2, 2);  // tree rows, batched sequences, 2 threads
}

TEST(Expand, F32WiderHeadsReproduceEveryGolden) {
  TREESPEC_REQUIRE_SHARED();
  // head_dim 8 -> 32: RoPE pairs p -> 4p keep their frequencies; q rows scaled by 2 undo
  // the new 1/sqrt(32) attention scale exactly.
  const auto m = load(expand(test::stories_gguf(), 256, 384, 9, 32));
  EXPECT_EQ(m.model->hparams().head_dim, 32);
  EXPECT_EQ(m.model->hparams().n_rot, 32);
  test::expect_goldens(m, maker("none"));
}

TEST(Expand, LogitsBitExactForPowerOfFourWidth) {
  TREESPEC_REQUIRE_SHARED();
  const auto src = model::Model::load(test::stories_gguf());
  const auto big = model::Model::load(expand(test::stories_gguf(), 256, 512, 11));
  const auto a = prefill_logits(*src, kToks), b = prefill_logits(*big, kToks);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
}

TEST(Expand, LogitsCloseForOtherShapes) {
  TREESPEC_REQUIRE_SHARED();
  const auto src = model::Model::load(test::stories_gguf());
  const auto a = prefill_logits(*src, kToks);
  float scale = 0;
  for (float v : a) scale = std::max(scale, std::fabs(v));
  for (auto path : {expand(test::stories_gguf(), 128, 256, 8), expand(test::stories_gguf(), 192, 200, 6, 16)}) {
    const auto big = model::Model::load(path);
    const auto b = prefill_logits(*big, kToks);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 2e-5f * scale) << path << " logit " << i;
  }
}

TEST(Expand, Q8_0MatchesQ8_0Source) {
  TREESPEC_REQUIRE_SHARED();
  const std::string q8 = test::temp_dir() + "/s260_q8.gguf";
  model::quantize_gguf(test::stories_gguf(), q8, tensor::DType::q8_0);
  const auto src = load(q8);
  // Width ratio 4 keeps the norm rescaling exact, so the int8 activation blocks of the
  // real dims are bit-identical to the source's. (With ratio 2 a norm output one ulp off
  // can round an activation to the neighbouring int8 step; a few goldens then diverge
  // after tens of tokens, as two Q8_0 runs with different summation orders would.)
  const auto big = load(expand(q8, 256, 512, 8));  // each matrix keeps its source type
  EXPECT_EQ(big.model->layer(0).wq.type, tensor::DType::q8_0);
  EXPECT_EQ(big.model->layer(0).w_down.type, tensor::DType::f16);  // as in the source (172 % 32 != 0)
  {
    const auto a = prefill_logits(*src.model, kToks), b = prefill_logits(*big.model, kToks);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
  }
  for (const auto& g : test::decode_goldens()) {
    EXPECT_EQ(greedy(big, g.prompt, g.n_predict()), greedy(src, g.prompt, g.n_predict())) << g.prompt;
  }
  // Expanding the F32 source straight to Q8_0 also gives a model that loads and runs.
  const auto direct = load(expand(test::stories_gguf(), 128, 256, 8, 0, tensor::DType::q8_0));
  EXPECT_EQ(direct.model->layer(0).w_down.type, tensor::DType::q8_0);
  EXPECT_FALSE(greedy(direct, "Once upon a time", 20).empty());
}

TEST(Expand, StructureAsDocumented) {
  TREESPEC_REQUIRE_SHARED();
  const std::string path = expand(test::stories_gguf(), 128, 256, 8);
  const auto f = gguf::GgufFile::open(path);
  // Source layers sit at 0,2,4,5,7; 1,3,6 are pass-throughs.
  auto values = [&](const std::string& name) {
    const auto* t = f->find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return model::tensor_to_f32(path, name, t->type, t->ne, t->data);
  };
  for (int l : {1, 3, 6}) {
    for (const char* k : {"attn_output", "ffn_down"}) {
      for (float v : values(fmt::format("blk.{}.{}.weight", l, k))) ASSERT_EQ(v, 0.0f) << l << k;
    }
    // Their other weights are dense random filler.
    int64_t zeros = 0;
    const auto q = values(fmt::format("blk.{}.attn_q.weight", l));
    for (float v : q) zeros += v == 0.0f;
    EXPECT_LT(zeros, static_cast<int64_t>(q.size() / 1000 + 1)) << "layer " << l;
  }
  // A real layer's gate: the source block is intact (scaled by nothing), new units dense.
  const auto src = gguf::GgufFile::open(test::stories_gguf());
  const auto* sg = src->find_tensor("blk.1.ffn_gate.weight");
  const auto s = model::tensor_to_f32(test::stories_gguf(), sg->name, sg->type, sg->ne, sg->data);
  const auto g = values("blk.2.ffn_gate.weight");  // source layer 1 -> new layer 2
  for (int64_t o = 0; o < 172; ++o)
    for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(g[static_cast<size_t>(o * 128 + i)], s[static_cast<size_t>(o * 64 + i)]);
  int64_t zeros = 0;
  for (int64_t o = 172; o < 256; ++o)
    for (int64_t i = 0; i < 128; ++i) zeros += g[static_cast<size_t>(o * 128 + i)] == 0.0f;
  EXPECT_EQ(zeros, 0);
  // RMS epsilon compensates the wider mean.
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f * 64.0f / 128.0f);
}

TEST(Expand, Qwen2TinyModelWithBiasesAndNeoxRope) {
  // qwen2: QKV biases and NeoX (half-split) RoPE; width ratio 4 and kept head_dim give
  // bit-identical logits, a new head_dim (NeoX pair mapping) logits within tolerance.
  const std::string dir = test::temp_dir();
  test::TinyModelConfig cfg;
  cfg.arch = "qwen2";
  cfg.qkv_bias = true;
  cfg.n_embd = 32;
  cfg.n_head = 4;
  cfg.n_head_kv = 2;
  cfg.n_ff = 40;
  cfg.n_layer = 2;
  test::write_tiny_model(dir + "/q.gguf", cfg);
  const auto src = model::Model::load(dir + "/q.gguf");
  ASSERT_TRUE(src->hparams().rope_neox);
  const std::vector<int32_t> toks = {1, 5, 9, 33, 2, 60, 17, 8};
  const auto a = prefill_logits(*src, toks);
  {
    model::ExpandOptions o;
    o.n_embd = 128;
    o.n_ff = 96;
    o.n_layer = 5;
    model::expand_gguf(dir + "/q.gguf", dir + "/e.gguf", o);
    const auto big = model::Model::load(dir + "/e.gguf");
    EXPECT_EQ(big->hparams().arch, "qwen2");
    EXPECT_EQ(big->hparams().n_head, 16);
    const auto b = prefill_logits(*big, toks);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "logit " << i;
  }
  {
    model::ExpandOptions o;
    o.n_embd = 128;
    o.n_ff = 64;
    o.n_layer = 3;
    o.head_dim = 32;
    model::expand_gguf(dir + "/q.gguf", dir + "/e2.gguf", o);
    const auto big = model::Model::load(dir + "/e2.gguf");
    EXPECT_EQ(big->hparams().head_dim, 32);
    const auto b = prefill_logits(*big, toks);
    float scale = 0;
    for (float v : a) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * scale) << "logit " << i;
  }
}

// Every newer family (Q/K norms, post norms, embedding scale, soft-caps, sliding windows
// with local/global layers, fused QKV and gate/up, LongRoPE): wider, deeper, with its head
// size kept and doubled, the expansion's logits are the source's within rounding and its
// argmax the same at every position (past the sliding windows).
class ExpandFamily : public ::testing::TestWithParam<test::Family> {};

TEST_P(ExpandFamily, LogitsMatchTheSource) {
  const test::Family& fam = GetParam();
  const std::string dir = test::temp_dir();
  test::TinyModelConfig cfg = fam.cfg;
  cfg.rms_eps = 0.05f;  // large enough that a norm epsilon the construction got wrong shows
  test::write_tiny_model(dir + "/src.gguf", cfg);
  const auto src = model::Model::load(dir + "/src.gguf");
  const model::Hparams& hp = src->hparams();
  std::vector<int32_t> toks;
  for (int32_t i = 0; i < 20; ++i) toks.push_back((i * 37 + 11) % hp.n_vocab);
  const auto a = prefill_logits(*src, toks);
  float scale = 0;
  for (float v : a) scale = std::max(scale, std::fabs(v));
  for (const int32_t r : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} head_dim x{}", fam.name, r));
    model::ExpandOptions o;
    o.n_embd = 4 * hp.n_embd;
    o.n_ff = 2 * hp.n_ff + 8;
    o.n_layer = 2 * hp.n_layer - 1 + 4;
    o.head_dim = r * hp.head_dim;
    model::expand_gguf(dir + "/src.gguf", dir + "/big.gguf", o);
    const auto big = model::Model::load(dir + "/big.gguf");
    ASSERT_EQ(big->hparams().arch, hp.arch);
    ASSERT_EQ(big->hparams().head_dim, r * hp.head_dim);
    const auto b = prefill_logits(*big, toks);
    const int32_t V = hp.n_vocab;
    // f16 weights round the rescaled query rows (x sqrt(r)) to f16 again
    const float tol = (cfg.wtype == tensor::DType::f32 ? 2e-5f : 2e-4f) * scale;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "logit " << i;
    for (size_t row = 0; row < toks.size(); ++row) {
      const float* x = a.data() + row * V;
      const float* y = b.data() + row * V;
      EXPECT_EQ(std::max_element(x, x + V) - x, std::max_element(y, y + V) - y) << "row " << row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ExpandFamily, ::testing::ValuesIn(test::newer_families()),
                         [](const ::testing::TestParamInfo<test::Family>& info) {
                           return std::string(info.param.name);
                         });

// Gemma's local and global layers, and SmolLM3's RoPE-free ones, keep their kind.
TEST(Expand, LayersKeepTheirKind) {
  auto local = [](int period) { return [period](int64_t il) { return il % period < period - 1 ? 1 : 0; }; };
  EXPECT_EQ(model::expanded_layer_positions(3, 5, local(2)), (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(model::expanded_layer_positions(7, 13, local(6)), (std::vector<int32_t>{0, 2, 4, 6, 8, 11, 12}));
  EXPECT_EQ(model::expanded_layer_positions(5, 22), (std::vector<int32_t>{2, 6, 11, 15, 19}));
  // SmolLM3: every 4th layer without RoPE.
  EXPECT_EQ(model::expanded_layer_positions(5, 22, [](int64_t il) { return (il + 1) % 4 == 0; }),
            (std::vector<int32_t>{2, 6, 10, 15, 18}));
  for (const int period : {2, 4, 6}) {
    for (int32_t n_src = 1; n_src <= 12; ++n_src) {
      for (int32_t n_new = n_src; n_new <= 30; ++n_new) {
        const auto pos = model::expanded_layer_positions(n_src, n_new, local(period));
        for (int32_t l = 0; l < n_src; ++l) {
          EXPECT_EQ(pos[l] % period < period - 1, l % period < period - 1) << n_src << " -> " << n_new;
          if (l > 0) {
            EXPECT_GT(pos[l], pos[l - 1]);
          }
        }
      }
    }
  }
  EXPECT_EQ(model::expanded_layer_positions(6, 7, local(6)), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Expand, RejectsBadShapes) {
  TREESPEC_REQUIRE_SHARED();
  model::ExpandOptions o;
  o.n_embd = 32;  // smaller than the source
  o.n_ff = 256;
  o.n_layer = 8;
  EXPECT_THROW(model::expand_gguf(test::stories_gguf(), test::temp_dir() + "/x.gguf", o), InvalidArgument);
  o.n_embd = 128;
  o.head_dim = 12;  // not a multiple of 8
  EXPECT_THROW(model::expand_gguf(test::stories_gguf(), test::temp_dir() + "/x.gguf", o), InvalidArgument);
}

TEST(Quantize, KeepsNormsF32AndFallsBackOnRowLength) {
  TREESPEC_REQUIRE_SHARED();
  using tensor::DType;
  for (auto t : {DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_k, DType::q6_k, DType::q4_1, DType::q5_0,
                 DType::q5_1, DType::iq4_nl, DType::q2_k, DType::q3_k, DType::q5_k, DType::iq4_xs}) {
    const std::string out = test::temp_dir() + "/q.gguf";
    model::quantize_gguf(test::stories_gguf(), out, t);
    const auto f = gguf::GgufFile::open(out);
    EXPECT_EQ(f->find_tensor("blk.0.attn_norm.weight")->type, tensor::DType::f32);
    EXPECT_EQ(f->find_tensor("output_norm.weight")->type, tensor::DType::f32);
    const auto down = f->find_tensor("blk.0.ffn_down.weight")->type;  // rows of 172
    const auto q = f->find_tensor("blk.0.attn_q.weight")->type;       // rows of 64
    if (t == tensor::DType::f16 || t == tensor::DType::bf16) {
      EXPECT_EQ(down, t);
      EXPECT_EQ(q, t);
    } else if (tensor::dtype_traits(t).block_size == 256) {
      // 64 is not a multiple of 256: llama.cpp's fallbacks; 172 fits no block: f16.
      const DType expect = t == DType::q4_k   ? DType::q5_0
                           : t == DType::q5_k ? DType::q5_1
                           : t == DType::q6_k ? DType::q8_0
                                              : DType::iq4_nl;
      EXPECT_EQ(q, expect) << tensor::dtype_name(t);
      EXPECT_EQ(down, DType::f16);
    } else {
      EXPECT_EQ(q, t);
      EXPECT_EQ(down, tensor::DType::f16);
    }
    // Every quantised model still loads and decodes the first golden prompt sensibly.
    const auto m = load(out);
    const auto toks = greedy(m, "Once upon a time", 16);
    EXPECT_EQ(toks.size(), 16u) << tensor::dtype_name(t);
  }
  EXPECT_EQ(model::quant_type_for("blk.0.attn_q.weight", {4096, 4096}, tensor::DType::q4_k), tensor::DType::q4_k);
  EXPECT_EQ(model::quant_type_for("blk.0.attn_norm.weight", {4096}, tensor::DType::q4_k), tensor::DType::f32);
}

// llama.cpp's file types: the per-tensor choices llama-quantize (the anchor, commit in
// ../shared/anchors) made for a 22-layer llama with GQA 2 and tied embeddings, checked
// by benchmarks/dequant_vs_llama.sh's model and docs/kernels.md; here the rules alone.
TEST(Quantize, LlamaFileTypeRules) {
  using tensor::DType;
  const model::QuantModelShape shape{22, 2, false};
  auto type_of = [&](const char* recipe, const std::string& name) {
    return model::quant_type_for(name, {512, 512}, *model::quant_recipe(recipe), shape);
  };
  auto layers_with = [&](const char* recipe, const char* tensor, DType t) {
    std::vector<int> out;
    for (int i = 0; i < 22; ++i) {
      if (type_of(recipe, "blk." + std::to_string(i) + "." + tensor + ".weight") == t) out.push_back(i);
    }
    return out;
  };
  const std::vector<int> more_bits = {0, 1, 4, 7, 10, 13, 16, 19, 20, 21};  // llama-quantize's Q4_K_M / Q5_K_M
  EXPECT_EQ(layers_with("q4_k_m", "attn_v", DType::q6_k), more_bits);
  EXPECT_EQ(layers_with("q4_k_m", "ffn_down", DType::q6_k), more_bits);
  EXPECT_EQ(layers_with("Q5_K_M", "ffn_down", DType::q6_k), more_bits);
  EXPECT_EQ(type_of("q4_k_m", "blk.3.attn_q.weight"), DType::q4_k);
  EXPECT_EQ(type_of("q4_k_m", "token_embd.weight"), DType::q6_k);  // tied: the output rule
  EXPECT_EQ(type_of("q8_0", "token_embd.weight"), DType::q8_0);
  EXPECT_EQ(layers_with("q4_k_s", "attn_v", DType::q5_k), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(layers_with("q4_k_s", "ffn_down", DType::q5_k), (std::vector<int>{0, 1}));
  EXPECT_EQ(layers_with("q3_k_m", "attn_v", DType::q5_k), (std::vector<int>{0, 1}));
  EXPECT_EQ(layers_with("q3_k_m", "ffn_down", DType::q5_k), (std::vector<int>{0}));
  EXPECT_EQ(type_of("q3_k_m", "blk.9.ffn_down.weight"), DType::q4_k);
  EXPECT_EQ(type_of("q3_k_m", "blk.9.attn_output.weight"), DType::q4_k);
  EXPECT_EQ(type_of("q3_k_l", "blk.9.attn_output.weight"), DType::q5_k);
  EXPECT_EQ(type_of("q2_k", "blk.9.attn_v.weight"), DType::q3_k);
  EXPECT_EQ(type_of("q2_k", "blk.9.ffn_gate.weight"), DType::q2_k);
  EXPECT_EQ(layers_with("iq4_xs", "ffn_down", DType::q5_k), (std::vector<int>{0, 1}));
  // Shape-dependent rules: GQA >= 4, a separate output matrix, rows that fit no K-quant.
  const model::QuantModelShape gqa8{22, 8, true};
  EXPECT_EQ(model::quant_type_for("blk.5.attn_v.weight", {512, 512}, *model::quant_recipe("q2_k"), gqa8), DType::q4_k);
  EXPECT_EQ(model::quant_type_for("token_embd.weight", {512, 512}, *model::quant_recipe("q4_k_m"), gqa8), DType::q4_k);
  EXPECT_EQ(model::quant_type_for("output.weight", {512, 512}, *model::quant_recipe("q4_k_m"), gqa8), DType::q6_k);
  EXPECT_EQ(model::quant_type_for("output.weight", {288, 512}, *model::quant_recipe("q4_k_m"), gqa8), DType::q8_0);
  EXPECT_EQ(model::quant_type_for("blk.0.attn_v.weight", {288, 512}, *model::quant_recipe("q4_k_m"), gqa8),
            DType::q8_0);
  // Uniform recipes and names.
  EXPECT_EQ(type_of("q4_k", "blk.0.attn_v.weight"), DType::q4_k);
  EXPECT_EQ(type_of("q4_k", "token_embd.weight"), DType::q4_k);
  EXPECT_EQ(model::quant_recipe("q4_k_m")->file_type, 15);
  EXPECT_EQ(model::quant_recipe("Q5_K_S")->file_type, 16);
  EXPECT_FALSE(model::quant_recipe("q4_k_x"));
  EXPECT_NE(model::quant_recipe_names().find("q4_k_m"), std::string::npos);
}

TEST(Quantize, CliRoundTrip) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  std::string out;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " quantize " + test::stories_gguf() + " " + dir +
                                  "/q.gguf --type q8_0",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("q8_0"), std::string::npos);
  ASSERT_EQ(test::run_command(test::treespec_binary() + " expand -m " + dir + "/q.gguf -o " + dir +
                                  "/e.gguf --dim 128 --ffn 192 --layers 6",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("source layers at"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::treespec_binary() + " quantize " + test::stories_gguf() + " " + dir +
                                  "/x.gguf --type iq2_xxs 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("q4_k_m"), std::string::npos) << out;  // the error lists the known names
  ASSERT_EQ(test::run_command(test::treespec_binary() + " quantize " + test::stories_gguf() + " " + dir +
                                  "/m.gguf --type Q4_K_M",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("q4_k_m"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " run -m " + dir +
                                  "/m.gguf -p 'Once upon a time' -n 8 --temp 0",
                              &out),
            0)
      << out;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " membw --mib 16 --reps 1", &out), 0);
  EXPECT_NE(out.find("GB/s"), std::string::npos);
}

}  // namespace
