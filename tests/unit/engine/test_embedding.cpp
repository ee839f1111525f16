// engine::embed_tokens: pooled final-norm hidden states, checked against the model's own
// forward pass (Model::forward's normed rows), for each pooling; the result is the same
// bit for bit for any prefill chunk size and thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "engine/embedding.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

// The normed hidden state of every token, from one Model::forward over the whole prompt.
std::vector<std::vector<float>> normed_rows(const model::Model& m, const std::vector<int32_t>& toks) {
  model::ForwardContext ctx(m, 1);
  kv::KvCache kv(m.kv_shape(1, static_cast<int32_t>(toks.size())));
  model::Batch b;
  b.add_chain(0, 0, toks);
  const auto n = static_cast<int32_t>(toks.size());
  const auto E = static_cast<size_t>(m.hparams().n_embd);
  std::vector<int32_t> rows(toks.size());
  for (int32_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = i;
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(m.hparams().n_vocab)),
      normed(static_cast<size_t>(n) * E);
  EXPECT_TRUE(kv.reserve(0, n).ok());
  EXPECT_TRUE(m.forward(ctx, b, kv, rows, logits.data(), normed.data()).ok());
  std::vector<std::vector<float>> out;
  for (int32_t i = 0; i < n; ++i)
    out.emplace_back(normed.begin() + static_cast<ptrdiff_t>(i * E),
                     normed.begin() + static_cast<ptrdiff_t>((i + 1) * E));
  return out;
}

std::vector<double> unit(std::vector<double> v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  for (double& x : v) x /= std::sqrt(s);
  return v;
}

}  // namespace

TEST(Embedding, PoolsTheModelsNormedHiddenStatesAndIsUnitLength) {
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const std::vector<int32_t> toks = tok->encode("And it came to pass, when the king of Israel heard", true, true);
  ASSERT_GT(toks.size(), 8u);
  const auto rows = normed_rows(*m, toks);
  const size_t E = rows[0].size();
  model::ForwardContext ctx(*m, 1);
  for (engine::Pooling p : {engine::Pooling::mean, engine::Pooling::cls, engine::Pooling::last}) {
    std::vector<double> want(E, 0.0);
    for (size_t r = 0; r < rows.size(); ++r) {
      const bool take = p == engine::Pooling::mean || (p == engine::Pooling::cls && r == 0) ||
                        (p == engine::Pooling::last && r + 1 == rows.size());
      if (!take) continue;
      for (size_t i = 0; i < E; ++i) want[i] += rows[r][i];
    }
    want = unit(want);
    engine::EmbeddingParams ep;
    ep.pooling = p;
    ep.type_k = ep.type_v = tensor::DType::f32;
    const std::vector<float> got = engine::embed_tokens(*m, ctx, toks, ep, 256);
    ASSERT_EQ(got.size(), E);
    double norm = 0.0, err = 0.0;
    for (size_t i = 0; i < E; ++i) {
      norm += static_cast<double>(got[i]) * got[i];
      err = std::max(err, std::abs(got[i] - want[i]));
    }
    EXPECT_NEAR(norm, 1.0, 1e-5) << engine::pooling_name(p);
    EXPECT_LT(err, 1e-6) << engine::pooling_name(p);
  }
}

TEST(Embedding, SameBitsForAnyChunkSizeAndThreadCount) {
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const std::vector<int32_t> toks =
      tok->encode("In the beginning God created the heaven and the earth. And the earth was without form", true, true);
  model::ForwardContext one(*m, 1), two(*m, 2);
  engine::EmbeddingParams a, b;
  b.n_batch = 3;
  const auto ref = engine::embed_tokens(*m, one, toks, a, 256);
  EXPECT_EQ(engine::embed_tokens(*m, one, toks, b, 256), ref);
  EXPECT_EQ(engine::embed_tokens(*m, two, toks, a, 256), ref);
  EXPECT_EQ(engine::embed_tokens(*m, two, toks, b, 256), ref);
  // A different text gives a different vector.
  EXPECT_NE(engine::embed_tokens(*m, one, tok->encode("And Moses said", true, true), a, 256), ref);
}

TEST(Embedding, BadInputAndPoolingNamesAreErrors) {
  auto m = model::Model::load(test::kKjvModel);
  model::ForwardContext ctx(*m, 1);
  engine::EmbeddingParams p;
  EXPECT_THROW(engine::embed_tokens(*m, ctx, {}, p, 256), InvalidArgument);
  const std::vector<int32_t> bad = {1, m->hparams().n_vocab};
  EXPECT_THROW(engine::embed_tokens(*m, ctx, bad, p, 256), InvalidArgument);
  const std::vector<int32_t> longer(9, 5);
  EXPECT_THROW(engine::embed_tokens(*m, ctx, longer, p, 8), InvalidArgument);
  EXPECT_EQ(engine::parse_pooling("last"), engine::Pooling::last);
  for (const char* name : {"none", "rank", "MEAN", ""})
    EXPECT_THROW(engine::parse_pooling(name), InvalidArgument) << name;
}
