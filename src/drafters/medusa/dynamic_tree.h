// Per-step dynamic trees from the heads' own confidence (EAGLE-2's idea applied to
// Medusa-style heads; docs/medusa.md, "Dynamic trees").
//
// A static tree (auto:N, a named shape) puts the same (depth, rank) slots in every step's
// tree, sized from the heads' average accuracy. The heads know more than that: their
// softmax says, for this context, whether head 1 is sure of its token or torn between
// five. A dynamic tree is grown best-first, for this step, by each node's chance of being
// accepted:
//
//   value(node) = prod over the path's depths d of conf_d(p_d(token at depth d))
//
// p_d is head d-1's softmax probability of the token (over its draft vocabulary) and
// conf_d maps it to the measured chance that the token is the target's, given that the
// path's earlier tokens were (HeadConfidence: calibrated online from the text the
// verifier produces, starting from the identity). Because each head's candidates come
// most likely first and conf_d is non-decreasing, a child's value never exceeds its
// parent's and siblings come in order, so the lazy best-first growth below adds nodes in
// non-increasing value: the first n nodes are the best n-node tree for this step, every
// smaller tree is a prefix of a larger one, and sum(value) over the first n nodes is the
// step's expected accepted length with n nodes (what the budget controller plans with).
//
// Drafts stay point masses, so greedy, lossless tree rejection sampling and typical
// acceptance apply unchanged.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tree/token_tree.h"

namespace treespec::drafters {

class MedusaCandidates;

// conf_d(p): the chance that head d-1's candidate with softmax probability p is the
// target's token, given the path's earlier tokens were. Per head, kBins bins over sqrt(p)
// (finer where most candidates fall) hold decayed hit counts with a prior of `prior_weight`
// samples at the bin's own p; the values are kept non-decreasing in p (weighted pool
// adjacent violators), so candidate order is value order.
class HeadConfidence {
 public:
  static constexpr int32_t kBins = 16;
  HeadConfidence() = default;
  explicit HeadConfidence(int32_t n_heads, double prior_weight = 4.0);

  int32_t n_heads() const { return n_heads_; }
  // conf for head k (0-based) at softmax probability p in [0, 1].
  float value(int32_t k, float p) const;
  // One graded candidate: head k offered a token with probability p; hit = it was the
  // target's. `alpha`: decay of the bin's earlier counts (an EMA over ~1/alpha samples).
  void update(int32_t k, float p, bool hit, float alpha);
  // Samples seen by head k (decayed), for reports.
  double weight(int32_t k) const;

  static int32_t bin(float p);

 private:
  void refresh(int32_t k);

  int32_t n_heads_ = 0;
  double prior_weight_ = 4.0;
  std::vector<double> hits_, n_;  // [n_heads, kBins] decayed counts
  std::vector<float> value_;      // [n_heads, kBins]
};

// One step's dynamic tree and its expected accepted length per size.
struct DynamicTree {
  tree::TokenTree tree;          // best-first: node i was added i-th
  std::vector<double> value;     // [size]: each node's acceptance chance (root 1)
  std::vector<double> expected;  // [size]: expected[n-1] = sum of value[1..n-1]
  // Nodes to propose under a budget and a per-node value floor (ancestor-closed prefix).
  int32_t size_for(int32_t budget, double min_value) const;
};

// The mean over recent steps of DynamicTree::expected (an EMA per size), for the budget
// controller, which plans a few steps ahead (Drafter::expected_accepted). Before any
// step it is `seed` (e.g. the calibration table's best-first tree).
class ExpectedCurve {
 public:
  explicit ExpectedCurve(std::vector<double> seed = {}, double alpha = 0.05) : e_(std::move(seed)), alpha_(alpha) {}
  void add(std::span<const double> expected);
  bool empty() const { return e_.empty(); }
  // out[n-1] for n = 1..out.size(); flat beyond the known sizes.
  void fill(std::span<double> out) const;

 private:
  std::vector<double> e_;
  double alpha_;
};

// Grows the best-first tree of at most n_nodes nodes (incl. the root) from this step's
// candidates. Ties go to the node found first (shallower, lower rank), so the tree
// depends only on the candidates and conf.
DynamicTree grow_dynamic_tree(int32_t root, const MedusaCandidates& cand, const HeadConfidence& conf, int32_t n_nodes);

}  // namespace treespec::drafters
