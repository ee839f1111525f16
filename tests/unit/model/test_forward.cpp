// Forward-pass properties on tiny random models: prefill == step-by-step decode, every
// tree node's logits == decoding its root-to-node path alone, batching sequences with
// different lengths and trees == running each alone, commit == sequential decoding.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "kv/kv_cache.h"
#include "model/model.h"

using namespace treespec;
using treespec::test::random_tokens;

namespace {

// Max |a - b| relative to the scale of the logits.
constexpr float kTol = 2e-4f;

struct Fixture {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<model::ForwardContext> ctx;
  std::unique_ptr<kv::KvCache> kv;
  int32_t V = 0;

  Fixture(const test::TinyModelConfig& cfg, int32_t n_seq = 2, int32_t n_cells = 256, int32_t threads = 2) {
    const std::string path = test::temp_dir() + "/tiny.gguf";
    test::write_tiny_model(path, cfg);
    m = model::Model::load(path);
    ctx = std::make_unique<model::ForwardContext>(*m, threads);
    kv = std::make_unique<kv::KvCache>(m->kv_shape(n_seq, n_cells));
    V = m->hparams().n_vocab;
  }

  // Logits of every row of a chain appended to seq's committed prefix; commits all rows.
  std::vector<float> chain(int32_t seq, const std::vector<int32_t>& toks, bool commit = true) {
    model::Batch b;
    b.add_chain(seq, kv->n_past(seq), toks);
    std::vector<float> logits(toks.size() * static_cast<size_t>(V));
    EXPECT_TRUE(m->forward(*ctx, b, *kv, {}, logits.data()).ok());
    if (commit) {
      std::vector<int32_t> path(toks.size());
      for (size_t i = 0; i < toks.size(); ++i) path[i] = static_cast<int32_t>(i);
      EXPECT_TRUE(kv->commit(seq, path).ok());
    }
    return logits;
  }
};

float max_abs_diff(const float* a, const float* b, int32_t n) {
  float d = 0.0f;
  for (int32_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

tree::TokenTree random_tree(core::Rng& rng, int32_t n_nodes, int32_t max_depth, int32_t V, int shape) {
  tree::TokenTree t(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))));
  while (t.size() < n_nodes) {
    int32_t parent;
    if (shape == 0) {  // uniform random parent
      parent = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size())));
    } else if (shape == 1) {  // deep: prefer the newest nodes
      parent = t.size() - 1 - static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(std::min(t.size(), 3))));
    } else {  // wide: prefer shallow nodes
      parent = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(std::min(t.size(), 4))));
    }
    while (t.depth(parent) >= max_depth)
      parent = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size())));
    t.add(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))), parent);
  }
  return t;
}

}  // namespace

TEST(Forward, PrefillEqualsStepByStepDecode) {
  for (int threads : {1, 2}) {
    Fixture f({}, 2, 256, threads);
    core::Rng rng(3);
    const auto toks = random_tokens(rng, 17, f.V);
    const auto pre = f.chain(0, toks);
    for (size_t i = 0; i < toks.size(); ++i) {
      const auto one = f.chain(1, {toks[i]});
      ASSERT_LT(max_abs_diff(pre.data() + i * f.V, one.data(), f.V), kTol) << "row " << i << " threads " << threads;
    }
  }
}

TEST(Forward, ChainTreeEqualsCausalDecoding) {
  Fixture f({});
  core::Rng rng(5);
  const auto prefix = random_tokens(rng, 9, f.V);
  const auto cont = random_tokens(rng, 6, f.V);
  f.chain(0, prefix);
  f.chain(1, prefix);
  const auto t = tree::TokenTree::chain(cont[0], std::span<const int32_t>(cont).subspan(1));
  model::Batch b;
  b.add_tree(0, f.kv->n_past(0), t);
  std::vector<float> tl(static_cast<size_t>(t.size()) * f.V);
  ASSERT_TRUE(f.m->forward(*f.ctx, b, *f.kv, {}, tl.data()).ok());
  const auto causal = f.chain(1, cont);
  for (int32_t i = 0; i < t.size(); ++i) {
    ASSERT_LT(max_abs_diff(tl.data() + i * f.V, causal.data() + i * f.V, f.V), kTol) << "node " << i;
  }
}

// Every node's logits equal those of decoding its root-to-node path alone, for several
// tree shapes, depths up to 8 and up to 64 nodes, with f32 and f16 weights and GQA.
TEST(Forward, TreeNodeLogitsEqualPathDecoding) {
  for (auto wtype : {tensor::DType::f32, tensor::DType::f16}) {
    test::TinyModelConfig cfg;
    cfg.wtype = wtype;
    Fixture f(cfg, 2, 256);
    core::Rng rng(11);
    const auto prefix = random_tokens(rng, 13, f.V);
    f.chain(0, prefix);
    for (int shape = 0; shape < 3; ++shape) {
      for (int32_t n_nodes : {2, 9, 33, 64}) {
        const auto t = random_tree(rng, n_nodes, 8, f.V, shape);
        model::Batch b;
        b.add_tree(0, f.kv->n_past(0), t);
        std::vector<float> tl(static_cast<size_t>(t.size()) * f.V);
        ASSERT_TRUE(f.m->forward(*f.ctx, b, *f.kv, {}, tl.data()).ok());
        for (int32_t node = 0; node < t.size(); node += 1 + node % 3) {
          // Decode the path alone on seq 1 from the same prefix.
          f.kv->clear(1);
          f.chain(1, prefix);
          std::vector<int32_t> path_toks;
          for (int32_t k : t.path_to(node)) path_toks.push_back(t.token(k));
          const auto causal = f.chain(1, path_toks, false);
          ASSERT_LT(max_abs_diff(tl.data() + node * f.V, causal.data() + (path_toks.size() - 1) * f.V, f.V), kTol)
              << "shape " << shape << " nodes " << n_nodes << " node " << node;
        }
      }
    }
  }
}

TEST(Forward, TwoSequencesInOneBatchEqualEachAlone) {
  Fixture f({}, 4, 128);
  core::Rng rng(21);
  const auto p0 = random_tokens(rng, 5, f.V);
  const auto p1 = random_tokens(rng, 23, f.V);
  f.chain(0, p0);
  f.chain(1, p1);
  f.chain(2, p0);
  f.chain(3, p1);
  const auto t0 = random_tree(rng, 12, 5, f.V, 0);
  const auto t1 = random_tree(rng, 30, 8, f.V, 1);
  model::Batch both;
  both.add_tree(0, f.kv->n_past(0), t0);
  both.add_tree(1, f.kv->n_past(1), t1);
  std::vector<float> lb(static_cast<size_t>(both.n_rows()) * f.V);
  ASSERT_TRUE(f.m->forward(*f.ctx, both, *f.kv, {}, lb.data()).ok());
  model::Batch a0, a1;
  a0.add_tree(2, f.kv->n_past(2), t0);
  a1.add_tree(3, f.kv->n_past(3), t1);
  std::vector<float> l0(static_cast<size_t>(t0.size()) * f.V), l1(static_cast<size_t>(t1.size()) * f.V);
  ASSERT_TRUE(f.m->forward(*f.ctx, a0, *f.kv, {}, l0.data()).ok());
  ASSERT_TRUE(f.m->forward(*f.ctx, a1, *f.kv, {}, l1.data()).ok());
  for (int32_t i = 0; i < t0.size(); ++i) ASSERT_LT(max_abs_diff(lb.data() + i * f.V, l0.data() + i * f.V, f.V), kTol);
  for (int32_t i = 0; i < t1.size(); ++i) {
    ASSERT_LT(max_abs_diff(lb.data() + (t0.size() + i) * f.V, l1.data() + i * f.V, f.V), kTol);
  }
}

// After committing an accepted path, the cache is the same as decoding it sequentially.
TEST(Forward, CommitEqualsSequentialDecoding) {
  Fixture f({}, 2, 128);
  core::Rng rng(31);
  const auto prefix = random_tokens(rng, 7, f.V);
  f.chain(0, prefix);
  f.chain(1, prefix);
  const auto t = random_tree(rng, 40, 6, f.V, 0);
  int32_t deepest = 0;
  for (int32_t i = 0; i < t.size(); ++i) deepest = t.depth(i) > t.depth(deepest) ? i : deepest;
  model::Batch b;
  b.add_tree(0, f.kv->n_past(0), t);
  std::vector<float> tl(static_cast<size_t>(t.size()) * f.V);
  ASSERT_TRUE(f.m->forward(*f.ctx, b, *f.kv, {}, tl.data()).ok());
  const auto path = t.path_to(deepest);
  ASSERT_TRUE(f.kv->commit(0, path).ok());
  std::vector<int32_t> path_toks;
  for (int32_t k : path) path_toks.push_back(t.token(k));
  f.chain(1, path_toks);
  ASSERT_EQ(f.kv->n_past(0), f.kv->n_past(1));
  const auto next = random_tokens(rng, 3, f.V);
  const auto a = f.chain(0, next);
  const auto c = f.chain(1, next);
  for (int32_t i = 0; i < 3; ++i) ASSERT_LT(max_abs_diff(a.data() + i * f.V, c.data() + i * f.V, f.V), kTol);
}

// Early pruning shape: layers [0, l) on all rows, then [l, L) on an ancestor-closed
// subset gives the same logits for the survivors as the full forward.
TEST(Forward, LayerRangesWithRowSubsetMatchFullForward) {
  test::TinyModelConfig cfg;
  cfg.n_layer = 4;
  Fixture f(cfg, 2, 128);
  core::Rng rng(41);
  const auto prefix = random_tokens(rng, 6, f.V);
  f.chain(0, prefix);
  const auto t = random_tree(rng, 24, 5, f.V, 0);
  model::Batch full;
  full.add_tree(0, f.kv->n_past(0), t);
  std::vector<float> lf(static_cast<size_t>(t.size()) * f.V);
  ASSERT_TRUE(f.m->forward(*f.ctx, full, *f.kv, {}, lf.data()).ok());

  // Keep the nodes whose parent is kept and whose index is not divisible by 3.
  std::vector<bool> keep(static_cast<size_t>(t.size()), false);
  std::vector<int32_t> kept;
  for (int32_t i = 0; i < t.size(); ++i) {
    keep[static_cast<size_t>(i)] = i == 0 || (keep[static_cast<size_t>(t.parent(i))] && i % 3 != 0);
    if (keep[static_cast<size_t>(i)]) kept.push_back(i);
  }
  const int32_t E = f.m->hparams().n_embd;
  std::vector<float> x(static_cast<size_t>(t.size()) * E);
  f.m->embed(full, x.data());
  ASSERT_TRUE(f.m->run_layers(*f.ctx, full, 0, 2, x.data(), *f.kv).ok());
  model::Batch sub;
  sub.add_tree_rows(0, f.kv->n_past(0), t, kept);
  std::vector<float> xs(kept.size() * static_cast<size_t>(E));
  for (size_t k = 0; k < kept.size(); ++k) {
    std::copy_n(x.data() + static_cast<size_t>(kept[k]) * E, E, xs.data() + k * E);
  }
  ASSERT_TRUE(f.m->run_layers(*f.ctx, sub, 2, 4, xs.data(), *f.kv).ok());
  std::vector<float> xn(kept.size() * static_cast<size_t>(E)), ls(kept.size() * static_cast<size_t>(f.V));
  f.m->final_norm(xs.data(), static_cast<int32_t>(kept.size()), {}, xn.data());
  f.m->lm_head(*f.ctx, xn.data(), static_cast<int32_t>(kept.size()), ls.data());
  for (size_t k = 0; k < kept.size(); ++k) {
    ASSERT_LT(max_abs_diff(ls.data() + k * f.V, lf.data() + static_cast<size_t>(kept[k]) * f.V, f.V), kTol)
        << "node " << kept[k];
  }
}

TEST(Forward, FullCacheIsAStatusNotACrash) {
  Fixture f({}, 1, 8);
  core::Rng rng(1);
  f.chain(0, random_tokens(rng, 6, f.V));
  model::Batch b;
  const auto t = random_tree(rng, 5, 3, f.V, 0);
  b.add_tree(0, f.kv->n_past(0), t);
  std::vector<float> l(static_cast<size_t>(t.size()) * f.V);
  const Status st = f.m->forward(*f.ctx, b, *f.kv, {}, l.data());
  EXPECT_EQ(st.code(), StatusCode::context_full);
  EXPECT_NE(st.message().find("sequence 0"), std::string::npos);
  EXPECT_EQ(f.kv->n_past(0), 6);
}

TEST(Forward, QkvBiasAndTiedOutputLoad) {
  test::TinyModelConfig cfg;
  cfg.qkv_bias = true;
  cfg.tied = true;
  Fixture f(cfg);
  EXPECT_TRUE(f.m->hparams().has_qkv_bias);
  EXPECT_TRUE(f.m->hparams().tied_output);
  core::Rng rng(2);
  const auto toks = random_tokens(rng, 5, f.V);
  const auto pre = f.chain(0, toks);
  for (size_t i = 0; i < toks.size(); ++i) {
    const auto one = f.chain(1, {toks[i]});
    ASSERT_LT(max_abs_diff(pre.data() + i * f.V, one.data(), f.V), kTol);
  }
}
