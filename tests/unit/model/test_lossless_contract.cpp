// The lossless contract, end to end through the forward pass: every row of a tree
// forward gives bit-for-bit the logits of the one-row decode step that reaches the same
// context (the committed prefix, then the row's ancestors committed one step at a time),
// for every weight type we compute, at realistic widths (n_embd 2048, n_ff 5632, 16
// heads of 128 over 8 KV heads: every matmul tile, tail and prefetch path and the
// 128-cell attention chunks run), for random trees of 1..64 rows at random committed
// lengths, with the tree and the reference on different thread counts (1 vs 2), with
// another sequence's rows sharing the forward pass, logits rows gathered in any order,
// and the KV cells a committed path leaves equal to those the one-row steps leave.
//
// Greedy speculation emits exactly plain greedy output only if this holds bit for bit:
// a tolerance would hide the near ties that flip a token on quantised models
// (docs/kernels.md, "Batch invariance"). Every future kernel must keep it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tensor/dtype.h"

using namespace treespec;
using tensor::DType;
using treespec::test::random_tokens;

namespace {

// The KV cache type each weight type's case runs with, so every cache type is covered
// without more cases: f32 for the float weights (their reference path), bf16 with bf16,
// q8_0 for the types added for llama.cpp's files, f16 (the engine's default) otherwise.
DType cache_type_for(DType wtype) {
  switch (wtype) {
    case DType::f32:
    case DType::f16: return DType::f32;
    case DType::bf16: return DType::bf16;
    case DType::q5_k:
    case DType::iq4_xs: return DType::q8_0;
    default: return DType::f16;
  }
}

struct Wide {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<model::ForwardContext> ctx1, ctx2;
  std::unique_ptr<kv::KvCache> kv;
  int32_t V = 0;

  explicit Wide(DType wtype) {
    test::TinyModelConfig cfg;
    cfg.n_vocab = 384;
    cfg.n_embd = 2048;
    cfg.n_ff = 5632;
    cfg.n_head = 16;
    cfg.n_head_kv = 8;
    cfg.n_layer = 2;
    cfg.n_ctx = 1024;
    cfg.wtype = wtype;
    cfg.seed = 5 + static_cast<uint64_t>(wtype);
    const std::string path = test::temp_dir() + "/wide_" + tensor::dtype_name(wtype) + ".gguf";
    test::write_tiny_model(path, cfg);
    m = model::Model::load(path);
    ctx1 = std::make_unique<model::ForwardContext>(*m, 1);
    ctx2 = std::make_unique<model::ForwardContext>(*m, 2);
    kv::KvShape shape = m->kv_shape(2, 512);
    shape.type_k = shape.type_v = cache_type_for(wtype);
    kv = std::make_unique<kv::KvCache>(shape);
    V = m->hparams().n_vocab;
  }

  // K then V of cells [from, from + n) of `seq`, every layer and KV head.
  std::vector<float> cells(int32_t seq, int32_t from, int32_t n) const {
    const auto& sh = kv->shape();
    const size_t row = static_cast<size_t>(sh.n_head_kv) * static_cast<size_t>(sh.head_dim);
    std::vector<float> out, k(row), v(row);
    for (int32_t l = 0; l < sh.n_layer; ++l) {
      for (int32_t c = from; c < from + n; ++c) {
        kv->read_row(l, seq, c, k.data(), v.data());
        out.insert(out.end(), k.begin(), k.end());
        out.insert(out.end(), v.begin(), v.end());
      }
    }
    return out;
  }

  model::ForwardContext& ctx(int threads) { return threads == 1 ? *ctx1 : *ctx2; }

  // Appends and commits a causal chain to `seq` (any way of filling the prefix will do:
  // it is shared by the tree and the reference).
  void extend(int32_t seq, const std::vector<int32_t>& toks) {
    if (toks.empty()) return;
    model::Batch b;
    b.add_chain(seq, kv->n_past(seq), toks);
    std::vector<float> logits(toks.size() * static_cast<size_t>(V));
    ASSERT_TRUE(m->forward(*ctx2, b, *kv, {}, logits.data()).ok());
    std::vector<int32_t> path(toks.size());
    for (size_t i = 0; i < toks.size(); ++i) path[i] = static_cast<int32_t>(i);
    ASSERT_TRUE(kv->commit(seq, path).ok());
  }

  // One-row decode step of `tok` on `seq`; returns its logits (the row is not committed).
  std::vector<float> step(int32_t seq, int32_t tok, int threads) {
    model::Batch b;
    const int32_t t[1] = {tok};
    b.add_chain(seq, kv->n_past(seq), t);
    std::vector<float> logits(static_cast<size_t>(V));
    EXPECT_TRUE(m->forward(ctx(threads), b, *kv, {}, logits.data()).ok());
    return logits;
  }
};

// Mixed shapes: half the nodes extend the newest node (deep chains), the rest pick any
// parent (wide fans), so depths run from 0 to ~n/2.
tree::TokenTree random_tree(core::Rng& rng, int32_t n_nodes, int32_t V) {
  tree::TokenTree t(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))));
  while (t.size() < n_nodes) {
    const int32_t parent =
        rng.uniform() < 0.5 ? t.size() - 1 : static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size())));
    t.add(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))), parent);
  }
  return t;
}

// Depth-first over the tree on `seq`: at node u the committed cells are the prefix plus
// u's ancestors, each committed from its own one-row step, exactly as plain decoding
// would have them. Compares u's one-row logits with its row of the tree forward.
void check_subtree(Wide& w, int32_t seq, const tree::TokenTree& t, int32_t u, const std::vector<float>& tree_logits,
                   int threads, const std::string& what, int* n_checked) {
  const std::vector<float> one = w.step(seq, t.token(u), threads);
  const float* row = tree_logits.data() + static_cast<size_t>(u) * w.V;
  for (int32_t i = 0; i < w.V; ++i) {
    ASSERT_EQ(row[i], one[static_cast<size_t>(i)])
        << what << ": tree row " << u << " (depth " << t.depth(u) << ") logit " << i
        << " differs from the one-row step over the same context";
  }
  ++*n_checked;
  if (t.children(u).empty()) return;
  const int32_t keep = w.kv->n_past(seq);
  const int32_t self[1] = {0};
  ASSERT_TRUE(w.kv->commit(seq, self).ok());
  for (int32_t c : t.children(u)) {
    check_subtree(w, seq, t, c, tree_logits, threads, what, n_checked);
    if (::testing::Test::HasFatalFailure()) return;
  }
  w.kv->truncate(seq, keep);
}

void check_type(DType wtype) {
  Wide w(wtype);
  core::Rng rng(100 + static_cast<uint64_t>(wtype));
  // Sequence 1 carries other rows through the same forward passes.
  w.extend(1, random_tokens(rng, 7, w.V));
  const auto other = random_tree(rng, 5, w.V);
  // Committed lengths: short, around the 128-cell attention chunk, past it.
  const int32_t lengths[] = {static_cast<int32_t>(rng.uniform_int(6)), 126, 200};
  const int32_t sizes[] = {64, 23, 1, 40};
  int n_checked = 0, k = 0;
  for (int32_t len : lengths) {
    w.extend(0, random_tokens(rng, len - w.kv->n_past(0), w.V));
    for (int rep = 0; rep < 2; ++rep, ++k) {
      const int32_t n_nodes = sizes[k % 4];
      const int tree_threads = k % 2 == 0 ? 2 : 1;
      const auto t = random_tree(rng, n_nodes, w.V);
      model::Batch b;
      const bool with_other = k % 3 != 2;
      if (with_other && k % 2 == 0) b.add_tree(1, w.kv->n_past(1), other);
      b.add_tree(0, w.kv->n_past(0), t);
      if (with_other && k % 2 == 1) b.add_tree(1, w.kv->n_past(1), other);
      std::vector<float> all(static_cast<size_t>(b.n_rows()) * w.V);
      // Every other tree gathers its logits rows in reverse (the engine asks for row subsets).
      std::vector<int32_t> out_rows;
      if (k % 2 == 1) {
        for (int32_t r = b.n_rows() - 1; r >= 0; --r) out_rows.push_back(r);
      }
      {
        std::vector<float> got(all.size());
        ASSERT_TRUE(w.m->forward(w.ctx(tree_threads), b, *w.kv, out_rows, got.data()).ok());
        for (int32_t i = 0; i < b.n_rows(); ++i) {
          const int32_t r = out_rows.empty() ? i : out_rows[static_cast<size_t>(i)];
          std::copy_n(got.begin() + static_cast<ptrdiff_t>(i) * w.V, w.V,
                      all.begin() + static_cast<ptrdiff_t>(r) * w.V);
        }
      }
      const int32_t first = with_other && k % 2 == 0 ? other.size() : 0;
      const std::vector<float> tl(all.begin() + static_cast<ptrdiff_t>(first) * w.V,
                                  all.begin() + static_cast<ptrdiff_t>(first + t.size()) * w.V);
      const std::string what =
          std::string(tensor::dtype_name(wtype)) + " (KV " + tensor::dtype_name(cache_type_for(wtype)) + "), " +
          std::to_string(len) + " committed, tree of " + std::to_string(n_nodes) + " on " +
          std::to_string(tree_threads) + " thread(s)" + (with_other ? " beside another sequence" : "");
      check_subtree(w, 0, t, 0, tl, 3 - tree_threads, what, &n_checked);
      if (::testing::Test::HasFatalFailure()) return;
      ASSERT_EQ(w.kv->n_past(0), len);
      // KV commit: the deepest path's cells committed from the tree forward equal those the
      // one-row steps commit, in every layer.
      int32_t deepest = 0;
      for (int32_t i = 0; i < t.size(); ++i) deepest = t.depth(i) > t.depth(deepest) ? i : deepest;
      const std::vector<int32_t> path = t.path_to(deepest);
      const int32_t one[1] = {0};
      for (int32_t node : path) {
        w.step(0, t.token(node), 3 - tree_threads);
        ASSERT_TRUE(w.kv->commit(0, one).ok());
      }
      const std::vector<float> want = w.cells(0, len, static_cast<int32_t>(path.size()));
      w.kv->truncate(0, len);
      ASSERT_TRUE(w.m->forward(w.ctx(tree_threads), b, *w.kv, {}, all.data()).ok());
      ASSERT_TRUE(w.kv->commit(0, path).ok());
      const std::vector<float> got = w.cells(0, len, static_cast<int32_t>(path.size()));
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << ": committed KV differs at " << i;
      w.kv->truncate(0, len);
    }
  }
  EXPECT_GT(n_checked, 100);
}

class LosslessContract : public ::testing::TestWithParam<DType> {};

TEST_P(LosslessContract, TreeRowsEqualOneRowStepsBitForBit) { check_type(GetParam()); }

// The same on the AVX2 float path (Q8_0 dequantised to f32 tiles instead of VNNI).
TEST(LosslessContractIsa, Avx2TreeRowsEqualOneRowSteps) {
  if (!kernels::isa_supported(kernels::Isa::avx2)) GTEST_SKIP() << "CPU lacks avx2";
  struct Restore {
    kernels::Isa saved = kernels::active_isa();
    ~Restore() { kernels::set_active_isa(saved); }
  } restore;
  kernels::set_active_isa(kernels::Isa::avx2);
  check_type(DType::q8_0);
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, LosslessContract,
                         // q5_k and iq4_xs stand for the types added for llama.cpp's files (their own
                         // int8 kernels); the float-path ones share f16's forward code.
                         ::testing::Values(DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_k,
                                           DType::q6_k, DType::q5_k, DType::iq4_xs),
                         [](const auto& info) { return std::string(tensor::dtype_name(info.param)); });

}  // namespace
