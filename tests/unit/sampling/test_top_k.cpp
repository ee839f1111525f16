// sampling::top_k_ids and rank_of: the one ranking rule (most likely first, ties to the
// lower id, NaN after every number), on hand-made logits and against a full sort, for
// both the insertion path (k <= 64) and the partial-sort path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/top_k.h"

using namespace treespec;

namespace {

std::vector<int32_t> top_k(const std::vector<float>& lg, int32_t k) {
  std::vector<int32_t> out(static_cast<size_t>(k), -1);
  sampling::top_k_ids(lg.data(), static_cast<int32_t>(lg.size()), k, out.data());
  return out;
}

// The rule spelled as a comparison sort over every id.
std::vector<int32_t> by_full_sort(const std::vector<float>& lg) {
  std::vector<int32_t> idx(lg.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    const bool na = std::isnan(lg[a]), nb = std::isnan(lg[b]);
    if (na || nb) return !na && nb;
    return lg[a] > lg[b];
  });
  return idx;
}

}  // namespace

TEST(TopK, OrderTiesAndNaN) {
  const std::vector<float> lg = {0.5f, 2.0f, NAN, 2.0f, -1.0f, 3.0f, 0.5f};
  EXPECT_EQ(top_k(lg, 4), (std::vector<int32_t>{5, 1, 3, 0}));
  EXPECT_EQ(top_k(lg, 1), (std::vector<int32_t>{5}));
  // Every id once: the NaN comes last.
  EXPECT_EQ(top_k(lg, 7), (std::vector<int32_t>{5, 1, 3, 0, 6, 4, 2}));
  EXPECT_TRUE(top_k(lg, 0).empty());
}

TEST(TopK, BothPathsAgreeWithAFullSort) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 700);
    std::vector<float> lg(static_cast<size_t>(n));
    // Few distinct values, so ties are common; now and then a NaN or an infinity.
    for (auto& v : lg) {
      const uint32_t r = rng() % 100;
      v = r == 0 ? NAN : r == 1 ? -INFINITY : r == 2 ? INFINITY : static_cast<float>(static_cast<int>(rng() % 9) - 4);
    }
    const auto want = by_full_sort(lg);
    for (int32_t k : {1, 2, 8, 64, 65, 200, n}) {
      if (k > n) continue;
      const auto got = top_k(lg, k);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "n " << n << " k " << k;
      for (int32_t r = 0; r < k; ++r) {
        if (!std::isnan(lg[static_cast<size_t>(got[static_cast<size_t>(r)])])) {
          EXPECT_EQ(sampling::rank_of(lg.data(), n, got[static_cast<size_t>(r)]), r);
        }
      }
    }
    for (int32_t r = 0; r < n; ++r) EXPECT_EQ(sampling::rank_of(lg.data(), n, want[static_cast<size_t>(r)]), r) << r;
  }
}
