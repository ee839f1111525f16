// Lookahead drafter: parameters, the window's filling and Jacobi update, n-gram harvest,
// the verification trie, the attention pattern (checked against the reference
// implementation's mask and position ids), and the node budget. A synthetic model stands
// in for the forward pass: the "argmax" of every node is chosen by the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "drafters/factory.h"
#include "drafters/lookahead/lookahead_drafter.h"
#include "treespec/status.h"

using namespace treespec;
using drafters::LookaheadDrafter;
using drafters::LookaheadParams;
using V = std::vector<int32_t>;

namespace {

LookaheadParams params(int32_t n, int32_t w, int32_t g) {
  LookaheadParams p;
  p.ngram = n;
  p.window = w;
  p.guess = g;
  return p;
}

// Runs observe() with argmax[node] = f(node) and a greedy result that accepts nothing.
template <typename F>
void feed(LookaheadDrafter& d, const tree::TokenTree& t, const V& ctx, F&& f) {
  V am(static_cast<size_t>(t.size()));
  for (int32_t i = 0; i < t.size(); ++i) am[static_cast<size_t>(i)] = f(i);
  verify::VerifyResult res;
  res.path = {0};
  res.bonus = am[0];
  drafters::StepFeedback fb{t, res, am, {}, {}, ctx};
  d.observe(fb);
}

drafters::DraftInput input(const V& ctx, int32_t budget) {
  drafters::DraftInput in;
  in.context = ctx;
  in.n_past = static_cast<int32_t>(ctx.size()) - 1;
  in.budget = budget;
  return in;
}

// Fills the window (N - 2 steps) with arbitrary predictions; returns the context.
V fill(LookaheadDrafter& d, V ctx, int32_t budget) {
  int32_t next = 500;
  while (!d.window_full()) {
    const auto t = d.propose(input(ctx, budget));
    feed(d, t, ctx, [&](int32_t) { return next++; });
    ctx.push_back(next++);
  }
  return ctx;
}

}  // namespace

TEST(LookaheadParams, RejectsOutOfRangeValuesByName) {
  for (auto [p, what] : {std::pair{params(1, 7, 7), "n-gram size N"},
                         {params(17, 7, 7), "n-gram size N"},
                         {params(5, 0, 7), "window W"},
                         {params(5, 65, 7), "window W"},
                         {params(5, 7, 0), "guess set G"}}) {
    try {
      LookaheadDrafter d(p, 1);
      ADD_FAILURE() << "accepted " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(LookaheadDrafter(params(2, 1, 1), 1));
}

TEST(LookaheadFactory, MakesTheDrafterFromSpecConfig) {
  drafters::SpecConfig cfg;
  cfg.method = "lookahead";
  cfg.params<drafters::LookaheadParams>() = params(4, 3, 2);
  const auto d = drafters::make_drafter(cfg, {});
  EXPECT_EQ(d->name(), "lookahead");
  EXPECT_EQ(d->max_nodes(), 1 + 2 + 2 * 3 + 2 * 3);
  const auto methods = drafters::spec_methods();
  EXPECT_NE(std::find(methods.begin(), methods.end(), "lookahead"), methods.end());
}

// The reference code starts level 0 W + N - 3 wide and adds one level per step, each step
// dropping the first column of every level, until N - 1 levels of width W exist.
TEST(LookaheadWindow, FillsLevelByLevel) {
  const int32_t N = 5, W = 4;
  LookaheadDrafter d(params(N, W, 3), 7);
  const V prompt{1, 11, 12, 13, 14};
  d.begin(prompt);
  ASSERT_EQ(d.levels().size(), 1u);
  ASSERT_EQ(d.levels()[0].size(), static_cast<size_t>(W + N - 3));
  for (int32_t t : d.levels()[0]) EXPECT_NE(std::find(prompt.begin(), prompt.end(), t), prompt.end());
  V ctx = prompt;
  for (int32_t k = 0; k < N - 2; ++k) {
    const auto before = d.levels();
    const int32_t s = W + N - 3 - k;
    const auto t = d.propose(input(ctx, 1000));
    EXPECT_EQ(t.size(), 1 + s + k * (s + 1)) << "filling step " << k;
    EXPECT_EQ(t.n_candidates(), 0) << "no guesses before the window is full";
    EXPECT_LE(t.size(), d.max_nodes());
    feed(d, t, ctx, [](int32_t i) { return 1000 + i; });
    ASSERT_EQ(d.levels().size(), before.size() + 1);
    for (size_t l = 0; l < before.size(); ++l) EXPECT_EQ(d.levels()[l], V(before[l].begin() + 1, before[l].end()));
    // The new level: predictions at the old last level, columns 1..C-1.
    V want;
    for (int32_t c = 1; c < s + 1; ++c)
      want.push_back(1000 + d.window_node(static_cast<int32_t>(before.size()) - 1, c));
    EXPECT_EQ(d.levels().back(), want);
    ctx.push_back(42);
  }
  EXPECT_TRUE(d.window_full());
  EXPECT_EQ(d.levels()[0].size(), static_cast<size_t>(W - 1));
  for (int32_t l = 1; l < N - 1; ++l) EXPECT_EQ(d.levels()[static_cast<size_t>(l)].size(), static_cast<size_t>(W));
}

// Once full: one N-gram per column goes into the pool, keyed by the column's level-0
// token; the levels move down one and the predictions become the last level.
TEST(LookaheadWindow, HarvestsOneNgramPerColumnAndShifts) {
  for (int32_t N : {2, 3, 5}) {
    SCOPED_TRACE(N);
    const int32_t W = 4;
    LookaheadDrafter d(params(N, W, 8), 3);
    d.begin(V{1, 2, 3, 4, 5, 6});
    V ctx = fill(d, V{1, 2, 3, 4, 5, 6}, 1000);
    const int32_t root = ctx.back();
    const auto before = d.levels();
    const auto t = d.propose(input(ctx, 1000));
    EXPECT_EQ(t.size(), 1 + (W - 1) + (N - 2) * W + d.n_trie_nodes());
    feed(d, t, ctx, [](int32_t i) { return 2000 + i; });
    const int32_t f = N - 2;
    V out;
    for (int32_t c = 0; c < W; ++c) out.push_back(2000 + d.window_node(f, c));
    for (int32_t c = 0; c < W; ++c) {
      const int32_t key = c == 0 ? root : before[0][static_cast<size_t>(c - 1)];
      V g;
      for (int32_t l = 1; l <= f; ++l) g.push_back(before[static_cast<size_t>(l)][static_cast<size_t>(c)]);
      g.push_back(out[static_cast<size_t>(c)]);
      bool found = false;
      for (int32_t i = 0; i < d.pool().count(key); ++i) {
        const auto gi = d.pool().gram(key, i);
        found |= V(gi.begin(), gi.end()) == g;
      }
      EXPECT_TRUE(found) << "column " << c;
    }
    if (N == 2) {
      EXPECT_EQ(d.levels()[0], V(out.begin() + 1, out.end()));
    } else {
      EXPECT_EQ(d.levels()[0], V(before[1].begin() + 1, before[1].end()));
      for (int32_t l = 1; l < f; ++l) EXPECT_EQ(d.levels()[static_cast<size_t>(l)], before[static_cast<size_t>(l + 1)]);
      EXPECT_EQ(d.levels()[static_cast<size_t>(f)], out);
    }
  }
}

// The tree's visibility (ancestor sets) and positions (n_past + depth) are exactly the
// reference implementation's lookahead mask and position ids: window token (level l,
// column c) sees level-0 columns 0..c and its own column at levels 1..l, at position
// offset l + c; guesses see the root and their own n-gram prefix, never the window. The
// rows come in the reference's order: root, level 0, level 1, ..., then the guesses.
TEST(LookaheadWindow, TreeEqualsTheReferenceMaskAndPositions) {
  const int32_t N = 4, W = 5, G = 3;
  LookaheadDrafter d(params(N, W, G), 11);
  d.begin(V{1, 7, 8, 9});
  V ctx = fill(d, V{1, 7, 8, 9}, 1000);
  // Two harvest steps whose predictions make n-grams keyed by the coming root.
  const int32_t root = 77;
  for (int step = 0; step < 2; ++step) {
    ctx.push_back(root);
    const auto t = d.propose(input(ctx, 1000));
    feed(d, t, ctx, [&](int32_t i) { return i == 0 ? root : 300 + (i + step) % 5; });
  }
  ctx.push_back(root);
  const auto t = d.propose(input(ctx, 1000));
  ASSERT_GT(d.n_trie_nodes(), 0) << "the pool should hold n-grams for the root";
  t.validate();
  const int32_t n_window = (W - 1) + (N - 2) * W;
  // (level, column) of each window node, in row order.
  std::vector<std::pair<int32_t, int32_t>> lc(static_cast<size_t>(t.size()), {-1, -1});
  lc[0] = {0, 0};
  int32_t row = 1;
  for (int32_t c = 1; c < W; ++c) {
    ASSERT_EQ(d.window_node(0, c), row++);
    lc[static_cast<size_t>(d.window_node(0, c))] = {0, c};
  }
  for (int32_t l = 1; l < N - 1; ++l) {
    for (int32_t c = 0; c < W; ++c) {
      ASSERT_EQ(d.window_node(l, c), row++);
      lc[static_cast<size_t>(d.window_node(l, c))] = {l, c};
    }
  }
  ASSERT_EQ(row, 1 + n_window);
  for (int32_t i = 0; i <= n_window; ++i) {
    const auto [l, c] = lc[static_cast<size_t>(i)];
    EXPECT_EQ(t.depth(i), l + c) << "position offset of (" << l << ", " << c << ")";
    EXPECT_EQ(t.is_candidate(i), i == 0);
    for (int32_t j = 0; j <= n_window; ++j) {
      const auto [lj, cj] = lc[static_cast<size_t>(j)];
      const bool ref = (lj == 0 && cj <= c) || (lj >= 1 && lj <= l && cj == c);
      EXPECT_EQ(t.is_ancestor_or_self(j, i), ref) << "(" << l << "," << c << ") sees (" << lj << "," << cj << ")";
    }
    for (int32_t j = n_window + 1; j < t.size(); ++j) EXPECT_FALSE(t.is_ancestor_or_self(j, i));
  }
  // Guesses: candidates, children of the root or of guesses, at their n-gram offsets.
  for (int32_t i = n_window + 1; i < t.size(); ++i) {
    EXPECT_TRUE(t.is_candidate(i));
    EXPECT_TRUE(t.parent(i) == 0 || t.parent(i) > n_window);
    EXPECT_LE(t.depth(i), N - 1);
    for (int32_t j = 1; j <= n_window; ++j) EXPECT_FALSE(t.is_ancestor_or_self(j, i));
  }
  // Every pooled n-gram for the root is a root-to-node path of the trie (shared prefixes merged).
  std::set<V> paths;
  for (int32_t i = n_window + 1; i < t.size(); ++i) {
    V p;
    for (int32_t k : t.path_to(i)) {
      if (k) p.push_back(t.token(k));
    }
    paths.insert(p);
  }
  for (int32_t i = 0; i < d.pool().count(root); ++i) {
    const auto g = d.pool().gram(root, i);
    EXPECT_TRUE(paths.count(V(g.begin(), g.end()))) << "n-gram " << i << " missing from the trie";
  }
  EXPECT_LE(d.pool().count(root), G);
}

// Any budget is respected: the window loses its far columns, the trie its oldest n-grams,
// and budget 1 is plain decoding. Larger budgets never feed less.
TEST(LookaheadBudget, ShrinksWindowAndGuessesToFit) {
  const int32_t N = 5, W = 7, G = 7;
  LookaheadDrafter d(params(N, W, G), 5);
  d.begin(V{1, 2, 3, 4, 5, 6, 7, 8});
  V ctx = fill(d, V{1, 2, 3, 4, 5, 6, 7, 8}, 1000);
  core::Rng rng(4);
  // Populate the pool for root 9 with G distinct n-grams.
  for (int step = 0; step < 12; ++step) {
    ctx.push_back(9);
    const auto t = d.propose(input(ctx, 1000));
    feed(d, t, ctx, [&](int32_t i) { return i == 0 ? 9 : 20 + static_cast<int32_t>(rng.uniform_int(6)); });
  }
  ctx.push_back(9);
  ASSERT_GT(d.pool().count(9), 1);
  const auto full = d.propose(input(ctx, 10000));
  const int32_t full_trie = d.n_trie_nodes();
  ASSERT_LE(full.size(), d.max_nodes());
  ASSERT_EQ(d.fed_columns(), W);
  int32_t prev_cols = 0, prev_size = 0;
  for (int32_t budget = 1; budget <= full.size() + 2; ++budget) {
    const auto t = d.propose(input(ctx, budget));
    EXPECT_LE(t.size(), budget);
    EXPECT_GE(d.fed_columns(), prev_cols) << "budget " << budget;
    EXPECT_GE(t.size(), prev_size);
    EXPECT_GE(t.size(), std::min(budget, full.size()) - (N - 1)) << "budget " << budget << " mostly unused";
    EXPECT_LE(d.n_trie_nodes(), full_trie);
    t.validate();
    prev_cols = d.fed_columns();
    prev_size = t.size();
    if (budget == 1) {
      EXPECT_EQ(t.size(), 1);
    }
    if (budget >= full.size()) {
      EXPECT_EQ(t.size(), full.size());
      EXPECT_EQ(d.fed_columns(), W);
    }
  }
  // A half budget keeps both branches.
  const auto half = d.propose(input(ctx, full.size() / 2));
  EXPECT_GT(d.fed_columns(), 0);
  EXPECT_GT(d.n_trie_nodes(), 0);
  EXPECT_LE(half.size(), full.size() / 2);
}

// Feeding a partial window: the unfed columns keep their guesses, nothing is harvested
// for them, and the window stays well-formed under random budgets and predictions.
TEST(LookaheadBudget, RandomBudgetsKeepTheWindowWellFormed) {
  for (auto [N, W, G] : {std::tuple{5, 7, 7}, std::tuple{2, 3, 2}, std::tuple{3, 1, 1}, std::tuple{6, 2, 4}}) {
    LookaheadDrafter d(params(N, W, G), 9);
    d.begin(V{1, 2, 3});
    V ctx{1, 2, 3};
    core::Rng rng(static_cast<uint64_t>(N * 100 + W));
    for (int step = 0; step < 300; ++step) {
      const int32_t budget = 1 + static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(d.max_nodes() + 3)));
      const auto t = d.propose(input(ctx, budget));
      ASSERT_LE(t.size(), budget);
      ASSERT_LE(t.size(), d.max_nodes());
      t.validate();
      feed(d, t, ctx, [&](int32_t) { return static_cast<int32_t>(rng.uniform_int(12)); });
      ctx.push_back(static_cast<int32_t>(rng.uniform_int(12)));
      const auto& lv = d.levels();
      ASSERT_LE(lv.size(), static_cast<size_t>(N - 1));
      for (size_t l = 1; l < lv.size(); ++l) ASSERT_EQ(lv[l].size(), lv[0].size() + 1);
    }
    EXPECT_TRUE(d.window_full());
    EXPECT_EQ(d.levels()[0].size(), static_cast<size_t>(W - 1));
  }
}
