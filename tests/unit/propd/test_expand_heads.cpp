// Heads widened for a function-preserving expansion give identical logits on the padded
// hidden state; prune heads and recall tables follow the layer map.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "drafters/propd/expand_heads.h"
#include "propd_test_util.h"

using namespace treespec;

TEST(ExpandHeads, WidenedHeadsGiveIdenticalLogitsOnThePaddedState) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const int32_t n = ps.heads->n_embd(), V = ps.heads->n_vocab(), N = 4 * n, L = 22;
  const std::vector<int32_t> map = {2, 6, 11, 15, 19};  // docs/expand.md's 5 -> 22
  const auto e = drafters::expand_heads(*ps.heads, ps.prune.get(), N, L, map, "fnv1a64:0123456789abcdef");
  ASSERT_EQ(e.medusa->n_embd(), N);
  EXPECT_EQ(e.medusa->info().hidden_layer, L);
  EXPECT_EQ(e.medusa->info().base_output_hash, "fnv1a64:0123456789abcdef");
  EXPECT_EQ(e.medusa->info().calibration, ps.heads->info().calibration);  // same predictions, same table
  core::Rng rng(9);
  const int32_t M = 7;
  std::vector<float> h(static_cast<size_t>(M) * n), hp(static_cast<size_t>(M) * N, 0.0f);
  for (int32_t r = 0; r < M; ++r) {
    for (int32_t i = 0; i < n; ++i) h[static_cast<size_t>(r * n + i)] = hp[static_cast<size_t>(r * N + i)] = static_cast<float>(rng.normal());
  }
  std::vector<float> work(2 * static_cast<size_t>(M) * N), a(static_cast<size_t>(M) * V), b(a.size());
  for (int32_t k = 0; k < ps.heads->n_heads(); ++k) {
    ps.heads->forward(k, h.data(), M, work.data(), a.data(), nullptr);
    e.medusa->forward(k, hp.data(), M, work.data(), b.data(), nullptr);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::abs(a[i]))) << "head " << k << " logit " << i;
  }
  // Prune heads: after l source layers -> after map[l-1] + 1 expanded layers.
  ASSERT_NE(e.prune, nullptr);
  EXPECT_EQ(e.prune->calib.head_layers, (std::vector<int32_t>{7, 12, 16}));  // source 2, 3, 4
  for (const auto& [src_l, nl] : std::vector<std::pair<int32_t, int32_t>>{{2, 7}, {3, 12}, {4, 16}}) {
    const auto& hs = *ps.prune->heads.at(src_l);
    const auto& he = *e.prune->heads.at(nl);
    EXPECT_EQ(he.layer(), nl);
    hs.logits_normed(*ps.m.model, h.data(), M, work.data(), a.data(), nullptr);
    he.logits_normed(*ps.m.model, hp.data(), M, work.data(), b.data(), nullptr);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::abs(a[i]))) << "prune head " << src_l;
    for (int32_t k = 1; k <= ps.prune->calib.top_k; ++k) EXPECT_EQ(e.prune->calib.head(nl, k), ps.prune->calib.head(src_l, k));
  }
  // Lens table: expanded layer l' holds the source row of the real layers below it.
  const auto& c0 = ps.prune->calib;
  const auto& c = e.prune->calib;
  EXPECT_EQ(c.lens_layers(), L);
  EXPECT_EQ(c.lens(0, 5), c0.lens(0, 5));
  EXPECT_EQ(c.lens(2, 5), c0.lens(0, 5));   // layers 0, 1 are pass-throughs
  EXPECT_EQ(c.lens(3, 5), c0.lens(1, 5));   // after real layer 0 (at 2)
  EXPECT_EQ(c.lens(7, 5), c0.lens(2, 5));
  EXPECT_EQ(c.lens(19, 5), c0.lens(4, 5));
  EXPECT_EQ(c.lens(20, 5), 1.0f);           // after the last real layer: the final state
  EXPECT_EQ(c.default_layer, c0.default_layer > 0 ? map[static_cast<size_t>(c0.default_layer - 1)] + 1 : 0);
  // Bad maps are refused.
  EXPECT_THROW(drafters::expand_heads(*ps.heads, nullptr, N, L, {2, 6, 11}, "x"), InvalidArgument);
  EXPECT_THROW(drafters::expand_heads(*ps.heads, nullptr, N, L, {2, 6, 6, 15, 19}, "x"), InvalidArgument);
  EXPECT_THROW(drafters::expand_heads(*ps.heads, nullptr, n / 2, L, map, "x"), InvalidArgument);
}
