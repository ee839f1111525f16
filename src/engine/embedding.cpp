#include "engine/embedding.h"

#include <fmt/format.h>

#include <cmath>

#include "kv/kv_cache.h"
#include "model/batch.h"
#include "treespec/status.h"

namespace treespec::engine {

Pooling parse_pooling(const std::string& name) {
  if (name == "mean") return Pooling::mean;
  if (name == "cls") return Pooling::cls;
  if (name == "last") return Pooling::last;
  throw InvalidArgument(fmt::format("--pooling '{}' is not one of mean, cls, last (sentence embeddings)", name));
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::mean: return "mean";
    case Pooling::cls: return "cls";
    case Pooling::last: return "last";
  }
  return "?";
}

std::vector<float> embed_tokens(const model::Model& m, model::ForwardContext& ctx, std::span<const int32_t> tokens,
                                const EmbeddingParams& p, int32_t n_ctx_max) {
  const auto& hp = m.hparams();
  const auto n = static_cast<int32_t>(tokens.size());
  if (n == 0) throw InvalidArgument("nothing to embed: the input has no tokens");
  if (n > n_ctx_max)
    throw InvalidArgument(fmt::format("the input has {} tokens but the context holds {}", n, n_ctx_max));
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab)
      throw InvalidArgument(fmt::format("token id {} is outside the vocabulary (0..{})", t, hp.n_vocab - 1));
  }
  if (p.n_batch < 1) throw InvalidArgument(fmt::format("embedding batch must be >= 1, got {}", p.n_batch));
  kv::KvShape shape = m.kv_shape(1, n);
  shape.type_k = p.type_k;
  shape.type_v = p.type_v;
  kv::KvCache kv(shape);
  const auto E = static_cast<size_t>(hp.n_embd);
  // Sums in double, in token order: the same result for any chunking or thread count.
  std::vector<double> acc(E, 0.0);
  std::vector<float> normed;
  model::Batch batch;
  for (int32_t b = 0; b < n; b += p.n_batch) {
    const int32_t k = std::min(p.n_batch, n - b);
    batch.clear();
    batch.add_chain(0, kv.n_past(0), tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(k)));
    Status st = kv.reserve(0, k);
    if (!st.ok()) throw Error("embeddings: " + st.message());
    ctx.reserve(k, n);
    float* x = ctx.x();
    m.embed(batch, x);
    st = m.run_layers(ctx, batch, 0, hp.n_layer, x, kv);
    if (!st.ok()) throw Error("embeddings: " + st.message());
    normed.resize(static_cast<size_t>(k) * E);
    m.final_norm(x, k, {}, normed.data());
    for (int32_t r = 0; r < k; ++r) {
      const int32_t t = b + r;
      const bool take = p.pooling == Pooling::mean || (p.pooling == Pooling::cls && t == 0) ||
                        (p.pooling == Pooling::last && t == n - 1);
      if (!take) continue;
      const float* row = normed.data() + static_cast<size_t>(r) * E;
      for (size_t i = 0; i < E; ++i) acc[i] += row[i];
    }
    std::vector<int32_t> chain(static_cast<size_t>(k));
    for (int32_t i = 0; i < k; ++i) chain[static_cast<size_t>(i)] = i;
    st = kv.commit(0, chain);
    if (!st.ok()) throw Error("embeddings: " + st.message());
  }
  if (p.pooling == Pooling::mean) {
    for (double& v : acc) v /= static_cast<double>(n);
  }
  double norm = 0.0;
  for (double v : acc) norm += v * v;
  norm = std::sqrt(norm);
  std::vector<float> out(E);
  for (size_t i = 0; i < E; ++i) out[i] = static_cast<float>(norm > 0.0 ? acc[i] / norm : 0.0);
  return out;
}

}  // namespace treespec::engine
