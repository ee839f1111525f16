// TokenTree: construction, derived data (children, ancestor bitsets, paths, depths), and
// validation errors that name the offending node.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rng.h"
#include "tree/token_tree.h"
#include "treespec/status.h"

using namespace treespec;
using tree::NodeKind;
using tree::TokenTree;

namespace {

// Expects InvalidArgument whose message contains every fragment.
template <typename F>
void expect_invalid(F&& f, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no InvalidArgument thrown";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    for (const auto& frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "'" << msg << "' lacks '" << frag << "'";
  }
}

}  // namespace

TEST(TokenTree, FromArraysBuildsDepthsChildrenAndPaths) {
  // 0(10) -> 1(11) -> 3(13) -> 6(16)
  //                 -> 4(14)
  //       -> 2(12) -> 5(15)
  const std::vector<int32_t> tok{10, 11, 12, 13, 14, 15, 16};
  const std::vector<int32_t> par{-1, 0, 0, 1, 1, 2, 3};
  const std::vector<int32_t> dep{0, 1, 1, 2, 2, 2, 3};
  const auto t = TokenTree::from_arrays(tok, par, {}, dep);
  t.validate();
  EXPECT_EQ(t.size(), 7);
  EXPECT_EQ(t.depths(), dep);
  EXPECT_EQ(t.max_depth(), 3);
  EXPECT_EQ(t.n_candidates(), 6);
  EXPECT_EQ(t.children(0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(t.children(1), (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(t.children(6).empty());
  EXPECT_EQ(t.path_to(6), (std::vector<int32_t>{0, 1, 3, 6}));
  EXPECT_EQ(t.path_to(0), (std::vector<int32_t>{0}));
  EXPECT_EQ(t.find_child(1, 14), 4);
  EXPECT_EQ(t.find_child(1, 15), -1);
  EXPECT_TRUE(t.is_ancestor_or_self(0, 6));
  EXPECT_TRUE(t.is_ancestor_or_self(3, 6));
  EXPECT_TRUE(t.is_ancestor_or_self(6, 6));
  EXPECT_FALSE(t.is_ancestor_or_self(2, 6));
  EXPECT_FALSE(t.is_ancestor_or_self(4, 3));
  EXPECT_FLOAT_EQ(t.prob(3), 1.0f);
}

TEST(TokenTree, ChainAndProbabilities) {
  const std::vector<int32_t> cont{5, 6, 7};
  const auto c = TokenTree::chain(4, cont);
  EXPECT_EQ(c.tokens(), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(c.parents(), (std::vector<int32_t>{-1, 0, 1, 2}));
  const std::vector<float> probs{1.0f, 0.5f};
  const auto t = TokenTree::from_arrays(std::vector<int32_t>{1, 2}, std::vector<int32_t>{-1, 0}, probs);
  EXPECT_FLOAT_EQ(t.prob(1), 0.5f);
}

// Ancestor bitsets of large random trees (several 64-bit words) agree with path_to.
TEST(TokenTree, AncestorBitsetsMatchPathsAcrossWords) {
  core::Rng rng(9);
  for (int32_t n : {1, 63, 64, 65, 200}) {
    TokenTree t(0);
    while (t.size() < n)
      t.add(static_cast<int32_t>(rng.uniform_int(50)),
            static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size()))));
    EXPECT_EQ(t.mask_words(), (n + 63) / 64);
    for (int32_t i = 0; i < n; ++i) {
      std::vector<bool> on(static_cast<size_t>(n), false);
      for (int32_t a : t.path_to(i)) on[static_cast<size_t>(a)] = true;
      EXPECT_EQ(t.depth(i) + 1, static_cast<int32_t>(t.path_to(i).size()));
      for (int32_t j = 0; j < n; ++j)
        ASSERT_EQ(t.is_ancestor_or_self(j, i), on[static_cast<size_t>(j)]) << n << " " << i << " " << j;
    }
  }
}

TEST(TokenTree, AuxNodesAreNeverCandidates) {
  TokenTree t(3);
  const int32_t a = t.add(4, 0, 1.0f, NodeKind::aux);
  const int32_t b = t.add(4, 0);
  const int32_t aa = t.add(5, a, 1.0f, NodeKind::aux);
  EXPECT_FALSE(t.is_candidate(a));
  EXPECT_TRUE(t.is_candidate(b));
  EXPECT_EQ(t.n_candidates(), 1);
  EXPECT_EQ(t.find_child(0, 4), b);  // the aux twin is skipped
  EXPECT_EQ(t.depth(aa), 2);
  // The root is always a candidate, whatever kind is asked for.
  TokenTree r;
  r.add(1, -1, 1.0f, NodeKind::aux);
  EXPECT_TRUE(r.is_candidate(0));
}

TEST(TokenTree, SubtreeKeepsAncestorClosedSets) {
  const auto t = TokenTree::from_arrays(std::vector<int32_t>{10, 11, 12, 13, 14}, std::vector<int32_t>{-1, 0, 1, 0, 3});
  std::vector<int32_t> old;
  const std::vector<int32_t> keep{0, 3, 4};
  const auto s = t.subtree(keep, &old);
  EXPECT_EQ(s.tokens(), (std::vector<int32_t>{10, 13, 14}));
  EXPECT_EQ(s.parents(), (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_EQ(old, keep);
  expect_invalid([&] { t.subtree(std::vector<int32_t>{0, 2}); }, {"node 2", "parent 1"});
  expect_invalid([&] { t.subtree(std::vector<int32_t>{0, 9}); }, {"node 9", "out of range"});
}

TEST(TokenTree, PrefixKeepsTheFirstNodes) {
  const auto t = TokenTree::from_arrays(std::vector<int32_t>{10, 11, 12, 13, 14}, std::vector<int32_t>{-1, 0, 1, 0, 3});
  const auto p = t.prefix(3);
  EXPECT_EQ(p.tokens(), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(p.parents(), (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_EQ(t.prefix(5).tokens(), t.tokens());
  EXPECT_EQ(t.prefix(9).tokens(), t.tokens());
}

TEST(TokenTree, InvalidTreesNameTheNode) {
  using V = std::vector<int32_t>;
  // Parent out of range.
  expect_invalid([] { TokenTree::from_arrays(V{1, 2, 3}, V{-1, 0, 7}); }, {"node 2", "parent 7"});
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{-1, -5}); }, {"node 1", "parent -5"});
  // Parent later than (or equal to) the child.
  expect_invalid([] { TokenTree::from_arrays(V{1, 2, 3}, V{-1, 2, 0}); }, {"node 1", "parent 2"});
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{-1, 1}); }, {"node 1", "parent 1"});
  // A second root.
  expect_invalid([] { TokenTree::from_arrays(V{1, 2, 3}, V{-1, 0, -1}); }, {"node 2", "second root"});
  // Node 0 that is not a root.
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{0, 0}); }, {"node 0"});
  // Bad depth.
  expect_invalid(
      [] {
        TokenTree::from_arrays(V{1, 2, 3}, V{-1, 0, 1}, {}, V{0, 1, 1});
      },
      {"node 2", "depth 1", "expected 2"});
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{-1, 0}, {}, V{1, 2}); }, {"node 0", "depth 1"});
  // Negative token.
  expect_invalid([] { TokenTree::from_arrays(V{1, -3}, V{-1, 0}); }, {"node 1", "negative token", "-3"});
  expect_invalid([] { TokenTree(-1); }, {"node 0", "negative"});
  // Array length mismatches.
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{-1}); }, {"2 tokens", "1 parents"});
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{-1, 0}, std::vector<float>{1.0f}); }, {"draft probabilities"});
  expect_invalid([] { TokenTree::from_arrays(V{1, 2}, V{-1, 0}, {}, V{0}); }, {"depths"});
  // A candidate below an aux node could never be accepted.
  expect_invalid(
      [] {
        TokenTree t(1);
        const int32_t a = t.add(2, 0, 1.0f, NodeKind::aux);
        t.add(3, a);
      },
      {"node 2", "aux parent 1"});
  // Empty tree.
  expect_invalid([] { TokenTree().validate(); }, {"empty"});
}
