// Tree shapes: Medusa/EAGLE tree choices from ../shared load with the expected node
// counts and depths; malformed shapes are rejected by name; best-first trees are nested
// (size N is the N-prefix of size N+1) and optimal (checked by brute force on small
// tables); the acceptance table's calibration import and online update.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "common/test_util.h"
#include "core/rng.h"
#include "tree/token_tree.h"
#include "tree/tree_choices.h"
#include "treespec/status.h"

using namespace treespec;
using tree::AcceptanceTable;
using tree::TreeShape;

namespace {

std::string choices_path() { return test::shared_dir() + "/data/tree_choices.json"; }

// Checks the shape's structural invariants.
void expect_valid(const TreeShape& s) {
  ASSERT_GE(s.size(), 1);
  EXPECT_EQ(s.parent(0), -1);
  EXPECT_EQ(s.depth(0), 0);
  std::set<std::vector<int32_t>> seen;
  for (int32_t i = 1; i < s.size(); ++i) {
    ASSERT_GE(s.parent(i), 0);
    ASSERT_LT(s.parent(i), i) << "node " << i << " comes before its parent";
    EXPECT_EQ(s.depth(i), s.depth(s.parent(i)) + 1);
    EXPECT_TRUE(seen.insert(s.path(i)).second) << "duplicate path at node " << i;
  }
}

AcceptanceTable random_table(uint64_t seed, int32_t depth, int32_t top_k) {
  core::Rng rng(seed);
  AcceptanceTable t(depth, top_k);
  for (int32_t d = 1; d <= depth; ++d) {
    double left = 0.3 + 0.6 * rng.uniform();  // row mass; not necessarily decreasing in rank
    for (int32_t j = 0; j < top_k; ++j) {
      const double v = left * rng.uniform();
      t.set(d, j, static_cast<float>(v));
      left -= v;
    }
  }
  return t;
}

}  // namespace

TEST(TreeChoices, SharedTreesLoadWithExpectedShape) {
  TREESPEC_REQUIRE_SHARED();
  // Counted in the file: non-root nodes, depth, largest rank.
  struct Expect {
    int32_t nodes, depth, max_rank;
  };
  const std::map<std::string, Expect> expect = {
      {"medusa_mc_sim_7b_63", {63, 4, 9}},
      {"medusa_vicuna_7b_stage2", {63, 4, 9}},
      {"medusa_vicuna_7b_stage1_ablation", {63, 4, 9}},
      {"medusa_vicuna_7b_stage1", {63, 4, 9}},
      {"medusa_vicuna_13b_stage2", {63, 4, 9}},
      {"medusa_vicuna_13b_stage1", {63, 4, 9}},
      {"medusa_vicuna_33b_stage2", {63, 4, 9}},
      {"medusa_vicuna_33b_stage1", {63, 3, 9}},
      {"medusa_zephyr_stage2", {63, 4, 9}},
      {"eagle_mc_sim_7b_63", {25, 5, 3}},
  };
  const auto names = tree::tree_names_in_file(choices_path());
  EXPECT_EQ(names.size(), expect.size());
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto it = expect.find(name);
    ASSERT_NE(it, expect.end()) << "unexpected tree in the file";
    const TreeShape s = tree::load_tree_choices(choices_path(), name);
    expect_valid(s);
    EXPECT_EQ(s.size(), it->second.nodes + 1);
    EXPECT_EQ(s.max_depth(), it->second.depth);
    EXPECT_EQ(s.max_rank(), it->second.max_rank);
    // The file order is ancestor-closed, so it is kept: every prefix is a tree.
    for (int32_t n = 1; n <= s.size(); ++n) expect_valid(s.prefix(n));
  }
  // mc_sim_7b_63 starts [0], [0, 0], [1], [0, 1], [2], [0, 0, 0] (the file's order).
  const TreeShape mc = tree::load_tree_choices(choices_path(), "medusa_mc_sim_7b_63");
  const std::vector<std::vector<int32_t>> head = {{0}, {0, 0}, {1}, {0, 1}, {2}, {0, 0, 0}};
  EXPECT_EQ(mc.prefix(7).paths(), head);
  int32_t depth1 = 0;
  for (int32_t i = 1; i < mc.size(); ++i) depth1 += mc.depth(i) == 1 ? 1 : 0;
  EXPECT_EQ(depth1, 10);  // all ten head-0 candidates
}

TEST(TreeChoices, UnknownNameListsAvailableTrees) {
  TREESPEC_REQUIRE_SHARED();
  try {
    tree::load_tree_choices(choices_path(), "no_such_tree");
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_tree"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("medusa_mc_sim_7b_63"), std::string::npos);
  }
  // Several trees and no name: the caller must pick.
  EXPECT_THROW(tree::load_tree_choices(choices_path()), InvalidArgument);
  EXPECT_THROW(tree::load_tree_choices("/nonexistent/tree.json", "x"), IoError);
}

TEST(TreeChoices, ParsesBothFormats) {
  const TreeShape a = tree::parse_tree_choices(R"([[0], [1], [0, 0]])", "", "inline");
  EXPECT_EQ(a.size(), 4);
  const TreeShape b = tree::parse_tree_choices(R"({"trees": {"t": [[0], [1], [0, 0]]}})", "", "inline");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.parent(3), 1);
  EXPECT_EQ(a.rank(2), 1);
  EXPECT_EQ(a.path(3), (std::vector<int32_t>{0, 0}));
}

TEST(TreeChoices, RejectsMalformedShapes) {
  auto msg_of = [](const std::string& json) -> std::string {
    try {
      tree::parse_tree_choices(json, "", "t.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg_of("[[0], [1, 0]]").find("[1]"), std::string::npos);  // parent [1] missing
  EXPECT_NE(msg_of("[[0], [0]]").find("listed twice"), std::string::npos);
  EXPECT_NE(msg_of("[[0], []]").find("empty"), std::string::npos);
  EXPECT_NE(msg_of("[[0], [-1]]").find("rank"), std::string::npos);
  EXPECT_NE(msg_of("[[0], [\"a\"]]").find("integer"), std::string::npos);
  EXPECT_NE(msg_of("[[0], 3]").find("entry 1"), std::string::npos);
  EXPECT_NE(msg_of("{\"trees\": 3}").find("expected"), std::string::npos);
  EXPECT_NE(msg_of("[[0]").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(msg_of("[[0]]"), "");
}

TEST(TreeChoices, NonTopologicalOrderIsRepairedStably) {
  const TreeShape s = TreeShape::from_paths({{0, 0}, {1}, {0}, {0, 0, 0}, {2}});
  expect_valid(s);
  // [0,0] waits for [0]; [0,0,0] waits for [0,0]; otherwise the listed order.
  const std::vector<std::vector<int32_t>> want = {{1}, {0}, {0, 0}, {0, 0, 0}, {2}};
  EXPECT_EQ(s.paths(), want);
}

TEST(TreeChoices, LimitDepthAndPrefix) {
  const TreeShape s = TreeShape::from_paths({{0}, {0, 0}, {1}, {0, 0, 0}, {1, 0}});
  const TreeShape two = s.limit_depth(2);
  expect_valid(two);
  EXPECT_EQ(two.paths(), (std::vector<std::vector<int32_t>>{{0}, {0, 0}, {1}, {1, 0}}));
  EXPECT_EQ(s.prefix(3).paths(), (std::vector<std::vector<int32_t>>{{0}, {0, 0}}));
  EXPECT_EQ(s.prefix(100), s);
  EXPECT_THROW(s.prefix(0), InvalidArgument);
}

TEST(AcceptanceTableTest, FromCumulativeAndBack) {
  const std::vector<float> cum = {0.5f, 0.7f, 0.8f, 0.2f, 0.3f, 0.3f};
  const AcceptanceTable t = AcceptanceTable::from_cumulative(2, 3, cum);
  EXPECT_FLOAT_EQ(t.p(1, 0), 0.5f);
  EXPECT_NEAR(t.p(1, 1), 0.2f, 1e-6);
  EXPECT_NEAR(t.p(2, 2), 0.0f, 1e-6);
  EXPECT_EQ(t.p(3, 0), 0.0f);  // deeper than the table
  const auto back = t.cumulative();
  for (size_t i = 0; i < cum.size(); ++i) EXPECT_NEAR(back[i], cum[i], 1e-6);
  const std::vector<int32_t> path = {0, 1};
  EXPECT_NEAR(t.path_prob(path), 0.5 * 0.1, 1e-6);
  // Not cumulative: rejected, naming the entry.
  const std::vector<float> bad = {0.5f, 0.4f, 0.8f, 0.2f, 0.3f, 0.3f};
  EXPECT_THROW(AcceptanceTable::from_cumulative(2, 3, bad), InvalidArgument);
  EXPECT_THROW(AcceptanceTable::from_cumulative(2, 2, cum), InvalidArgument);
}

TEST(AcceptanceTableTest, OnlineUpdateIsAnExponentialAverage) {
  AcceptanceTable t(2, 3);
  t.set(1, 0, 0.5f);
  t.update(1, 0, 0.5f);  // hit at rank 0
  EXPECT_NEAR(t.p(1, 0), 0.75f, 1e-6);
  t.update(1, -1, 0.5f);  // miss: every rank decays
  EXPECT_NEAR(t.p(1, 0), 0.375f, 1e-6);
  t.update(1, 2, 0.5f);
  EXPECT_NEAR(t.p(1, 2), 0.5f, 1e-6);
  EXPECT_NEAR(t.p(1, 0), 0.1875f, 1e-6);
  t.update(7, 0, 0.5f);  // deeper than the table: ignored
  // Many outcomes with a fixed frequency converge to it.
  AcceptanceTable u(1, 2);
  for (int i = 0; i < 4000; ++i) u.update(1, i % 4 == 0 ? 1 : 0, 0.01f);
  EXPECT_NEAR(u.p(1, 0), 0.75f, 0.02);
  EXPECT_NEAR(u.p(1, 1), 0.25f, 0.02);
  const std::vector<int32_t> ranks = {0, -1};
  AcceptanceTable w(2, 2);
  w.update(ranks, 1.0f);
  EXPECT_EQ(w.p(1, 0), 1.0f);
  EXPECT_EQ(w.p(2, 0), 0.0f);
}

TEST(BestFirst, SizeNIsPrefixOfSizeNPlusOne) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const AcceptanceTable t = random_table(seed, 4, 10);
    tree::BestFirstTree prev = tree::build_best_first(t, 1);
    EXPECT_EQ(prev.shape.size(), 1);
    for (int32_t n = 2; n <= 80; ++n) {
      const tree::BestFirstTree cur = tree::build_best_first(t, n);
      ASSERT_EQ(cur.shape.size(), n);
      expect_valid(cur.shape);
      ASSERT_EQ(cur.shape.prefix(n - 1), prev.shape) << "seed " << seed << " size " << n;
      EXPECT_GE(cur.expected.back(), prev.expected.back());
      EXPECT_NEAR(cur.expected.back(), tree::expected_accepted(cur.shape, t), 1e-9);
      // Probabilities are added in non-increasing order (the greedy order).
      EXPECT_LE(cur.node_prob.back(), prev.node_prob.back() + 1e-15);
      prev = cur;
    }
  }
}

TEST(BestFirst, MatchesBruteForceOptimum) {
  // All ancestor-closed trees of n nodes over depth 3 x top-3: the greedy one has the
  // largest expected accepted length.
  for (uint64_t seed = 11; seed <= 14; ++seed) {
    const AcceptanceTable t = random_table(seed, 3, 3);
    std::vector<std::vector<int32_t>> all;
    std::function<void(std::vector<int32_t>)> gen = [&](std::vector<int32_t> p) {
      if (!p.empty()) all.push_back(p);
      if (p.size() == 3) return;
      for (int32_t j = 0; j < 3; ++j) {
        auto c = p;
        c.push_back(j);
        gen(c);
      }
    };
    gen({});
    for (int32_t n = 2; n <= 6; ++n) {
      double best = 0.0;
      std::vector<std::vector<int32_t>> chosen;
      std::set<std::vector<int32_t>> in;
      std::function<void(size_t, double)> search = [&](size_t from, double e) {
        if (static_cast<int32_t>(chosen.size()) == n - 1) {
          best = std::max(best, e);
          return;
        }
        for (size_t i = from; i < all.size(); ++i) {
          const auto& p = all[i];
          if (p.size() > 1 && !in.count(std::vector<int32_t>(p.begin(), p.end() - 1))) continue;
          chosen.push_back(p);
          in.insert(p);
          search(i + 1, e + t.path_prob(p));
          in.erase(p);
          chosen.pop_back();
        }
      };
      // `all` lists parents before children, so scanning forward finds every closed set.
      search(0, 0.0);
      const auto bf = tree::build_best_first(t, n);
      ASSERT_GT(best, 0.0);
      EXPECT_NEAR(bf.expected.back(), best, 1e-12) << "seed " << seed << " n " << n;
    }
  }
}

TEST(BestFirst, RespectsDepthAndRejectsImpossibleSizes) {
  AcceptanceTable t(3, 2);
  for (int32_t d = 1; d <= 3; ++d) {
    t.set(d, 0, 0.9f);
    t.set(d, 1, 0.05f);
  }
  const auto chain = tree::build_best_first(t, 4);
  EXPECT_EQ(chain.shape.paths(), (std::vector<std::vector<int32_t>>{{0}, {0, 0}, {0, 0, 0}}));
  const auto flat = tree::build_best_first(t, 3, 1);
  EXPECT_EQ(flat.shape.max_depth(), 1);
  EXPECT_THROW(tree::build_best_first(t, 4, 1), InvalidArgument);  // depth 1 x top-2: 3 nodes at most
  EXPECT_THROW(tree::build_best_first(t, 0), InvalidArgument);
  const auto full = tree::build_best_first(t, 15);  // 1 + 2 + 4 + 8
  EXPECT_EQ(full.shape.size(), 15);
}
