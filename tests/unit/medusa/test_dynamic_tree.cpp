// Dynamic trees (drafters/medusa/dynamic_tree.h): the heads' confidence calibration, the
// best-first growth (the first n nodes are the n - 1 most valuable paths), the value
// floor, and greedy output equal to plain greedy with dynamic trees for medusa, alone and
// batched, on the stories260K goldens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/golden.h"
#include "common/test_util.h"
#include "core/rng.h"
#include "drafters/medusa/dynamic_tree.h"
#include "drafters/medusa/medusa_drafter.h"
#include "medusa_test_util.h"
#include "treespec/status.h"

using namespace treespec;
using drafters::HeadConfidence;

TEST(HeadConfidence, StartsAtTheHeadsOwnProbabilityAndLearnsTheHitRate) {
  HeadConfidence c(2);
  // Before any outcome: the prior, the bin's own probability (sqrt bins: 0.25 -> bin 8).
  EXPECT_NEAR(c.value(0, 0.25f), std::pow(8.5 / 16.0, 2.0), 1e-6);
  EXPECT_NEAR(c.value(1, 0.9f), std::pow(15.5 / 16.0, 2.0), 1e-6);
  EXPECT_EQ(HeadConfidence::bin(std::nanf("")), 0);
  EXPECT_EQ(HeadConfidence::bin(-1.0f), 0);
  EXPECT_EQ(HeadConfidence::bin(2.0f), HeadConfidence::kBins - 1);
  // Head 0's candidates at p = 0.25 are right 80% of the time, head 1's only 5%.
  core::Rng rng(3);
  for (int i = 0; i < 4000; ++i) {
    c.update(0, 0.25f, rng.uniform() < 0.8, 0.01f);
    c.update(1, 0.25f, rng.uniform() < 0.05, 0.01f);
  }
  EXPECT_NEAR(c.value(0, 0.25f), 0.8, 0.1);
  EXPECT_LT(c.value(1, 0.25f), 0.15);
  EXPECT_GT(c.weight(0), 50.0);
}

TEST(HeadConfidence, StaysNonDecreasingInTheProbability) {
  // Whatever the outcomes, a more probable candidate never gets a lower value (so the
  // heads' candidate order is value order, which the best-first growth relies on).
  HeadConfidence c(1);
  core::Rng rng(5);
  for (int i = 0; i < 3000; ++i) {
    const auto p = static_cast<float>(rng.uniform());
    c.update(0, p, rng.uniform() < 0.5 * (1.0 - p), 0.05f);  // hits fall with p: violations to pool
    if (i % 100 != 0) continue;
    float prev = -1.0f;
    for (int32_t b = 0; b < HeadConfidence::kBins; ++b) {
      const float q = (static_cast<float>(b) + 0.5f) / HeadConfidence::kBins;
      const float v = c.value(0, q * q);
      ASSERT_GE(v, prev) << "bin " << b << " after " << i << " updates";
      ASSERT_GE(v, 0.0f);
      ASSERT_LE(v, 1.0f);
      prev = v;
    }
  }
}

namespace {

// Candidates of the trained stories heads at a fixed hidden state.
drafters::MedusaCandidates candidates_at(const std::shared_ptr<const drafters::MedusaHeads>& heads, int32_t top_k,
                                         float phase) {
  drafters::MedusaCandidates cand(heads, top_k, nullptr);
  std::vector<float> h(static_cast<size_t>(heads->n_embd()));
  for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(phase * static_cast<float>(i + 1));
  cand.compute(h.data());
  return cand;
}

}  // namespace

TEST(DynamicTree, GrowsTheMostValuablePathsFirst) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  const int32_t top_k = 4;
  HeadConfidence conf(ts.heads->n_heads());
  core::Rng rng(11);
  for (int i = 0; i < 500; ++i) {  // a calibration that is not the identity
    const auto p = static_cast<float>(rng.uniform());
    conf.update(static_cast<int32_t>(i % ts.heads->n_heads()), p, rng.uniform() < std::sqrt(p), 0.05f);
  }
  for (float phase : {0.37f, 0.71f, 1.3f}) {
    SCOPED_TRACE(phase);
    const auto cand = candidates_at(ts.heads, top_k, phase);
    for (int32_t k = 0; k < cand.n_heads(); ++k) {
      const auto p = cand.prob(k);
      EXPECT_GT(p[0], 0.0f);
      EXPECT_LE(p[0], 1.0f);
      for (size_t r = 1; r < p.size(); ++r) EXPECT_LE(p[r], p[r - 1]) << "head " << k << " rank " << r;
    }
    // Every path's value, by brute force over (depth, rank) paths.
    std::vector<double> all;
    std::function<void(int32_t, double)> walk = [&](int32_t depth, double v) {
      if (depth > cand.n_heads()) return;
      for (int32_t r = 0; r < top_k; ++r) {
        const double c = v * conf.value(depth - 1, cand.prob(depth - 1)[static_cast<size_t>(r)]);
        all.push_back(c);
        walk(depth + 1, c);
      }
    };
    walk(1, 1.0);
    std::sort(all.rbegin(), all.rend());
    const int32_t n = 24;
    const auto t = drafters::grow_dynamic_tree(7, cand, conf, n);
    ASSERT_EQ(t.tree.size(), n);
    EXPECT_EQ(t.tree.token(0), 7);
    double sum = 0.0;
    for (int32_t i = 1; i < n; ++i) {
      // Node values: non-increasing, the product along the path, the i-th best path's value.
      EXPECT_LE(t.value[static_cast<size_t>(i)], t.value[static_cast<size_t>(i - 1)]);
      EXPECT_DOUBLE_EQ(t.value[static_cast<size_t>(i)], all[static_cast<size_t>(i - 1)]) << "node " << i;
      const int32_t d = t.tree.depth(i), par = t.tree.parent(i);
      const int32_t r = cand.rank_of(d - 1, t.tree.token(i));
      ASSERT_GE(r, 0) << "node " << i << " is not a candidate of head " << d - 1;
      EXPECT_DOUBLE_EQ(t.value[static_cast<size_t>(i)],
                       t.value[static_cast<size_t>(par)] * conf.value(d - 1, cand.prob(d - 1)[static_cast<size_t>(r)]));
      sum += t.value[static_cast<size_t>(i)];
      EXPECT_DOUBLE_EQ(t.expected[static_cast<size_t>(i)], sum);
    }
    // Smaller trees are prefixes of larger ones.
    const auto small = drafters::grow_dynamic_tree(7, cand, conf, 9);
    ASSERT_EQ(small.tree.size(), 9);
    for (int32_t i = 0; i < 9; ++i) {
      EXPECT_EQ(small.tree.token(i), t.tree.token(i));
      EXPECT_EQ(small.tree.parent(i), t.tree.parent(i));
    }
    // Budget and value floor.
    EXPECT_EQ(t.size_for(5, 0.0), 5);
    EXPECT_EQ(t.size_for(100, 0.0), n);
    EXPECT_EQ(t.size_for(0, 0.0), 1);
    const double floor = t.value[10];
    const int32_t cut = t.size_for(n, floor);
    EXPECT_GE(cut, 11);
    for (int32_t i = 1; i < cut; ++i) EXPECT_GE(t.value[static_cast<size_t>(i)], floor);
    if (cut < n) {
      EXPECT_LT(t.value[static_cast<size_t>(cut)], floor);
    }
    EXPECT_EQ(t.size_for(n, 2.0), 1);  // no node is that likely: the root alone
  }
  // All paths exist only up to top_k + top_k^2 + ...: a bigger request stops there.
  const auto cand = candidates_at(ts.heads, 2, 0.5f);
  int32_t all_nodes = 1, level = 1;
  for (int32_t d = 0; d < cand.n_heads(); ++d) all_nodes += level *= 2;
  EXPECT_EQ(drafters::grow_dynamic_tree(3, cand, conf, 4096).tree.size(), all_nodes);
}

TEST(DynamicTree, ExpectedCurveAveragesStepsAndStartsFromItsSeed) {
  drafters::ExpectedCurve c({0.0, 0.5, 0.8}, 0.5);
  std::vector<double> out(5);
  c.fill(out);
  EXPECT_EQ(out, (std::vector<double>{0.0, 0.5, 0.8, 0.8, 0.8}));
  c.add(std::vector<double>{0.0, 0.9, 1.5, 1.9});
  c.fill(out);
  EXPECT_DOUBLE_EQ(out[1], 0.7);
  EXPECT_DOUBLE_EQ(out[2], 1.15);
  EXPECT_DOUBLE_EQ(out[3], 0.8 + 0.5 * (1.9 - 0.8));
  EXPECT_DOUBLE_EQ(out[4], out[3]);
  drafters::ExpectedCurve empty;
  EXPECT_TRUE(empty.empty());
  empty.fill(out);
  EXPECT_EQ(out, std::vector<double>(5, 0.0));
}

TEST(DynamicTree, MedusaDynamicTreesMatchPlainGreedyAloneAndBatched) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  drafters::MedusaParams p;
  p.tree = "dynamic:16";
  auto make = [&](const model::Model&) -> std::unique_ptr<drafters::Drafter> {
    return std::make_unique<drafters::MedusaDrafter>(ts.heads, drafters::resolve_medusa_tree(p, *ts.heads), p, nullptr,
                                                     drafters::calibration_table(*ts.heads, p.top_k));
  };
  const auto st = test::expect_goldens(ts.m, make);
  const auto st4 = test::expect_goldens(ts.m, make, 4);
  std::printf("dynamic:16 mean accepted length %.3f alone, %.3f batched\n", st.mean_accepted_length(),
              st4.mean_accepted_length());
  EXPECT_GT(st.mean_accepted_length(), 1.5);
  EXPECT_GT(st.rows_per_step(), 12.0);  // really 16-node trees (the first step has 1 row)
}

TEST(DynamicTree, TreeSpecIsChecked) {
  drafters::MedusaParams p;
  p.tree = "dynamic:8";
  EXPECT_EQ(p.dynamic_nodes(), 8);
  p.tree = "auto:8";
  EXPECT_EQ(p.dynamic_nodes(), 0);
  for (const char* bad : {"dynamic:", "dynamic:0", "dynamic:x", "dynamic:5000"}) {
    p.tree = bad;
    try {
      p.validate();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--tree"), std::string::npos) << e.what();
    }
  }
}
