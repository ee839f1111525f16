// Prompt lookup's tree construction on hand-made contexts: which continuations it
// finds, in which order, how shared prefixes merge, and the budget / branch / length caps.
// (Greedy equality with plain decoding on real prompts: tests/integration/golden.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "drafters/lookup/lookup_drafter.h"
#include "treespec/status.h"

using treespec::drafters::DraftInput;
using treespec::drafters::LookupDrafter;
using treespec::drafters::LookupParams;
using treespec::tree::TokenTree;

namespace {

TokenTree propose(LookupDrafter& d, const std::vector<int32_t>& ctx, int32_t budget) {
  DraftInput in;
  in.context = ctx;
  in.n_past = static_cast<int32_t>(ctx.size()) - 1;
  in.budget = budget;
  return d.propose(in);
}

// Tokens on the path root -> node (excluding the root).
std::vector<int32_t> path_tokens(const TokenTree& t, int32_t node) {
  std::vector<int32_t> out;
  for (; node > 0; node = t.parent(node)) out.insert(out.begin(), t.token(node));
  return out;
}

// Every root-to-leaf path of t, in node order of the leaves.
std::vector<std::vector<int32_t>> leaf_paths(const TokenTree& t) {
  std::vector<std::vector<int32_t>> out;
  for (int32_t i = 1; i < t.size(); ++i) {
    if (t.children(i).empty()) out.push_back(path_tokens(t, i));
  }
  return out;
}

}  // namespace

TEST(Lookup, NoMatchGivesRootOnly) {
  LookupDrafter d(LookupParams{});
  const TokenTree t = propose(d, {1, 2, 3, 4, 5}, 16);
  ASSERT_EQ(t.size(), 1);
  EXPECT_EQ(t.token(0), 5);
}

TEST(Lookup, LongestMatchContinuationComesFirst) {
  // Suffix "7 8" occurred once (followed by 9 10 11); "8" alone occurred more recently,
  // followed by 4 4 4. The longer match ranks first, then the shorter one.
  LookupParams p;
  p.draft_len = 3;
  LookupDrafter d(p);
  const TokenTree t = propose(d, {6, 7, 8, 9, 10, 11, 3, 8, 4, 4, 4, 5, 7, 8}, 32);
  EXPECT_EQ(t.token(0), 8);
  EXPECT_EQ(leaf_paths(t), (std::vector<std::vector<int32_t>>{{9, 10, 11}, {4, 4, 4}}));
}

TEST(Lookup, SharedPrefixesMergeIntoOneBranch) {
  // "1 2" is followed by "3 5", then "3 4", then "3 4" again: the tree is 2 -> 3 -> {4, 5},
  // the most recent continuation first.
  LookupParams p;
  p.ngram_min = 2;
  p.ngram_max = 2;
  p.draft_len = 2;
  LookupDrafter d(p);
  const TokenTree t = propose(d, {1, 2, 3, 5, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2}, 32);
  ASSERT_EQ(t.size(), 4);
  EXPECT_EQ(t.children(0).size(), 1u);
  const int32_t three = t.children(0)[0];
  EXPECT_EQ(t.token(three), 3);
  std::vector<int32_t> kids;
  for (int32_t c : t.children(three)) kids.push_back(t.token(c));
  EXPECT_EQ(kids, (std::vector<int32_t>{4, 5}));
}

TEST(Lookup, RespectsBudgetBranchesAndDraftLength) {
  std::vector<int32_t> ctx;
  for (int32_t rep = 0; rep < 6; ++rep) {
    ctx.push_back(1);
    for (int32_t k = 0; k < 12; ++k) ctx.push_back(100 + rep * 20 + k);
  }
  ctx.push_back(1);  // "1" was followed by six different continuations
  LookupParams p;
  p.ngram_min = 1;
  p.ngram_max = 1;
  p.draft_len = 5;
  p.max_branches = 3;
  LookupDrafter d(p);
  const TokenTree full = propose(d, ctx, 1000);
  EXPECT_EQ(full.size(), 1 + 3 * 5);  // 3 branches of 5
  EXPECT_EQ(full.max_depth(), 5);
  EXPECT_EQ(full.children(0).size(), 3u);
  for (int32_t budget : {1, 2, 7, 11}) {
    const TokenTree t = propose(d, ctx, budget);
    EXPECT_EQ(t.size(), budget);
    // A budget-capped tree is a prefix of the full one: the most recent branches first.
    for (int32_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t.token(i), full.token(i));
      EXPECT_EQ(t.parent(i), full.parent(i));
    }
  }
  EXPECT_EQ(d.max_nodes(), 16);
}

TEST(Lookup, ContinuationStopsAtTheEndOfTheContext) {
  // The only earlier "5" is two tokens before the end: its continuation is "6 5".
  LookupParams p;
  p.ngram_min = 1;
  p.ngram_max = 1;
  LookupDrafter d(p);
  const TokenTree t = propose(d, {9, 5, 6, 5}, 32);
  EXPECT_EQ(leaf_paths(t), (std::vector<std::vector<int32_t>>{{6, 5}}));
}

TEST(Lookup, InvalidParametersNameTheLimit) {
  auto expect_invalid = [](LookupParams p, const char* what) {
    try {
      LookupDrafter d(p);
      ADD_FAILURE() << "accepted invalid parameters: " << what;
    } catch (const treespec::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  LookupParams p;
  p.ngram_min = 0;
  expect_invalid(p, "n-gram");
  p = LookupParams{};
  p.ngram_max = 65;
  expect_invalid(p, "n-gram");
  p = LookupParams{};
  p.draft_len = 0;
  expect_invalid(p, "draft length");
  p = LookupParams{};
  p.max_branches = 65;
  expect_invalid(p, "branches");
}
