// NgramPool: per-key LRU with a cap; most recent first.
#include <gtest/gtest.h>

#include <vector>

#include "drafters/lookahead/ngram_pool.h"

using treespec::drafters::NgramPool;
using V = std::vector<int32_t>;

namespace {
V gram(const NgramPool& p, int32_t key, int32_t i) {
  const auto g = p.gram(key, i);
  return V(g.begin(), g.end());
}
}  // namespace

TEST(NgramPool, KeepsMostRecentFirstPerKey) {
  NgramPool p(2, 3);
  EXPECT_EQ(p.count(7), 0);
  p.insert(7, V{1, 2});
  p.insert(7, V{3, 4});
  p.insert(8, V{1, 2});
  EXPECT_EQ(p.count(7), 2);
  EXPECT_EQ(p.count(8), 1);
  EXPECT_EQ(gram(p, 7, 0), (V{3, 4}));
  EXPECT_EQ(gram(p, 7, 1), (V{1, 2}));
  EXPECT_EQ(p.n_keys(), 2u);
  EXPECT_EQ(p.n_grams(), 3u);
}

TEST(NgramPool, ReinsertRefreshesWithoutDuplicating) {
  NgramPool p(2, 3);
  p.insert(7, V{1, 2});
  p.insert(7, V{3, 4});
  p.insert(7, V{1, 2});
  EXPECT_EQ(p.count(7), 2);
  EXPECT_EQ(gram(p, 7, 0), (V{1, 2}));
  EXPECT_EQ(gram(p, 7, 1), (V{3, 4}));
}

TEST(NgramPool, FullKeyEvictsItsLeastRecent) {
  NgramPool p(3, 2);
  p.insert(1, V{1, 1, 1});
  p.insert(1, V{2, 2, 2});
  p.insert(1, V{1, 1, 1});  // refresh: {2} is now the oldest
  p.insert(1, V{3, 3, 3});  // evicts {2}
  EXPECT_EQ(p.count(1), 2);
  EXPECT_EQ(gram(p, 1, 0), (V{3, 3, 3}));
  EXPECT_EQ(gram(p, 1, 1), (V{1, 1, 1}));
  // Bounded whatever is inserted.
  for (int32_t i = 0; i < 1000; ++i) p.insert(i % 5, V{i, i + 1, i + 2});
  for (int32_t k = 0; k < 5; ++k) EXPECT_LE(p.count(k), 2);
  EXPECT_LE(p.n_grams(), 10u);
  p.clear();
  EXPECT_EQ(p.n_grams(), 0u);
}
