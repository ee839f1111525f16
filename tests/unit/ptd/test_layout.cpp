// PTD step layout (algorithms.md §3.3): the worked example reproduced exactly, the
// reference's position formulas on random trees, and the row-budget split.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "drafters/ptd/draft_tree.h"
#include "drafters/ptd/pool.h"
#include "drafters/ptd/step_layout.h"
#include "model/batch.h"

using namespace treespec;
using drafters::ptd::build_step;
using drafters::ptd::DraftTree;
using drafters::ptd::split_rows;
using drafters::ptd::Trie;

TEST(PtdLayout, WorkedExampleOfSection33) {
  // Spine = [a, b]; a has child c; b has child d. Trie for x: x -> e -> f and x -> g.
  enum : int32_t { x = 100, a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7 };
  DraftTree dt;
  const int32_t na = dt.add(a, -1);
  dt.add(c, na);
  const int32_t nb = dt.add(b, -1);
  dt.add(d, nb);
  Trie trie(x);
  trie.child(trie.child(0, e), f);
  trie.child(0, g);
  const auto lay = build_step(x, dt, &trie, trie.breadth_first(100));
  const tree::TokenTree& t = lay.tree;
  t.validate();

  // Input order x a c b d e f g.
  EXPECT_EQ(t.tokens(), (std::vector<int32_t>{x, a, c, b, d, e, f, g}));
  // Attention-parents: - x a a(chain) b x e x.
  EXPECT_EQ(t.parents(), (std::vector<int32_t>{-1, 0, 1, 1, 3, 0, 5, 0}));
  EXPECT_EQ(lay.n_draft, 4);
  EXPECT_EQ(lay.n_trie, 3);
  // Positions p, p+1, p+2, p+2, p+3, p+1, p+2, p+1 through the batch builder.
  const int32_t p = 37;
  model::Batch batch;
  batch.add_tree(0, p, t);
  EXPECT_EQ(batch.pos, (std::vector<int32_t>{p, p + 1, p + 2, p + 2, p + 3, p + 1, p + 2, p + 1}));
  // Visibility within the step (every row also sees the committed prefix).
  const std::vector<std::vector<int32_t>> sees = {{0},          {0, 1}, {0, 1, 2}, {0, 1, 3},
                                                  {0, 1, 3, 4}, {0, 5}, {0, 5, 6}, {0, 7}};
  for (int32_t i = 0; i < t.size(); ++i) {
    std::vector<int32_t> got;
    for (int32_t j = 0; j < t.size(); ++j) {
      if (t.is_ancestor_or_self(j, i)) got.push_back(j);
    }
    EXPECT_EQ(got, sees[static_cast<size_t>(i)]) << "row " << i;
  }
  // Only e, f, g can be accepted; a, b, c, d are aux rows.
  for (int32_t i = 1; i <= 4; ++i) EXPECT_EQ(t.kind(i), tree::NodeKind::aux) << i;
  for (int32_t i = 5; i <= 7; ++i) EXPECT_EQ(t.kind(i), tree::NodeKind::candidate) << i;
  EXPECT_EQ(t.n_candidates(), 3);
  // Row -> node maps.
  EXPECT_EQ(lay.draft_id[1], na);
  EXPECT_EQ(lay.draft_id[3], nb);
  EXPECT_EQ(lay.trie_id[5], trie.node(0).kids[0]);
  EXPECT_EQ(lay.trie_id[1], -1);
  EXPECT_EQ(lay.draft_id[6], -1);
}

TEST(PtdLayout, ReproducesReferencePositionsAndMasksOnRandomTrees) {
  core::Rng rng(7);
  for (int rep = 0; rep < 50; ++rep) {
    DraftTree dt;
    std::vector<int32_t> ids;
    const int n_spine = 1 + static_cast<int>(rng.uniform_int(4));
    for (int s = 0; s < n_spine; ++s) ids.push_back(dt.add(static_cast<int32_t>(rng.uniform_int(50)), -1));
    for (int k = 0; k < 30; ++k) {
      const int32_t parent = ids[static_cast<size_t>(rng.uniform_int(ids.size()))];
      ids.push_back(dt.add(static_cast<int32_t>(rng.uniform_int(50)), parent));
    }
    Trie trie(9);
    std::vector<int32_t> tids{0};
    for (int k = 0; k < 20; ++k) {
      tids.push_back(trie.child(tids[static_cast<size_t>(rng.uniform_int(tids.size()))],
                                static_cast<int32_t>(rng.uniform_int(50))));
    }
    const int32_t keep = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(trie.size() + 1)));
    const auto lay = build_step(9, dt, &trie, trie.breadth_first(keep));
    const tree::TokenTree& t = lay.tree;
    ASSERT_EQ(lay.n_draft, dt.size());
    ASSERT_EQ(lay.n_trie, keep);
    ASSERT_EQ(t.size(), 1 + dt.size() + keep);
    // Rows of every spine node, by spine index.
    std::vector<int32_t> spine_row(dt.spine().size(), -1);
    for (int32_t i = 1; i < t.size(); ++i) {
      const int32_t did = lay.draft_id[static_cast<size_t>(i)];
      if (did < 0) continue;
      const auto it = std::find(dt.spine().begin(), dt.spine().end(), did);
      if (it != dt.spine().end()) spine_row[static_cast<size_t>(it - dt.spine().begin())] = i;
    }
    for (int32_t i = 1; i < t.size(); ++i) {
      const int32_t did = lay.draft_id[static_cast<size_t>(i)];
      const int32_t tid = lay.trie_id[static_cast<size_t>(i)];
      ASSERT_TRUE((did >= 0) != (tid >= 0));
      if (did >= 0) {
        // Spine root of the node and its index k.
        int32_t r = did;
        while (dt.node(r).parent >= 0) r = dt.node(r).parent;
        const auto k = static_cast<int32_t>(std::find(dt.spine().begin(), dt.spine().end(), r) - dt.spine().begin());
        // Reference position: p + (tree depth) + k.
        EXPECT_EQ(t.depth(i), dt.depth(did) + k);
        EXPECT_EQ(t.token(i), dt.tok(did));
        // Sees exactly: root, spine[0..k], and its own tree ancestors.
        for (int32_t j = 0; j < t.size(); ++j) {
          bool want = j == 0 || j == i;
          const int32_t dj = lay.draft_id[static_cast<size_t>(j)];
          if (dj >= 0) {
            for (int32_t s = 0; s <= k; ++s) want |= j == spine_row[static_cast<size_t>(s)];
            for (int32_t a = dt.node(did).parent; a >= 0; a = dt.node(a).parent) want |= dj == a;
          }
          EXPECT_EQ(t.is_ancestor_or_self(j, i), want) << "rep " << rep << " row " << i << " col " << j;
        }
      } else {
        int32_t depth = 0;
        for (int32_t a = tid; a > 0; a = trie.node(a).parent) ++depth;
        EXPECT_EQ(t.depth(i), depth);  // p + trie depth
        EXPECT_EQ(t.token(i), trie.tok(tid));
        EXPECT_TRUE(t.is_candidate(i));
        for (int32_t j = 1; j < t.size(); ++j) {
          if (lay.draft_id[static_cast<size_t>(j)] >= 0) {
            EXPECT_FALSE(t.is_ancestor_or_self(j, i));
          }
        }
      }
    }
  }
}

TEST(PtdLayout, EmptyDraftAndNoTrie) {
  DraftTree dt;
  const auto lay = build_step(5, dt, nullptr, {});
  EXPECT_EQ(lay.tree.size(), 1);
  EXPECT_EQ(lay.tree.token(0), 5);
  EXPECT_EQ(lay.n_draft + lay.n_trie, 0);
}

TEST(PtdLayout, SplitRowsIsProportionalWithSpillOver) {
  // Generous budget: everything fits.
  auto s = split_rows(1 + 64 + 60, 64, 60, 40, 30);
  EXPECT_EQ(s.draft, 40);
  EXPECT_EQ(s.trie, 30);
  // Tight budget: shares 64:60 of 24 -> 12 draft, 12 trie.
  s = split_rows(25, 64, 60, 100, 100);
  EXPECT_EQ(s.draft, 12);
  EXPECT_EQ(s.trie, 12);
  // A small trie leaves its share to the draft tree.
  s = split_rows(25, 64, 60, 100, 3);
  EXPECT_EQ(s.trie, 3);
  EXPECT_EQ(s.draft, 21);
  // A small draft tree leaves its share to the trie.
  s = split_rows(25, 64, 60, 2, 100);
  EXPECT_EQ(s.draft, 2);
  EXPECT_EQ(s.trie, 22);
  // Per-side maxima always hold.
  s = split_rows(1000, 10, 5, 100, 100);
  EXPECT_EQ(s.draft, 10);
  EXPECT_EQ(s.trie, 5);
  // Budget 1 (root only), 0 or negative: nothing.
  for (int32_t b : {1, 0, -3}) {
    s = split_rows(b, 64, 60, 10, 10);
    EXPECT_EQ(s.draft + s.trie, 0);
  }
  // One side disabled.
  s = split_rows(20, 0, 60, 10, 100);
  EXPECT_EQ(s.draft, 0);
  EXPECT_EQ(s.trie, 19);
  // Exhaustive: never over the budget, never over a side's maximum or supply.
  for (int32_t b = 0; b < 40; ++b) {
    for (int32_t dh = 0; dh < 12; ++dh) {
      for (int32_t th = 0; th < 12; ++th) {
        s = split_rows(b, 8, 6, dh, th);
        ASSERT_LE(s.draft + s.trie, std::max(0, b - 1));
        ASSERT_LE(s.draft, std::min(8, dh));
        ASSERT_LE(s.trie, std::min(6, th));
        // Nothing wasted: rows are left over only when both sides are exhausted.
        if (s.draft + s.trie < std::max(0, b - 1)) {
          ASSERT_EQ(s.draft, std::min(8, dh));
          ASSERT_EQ(s.trie, std::min(6, th));
        }
      }
    }
  }
}
