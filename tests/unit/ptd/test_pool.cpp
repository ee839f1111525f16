// PTD pool: trie insertion from the draft snapshot (with predictions), the node cap with
// oldest-branch eviction, and merges from trie subtrees (the re-insertion fix).
#include <gtest/gtest.h>

#include <vector>

#include "drafters/ptd/draft_tree.h"
#include "drafters/ptd/pool.h"
#include "unit/ptd/trie_text.h"

using treespec::drafters::ptd::DraftTree;
using treespec::drafters::ptd::MergeSource;
using treespec::drafters::ptd::Pool;
using treespec::drafters::ptd::Trie;
using treespec::test::trie_text;

TEST(PtdTrie, ChildPreorderBreadthFirst) {
  Trie t(7);
  EXPECT_EQ(t.key(), 7);
  EXPECT_TRUE(t.empty());
  bool added = false;
  const int32_t a = t.child(0, 1, &added);
  EXPECT_TRUE(added);
  EXPECT_EQ(t.child(0, 1, &added), a);
  EXPECT_FALSE(added);
  const int32_t b = t.child(a, 2);
  t.child(b, 3);
  const int32_t c = t.child(0, 4);
  t.child(c, 5);
  EXPECT_EQ(t.size(), 5);
  EXPECT_EQ(trie_text(t), "1(2(3)) 4(5)");
  std::vector<int32_t> pre;
  for (int32_t id : t.preorder()) pre.push_back(t.tok(id));
  EXPECT_EQ(pre, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  std::vector<int32_t> bfs;
  for (int32_t id : t.breadth_first(4)) bfs.push_back(t.tok(id));
  EXPECT_EQ(bfs, (std::vector<int32_t>{1, 4, 2, 5}));
  EXPECT_TRUE(t.breadth_first(0).empty());
  EXPECT_EQ(t.breadth_first(100).size(), 5u);
}

TEST(PtdTrie, EvictOldestFirstLevelBranch) {
  Trie t(0);
  const int32_t a = t.child(0, 1);
  t.child(t.child(a, 2), 3);
  t.child(0, 4);
  EXPECT_EQ(t.evict_oldest(), 3);
  EXPECT_EQ(trie_text(t), "4");
  EXPECT_FALSE(t.alive(a));
  // Freed ids are reused; the trie stays consistent.
  t.child(0, 9);
  EXPECT_EQ(trie_text(t), "4 9");
  EXPECT_EQ(t.evict_oldest(), 1);
  EXPECT_EQ(t.evict_oldest(), 1);
  EXPECT_EQ(t.evict_oldest(), 0);
  EXPECT_TRUE(t.empty());
}

TEST(PtdPool, MergeFromDraftSubtreeAddsPathsAndPredictions) {
  // Draft: spine 5 with children 6 (child 7) and 8; preds: 5->6 (already a child),
  // 6->9 (new), 7->10, 8->-1 (not fed).
  DraftTree d;
  const int32_t s = d.add(5, -1);
  const int32_t n6 = d.add(6, s);
  const int32_t n7 = d.add(7, n6);
  const int32_t n8 = d.add(8, s);
  d.set_pred(s, 6);
  d.set_pred(n6, 9);
  d.set_pred(n7, 10);
  (void)n8;
  Pool pool(60);
  pool.merge(Pool::from_draft(d, s));
  const Trie* t = pool.find(5);
  ASSERT_NE(t, nullptr);
  // Children first (in draft order), then the node's own prediction.
  EXPECT_EQ(trie_text(*t), "6(7(10) 9) 8");
  EXPECT_EQ(pool.counters.nodes_inserted, 5);
  // Merging again adds nothing; merging a subtree keyed by an inner token goes to its own trie.
  pool.merge(Pool::from_draft(d, s));
  EXPECT_EQ(pool.counters.nodes_inserted, 5);
  pool.merge(Pool::from_draft(d, n6));
  ASSERT_NE(pool.find(6), nullptr);
  EXPECT_EQ(trie_text(*pool.find(6)), "7(10) 9");
  EXPECT_EQ(pool.n_keys(), 2u);
  EXPECT_EQ(pool.n_nodes(), 5 + 3);
}

TEST(PtdPool, CapEvictsOneOldestBranchPerInsert) {
  Pool pool(3);
  auto path = [](int32_t key, std::vector<int32_t> ts) {
    MergeSource src;
    src.nodes.push_back({key, -1, {}});
    for (int32_t t : ts) {
      src.nodes.back().kids.push_back(static_cast<int32_t>(src.nodes.size()));
      src.nodes.push_back({t, -1, {}});
    }
    return src;
  };
  pool.merge(path(0, {1, 2}));
  EXPECT_EQ(trie_text(*pool.find(0)), "1(2)");
  pool.merge(path(0, {3}));
  EXPECT_EQ(trie_text(*pool.find(0)), "1(2) 3");  // 3 nodes: at the cap, no eviction
  pool.merge(path(0, {4, 5}));                    // 5 > 3: the oldest branch (1-2) goes, once
  EXPECT_EQ(trie_text(*pool.find(0)), "3 4(5)");
  EXPECT_EQ(pool.counters.evictions, 1);
  EXPECT_EQ(pool.counters.nodes_evicted, 2);
  pool.merge(path(0, {6, 7, 8}));  // 6 > 3: one eviction (3), still above the cap
  EXPECT_EQ(trie_text(*pool.find(0)), "4(5) 6(7(8))");
  EXPECT_EQ(pool.find(0)->size(), 5);
  // Extending an existing branch does not refresh its age.
  pool.merge(path(0, {4, 9}));
  EXPECT_EQ(trie_text(*pool.find(0)), "6(7(8))");
}

TEST(PtdPool, MergeFromTrieSubtreeForReinsertion) {
  Trie t(1);
  const int32_t a = t.child(0, 2);
  const int32_t b = t.child(a, 3);
  t.child(b, 4);
  t.child(a, 5);
  const MergeSource src = Pool::from_trie(t, a);  // key 2: children 3(4) 5
  ASSERT_EQ(src.nodes.size(), 4u);
  EXPECT_EQ(src.nodes[0].tok, 2);
  Pool pool(60);
  pool.merge(src);
  EXPECT_EQ(trie_text(*pool.find(2)), "3(4) 5");
  // Self-merge (a trie's subtree keyed by the trie's own key) through a copy is safe.
  pool.put(1, t);
  const int32_t self = pool.find(1)->child(b, 1);
  pool.find(1)->child(self, 6);
  pool.merge(Pool::from_trie(*pool.find(1), self));
  EXPECT_EQ(trie_text(*pool.find(1)), "2(3(4 1(6)) 5) 6");
}
