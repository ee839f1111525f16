// PTD draft-tree update rules on hand-made trees (algorithms.md §3.4 D3-D6, seeding, and
// the hard row budget).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "drafters/ptd/draft_tree.h"

using treespec::drafters::ptd::DraftTree;

namespace {

std::vector<int32_t> toks(const DraftTree& d, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  for (int32_t id : ids) out.push_back(d.tok(id));
  return out;
}
std::vector<int32_t> spine_toks(const DraftTree& d) { return toks(d, d.spine()); }
std::vector<int32_t> kid_toks(const DraftTree& d, int32_t id) { return toks(d, d.node(id).kids); }

// A chain of tokens under `parent` (-1: a new spine node); returns the ids.
std::vector<int32_t> chain(DraftTree& d, int32_t parent, const std::vector<int32_t>& ts) {
  std::vector<int32_t> ids;
  for (int32_t t : ts) {
    parent = d.add(t, parent);
    ids.push_back(parent);
  }
  return ids;
}

}  // namespace

TEST(PtdDraftTree, StructureQueries) {
  DraftTree d;
  const auto a = chain(d, -1, {10, 11, 12});
  const int32_t b = d.add(20, -1);
  d.add(21, a[0]);
  EXPECT_EQ(d.size(), 5);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{10, 20}));
  EXPECT_EQ(d.depth(a[2]), 3);
  EXPECT_EQ(d.height(a[0]), 2);
  EXPECT_EQ(d.height(b), 0);
  EXPECT_EQ(d.max_depth(), 3);
  EXPECT_EQ(toks(d, d.preorder()), (std::vector<int32_t>{10, 11, 12, 21, 20}));
  EXPECT_EQ(d.remove_subtree(a[1]), 2);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(kid_toks(d, a[0]), (std::vector<int32_t>{21}));
  EXPECT_EQ(d.remove_subtree(a[0]), 2);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{20}));
}

TEST(PtdDraftTree, GrowAddsEachNodesOwnPredictionOnce) {
  DraftTree d;
  const auto a = chain(d, -1, {10, 11});
  const int32_t b = d.add(20, -1);
  d.set_pred(a[0], 11);  // already a child: nothing new
  d.set_pred(a[1], 12);  // new leaf child
  d.set_pred(b, 21);
  EXPECT_EQ(d.grow(4), 2);
  EXPECT_EQ(kid_toks(d, a[0]), (std::vector<int32_t>{11}));
  EXPECT_EQ(kid_toks(d, a[1]), (std::vector<int32_t>{12}));
  EXPECT_EQ(kid_toks(d, b), (std::vector<int32_t>{21}));
  // New children have no prediction yet: a second grow adds nothing.
  EXPECT_EQ(d.grow(4), 0);
  EXPECT_EQ(d.size(), 5);
  // When the prediction at a node changes, a sibling appears (branching), in insertion order.
  d.set_pred(a[0], 13);
  EXPECT_EQ(d.grow(4), 1);
  EXPECT_EQ(kid_toks(d, a[0]), (std::vector<int32_t>{11, 13}));
}

TEST(PtdDraftTree, GrowRespectsWidth) {
  DraftTree d;
  const int32_t s = d.add(1, -1);
  for (int32_t t = 2; t < 4; ++t) d.add(t, s);
  d.set_pred(s, 9);
  EXPECT_EQ(d.grow(2), 0);  // full at width 2
  EXPECT_EQ(d.grow(3), 1);
  EXPECT_EQ(kid_toks(d, s), (std::vector<int32_t>{2, 3, 9}));
}

TEST(PtdDraftTree, SpineAppendsPredictionOfLastSpineNode) {
  DraftTree d;
  const int32_t a = d.add(10, -1);
  const int32_t b = d.add(20, -1);
  const int32_t dup = d.add(30, b);  // will duplicate the new spine node
  d.add(31, dup);
  d.add(32, b);
  d.set_pred(b, 30);
  d.maintain_spine(4, /*fallback=*/99);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{10, 20, 30}));
  EXPECT_EQ(kid_toks(d, b), (std::vector<int32_t>{32}));  // the duplicate child's subtree is gone
  EXPECT_EQ(d.size(), 4);
  // Already a spine token: the duplicate child is still removed, nothing is appended.
  const int32_t c = d.spine().back();
  d.add(10, c);
  d.set_pred(c, 10);
  d.maintain_spine(4, 99);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{10, 20, 30}));
  EXPECT_TRUE(d.node(c).kids.empty());
  // Unknown prediction (not fed yet): no change.
  d.maintain_spine(4, 99);
  d.set_pred(c, -1);
  d.maintain_spine(4, 99);
  EXPECT_EQ(d.spine().size(), 3u);
  (void)a;
}

TEST(PtdDraftTree, SpineFallbackAndOverflow) {
  DraftTree d;
  d.maintain_spine(4, 7);  // empty spine: the fallback (first emitted token) seeds it
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{7}));
  DraftTree e;
  for (int32_t t = 1; t <= 5; ++t) chain(e, -1, {t, t + 100});
  e.maintain_spine(4, 99);  // 5 > 4: spine[0]'s subtree goes, nothing appended (now exactly 4)
  EXPECT_EQ(spine_toks(e), (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(e.size(), 8);
  // At target size: no change.
  e.set_pred(e.spine().back(), 50);
  e.maintain_spine(4, 99);
  EXPECT_EQ(spine_toks(e), (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(PtdDraftTree, SlideLiftsFirstNonSpineChild) {
  DraftTree d;
  // spine 10 (height 3 via child 11), spine 20 (height 1), spine 30.
  const int32_t s0 = d.add(10, -1);
  const int32_t k_spine = d.add(20, s0);  // a child whose token is a spine token: skipped
  const int32_t heir = d.add(11, s0);
  const int32_t other = d.add(12, s0);
  chain(d, heir, {13, 14});
  d.add(15, other);
  d.add(20, -1);
  d.add(30, -1);
  d.add(5, k_spine);
  ASSERT_EQ(d.height(s0), 3);
  EXPECT_EQ(d.slide(/*max_depth=*/3, /*width=*/4), 1);
  // s0 is gone; 11 (the first child not carrying a spine token) moved to the END of the
  // spine with its subtree; its siblings' subtrees were dropped.
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{20, 30, 11}));
  EXPECT_EQ(d.spine().back(), heir);
  EXPECT_EQ(d.node(heir).parent, -1);
  EXPECT_EQ(d.height(heir), 2);
  EXPECT_EQ(d.size(), 5);  // 20, 30, 11, 13, 14
  EXPECT_EQ(d.max_depth(), 3);
  // Below the threshold: nothing slides.
  EXPECT_EQ(d.slide(3, 4), 0);
}

TEST(PtdDraftTree, SlideDeletesWhenEveryChildIsASpineToken) {
  DraftTree d;
  const int32_t s0 = d.add(10, -1);
  const auto c = chain(d, s0, {20, 21, 22});
  d.add(20, -1);
  ASSERT_EQ(d.height(s0), 3);
  EXPECT_EQ(d.slide(3, 4), 1);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{20}));
  EXPECT_EQ(d.size(), 1);
  (void)c;
}

TEST(PtdDraftTree, SlideKeepsTreeDepthBoundedOverManySteps) {
  // A spine node whose chain grows by one each step: sliding keeps the height < max_depth.
  DraftTree d;
  int32_t leaf = d.add(1, -1);
  int32_t next = 2;
  for (int step = 0; step < 20; ++step) {
    d.set_pred(leaf, next++);
    d.grow(4);
    leaf = d.node(leaf).kids.back();
    d.slide(6, 4);
    ASSERT_LE(d.max_depth(), 6) << "step " << step;
    ASSERT_EQ(d.spine().size(), 1u);
  }
  EXPECT_EQ(d.size(), 6);  // a chain of exactly max_depth nodes
}

TEST(PtdDraftTree, EosPruningClimbsButNotPastTheSpine) {
  DraftTree d;
  const std::vector<int32_t> eog{2, 7};
  // Deep chain under spine 10: 10-11-12-13-14-15-2(EOS) : climbing 4 from the EOS node
  // reaches 12, whose subtree is cut.
  const auto a = chain(d, -1, {10, 11, 12, 13, 14, 15, 2});
  const int32_t side = d.add(16, a[1]);
  // Shallow EOS under spine 20 (20-7): climbing stops at the spine node 20 itself.
  chain(d, -1, {20, 7});
  // Spine node 30 is itself EOS-free and survives.
  d.add(30, -1);
  EXPECT_EQ(d.prune_eos(eog, 4), 2);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{10, 30}));
  EXPECT_EQ(kid_toks(d, a[1]), (std::vector<int32_t>{16}));
  EXPECT_TRUE(d.alive(side));
  EXPECT_EQ(d.size(), 4);  // 10, 11, 16, 30
  // Only the given ids count as EOS: id 16 is not, nothing changes.
  EXPECT_EQ(d.prune_eos(std::vector<int32_t>{99}, 4), 0);
  EXPECT_EQ(d.prune_eos(std::vector<int32_t>{}, 4), 0);
  // A spine node that is EOS itself is removed.
  EXPECT_EQ(d.prune_eos(std::vector<int32_t>{30}, 4), 1);
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{10}));
}

TEST(PtdDraftTree, TrimRemovesNewestBranchesThenOldestSpineSubtrees) {
  DraftTree d;
  const int32_t s0 = d.add(1, -1);
  const int32_t a = d.add(2, s0);
  const int32_t s1 = d.add(3, -1);
  d.add(4, a);
  const int32_t c = d.add(5, s1);
  const int32_t br1 = d.add(6, s0);  // a branch (not s0's first child)
  const int32_t br2 = d.add(7, s1);  // the newest branch
  d.add(8, br1);
  ASSERT_EQ(d.size(), 8);
  EXPECT_EQ(d.trim_to(10), 0);
  EXPECT_EQ(d.trim_to(7), 1);  // br2
  EXPECT_FALSE(d.alive(br2));
  EXPECT_EQ(d.trim_to(6), 2);  // br1 with its child
  EXPECT_FALSE(d.alive(br1));
  EXPECT_EQ(d.size(), 5);
  EXPECT_EQ(d.trim_to(3), 3);  // no branches left: the oldest spine subtree 1-2-4
  EXPECT_EQ(spine_toks(d), (std::vector<int32_t>{3}));
  EXPECT_EQ(d.trim_to(1), 1);  // a single chain 3-5: its newest node
  EXPECT_FALSE(d.alive(c));
  EXPECT_EQ(d.trim_to(0), 1);
  EXPECT_TRUE(d.empty());
}

TEST(PtdDraftTree, SeedingDrawsFromThePromptReproducibly) {
  const std::vector<int32_t> prompt{1, 40, 41, 42, 43, 44, 45, 46};
  std::vector<std::vector<int32_t>> shapes;
  for (int rep = 0; rep < 2; ++rep) {
    treespec::core::Rng rng(123);
    DraftTree d;
    d.seed(prompt, /*n_seeds=*/2, /*init_depth=*/2, /*n_vocab=*/0, rng);
    ASSERT_EQ(d.spine().size(), 2u);
    EXPECT_NE(d.tok(d.spine()[0]), d.tok(d.spine()[1]));
    EXPECT_LE(d.max_depth(), 2);
    for (int32_t id : d.preorder()) {
      EXPECT_NE(std::find(prompt.begin(), prompt.end(), d.tok(id)), prompt.end());
    }
    std::vector<int32_t> shape;
    for (int32_t id : d.preorder()) shape.push_back(d.tok(id) * 10 + d.depth(id));
    shapes.push_back(shape);
  }
  EXPECT_EQ(shapes[0], shapes[1]);
  // Across seeds both chain lengths 1 and 2 occur.
  bool len1 = false, len2 = false;
  for (uint64_t s = 0; s < 64; ++s) {
    treespec::core::Rng rng(s);
    DraftTree d;
    d.seed(prompt, 2, 2, 0, rng);
    for (int32_t sp : d.spine()) (d.height(sp) == 0 ? len1 : len2) = true;
  }
  EXPECT_TRUE(len1 && len2);
  // A one-token prompt: the second seed falls back to the vocabulary, or is skipped without one.
  treespec::core::Rng rng(5);
  DraftTree one;
  one.seed(std::vector<int32_t>{1}, 2, 1, 0, rng);
  EXPECT_EQ(one.spine().size(), 1u);
  DraftTree voc;
  voc.seed(std::vector<int32_t>{1}, 2, 1, 32, rng);
  EXPECT_EQ(voc.spine().size(), 2u);
  DraftTree none;
  none.seed(prompt, 2, 0, 0, rng);
  EXPECT_TRUE(none.empty());
}
