// Tree shapes for head-drafted trees (Medusa, ProPD): static "tree choices" loaded from
// JSON, best-first trees built from a per-(depth, rank) acceptance table, and that table.
//
// A shape says WHICH candidate sits where, not which token: node i (i >= 1) is named by
// its rank path (r_1, ..., r_d): the rank-r_1 candidate at depth 1, then the rank-r_2
// candidate at depth 2 below it, and so on. Medusa fills node i with the rank-r_d token
// of the head that drafts depth d, whatever the parent's token is. Node 0 is the root
// (empty path).
//
// Node order: every shape keeps its nodes in an order where each prefix is a valid tree
// (ancestor-closed). Shipped Medusa trees list their paths in the order they were chosen
// (most valuable first) and best-first trees are built that way, so the prefix of n
// nodes is also the best n-node tree: truncating to a smaller budget loses the least.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace treespec::tree {

class TreeShape {
 public:
  TreeShape();  // the root alone

  // From rank paths (root excluded). Each path must be non-empty, ranks >= 0, no
  // duplicates, and every proper prefix must be listed too. The order is kept when it is
  // ancestor-closed; otherwise a stable topological order (a node moves just after the
  // last of its ancestors). InvalidArgument naming `what` and the offending path.
  static TreeShape from_paths(const std::vector<std::vector<int32_t>>& paths, const std::string& what = "tree");

  int32_t size() const { return static_cast<int32_t>(parent_.size()); }  // nodes incl. the root
  int32_t parent(int32_t i) const { return parent_[static_cast<size_t>(i)]; }
  int32_t depth(int32_t i) const { return depth_[static_cast<size_t>(i)]; }
  int32_t rank(int32_t i) const { return rank_[static_cast<size_t>(i)]; }  // last rank; -1 for the root
  std::vector<int32_t> path(int32_t i) const;                              // rank path, empty for the root
  int32_t max_depth() const;
  int32_t max_rank() const;  // -1 for the root alone
  // All rank paths in node order (root excluded): what from_paths() takes.
  std::vector<std::vector<int32_t>> paths() const;

  // The first n nodes (n >= 1; n >= size() returns a copy).
  TreeShape prefix(int32_t n) const;
  // Drops nodes deeper than max_depth (the rest stays ancestor-closed, order kept).
  TreeShape limit_depth(int32_t max_depth) const;

  bool operator==(const TreeShape& o) const { return parent_ == o.parent_ && rank_ == o.rank_; }

 private:
  std::vector<int32_t> parent_;
  std::vector<int32_t> depth_;
  std::vector<int32_t> rank_;
};

// Tree-choices JSON: either {"trees": {"name": [[0], [0, 0], [1], ...], ...}} (the format of
// ../shared/data/tree_choices.json) or a bare list of rank paths.
std::vector<std::string> tree_names_in_file(const std::string& path);
// `name` empty: the file's only tree (or its bare list). FormatError / InvalidArgument
// naming the file, tree and path; the message lists the available names.
TreeShape load_tree_choices(const std::string& path, const std::string& name = "");
// Same, from JSON text (`source` names it in messages).
TreeShape parse_tree_choices(const std::string& json_text, const std::string& name, const std::string& source);

// p(d, j): probability that the target's token at tree depth d (1-based; drafted by head
// d-1) is the rank-j candidate (0-based) for that depth. Rows need not sum to 1: the rest
// is "not in the top-k". Medusa's independence assumption makes the acceptance
// probability of the node with rank path (j_1..j_d) the product of p(i, j_i).
//
// Built offline from a calibration table (top-1..top-k accuracy per head) and updated
// online from verification outcomes with an exponential moving average.
class AcceptanceTable {
 public:
  AcceptanceTable() = default;
  AcceptanceTable(int32_t n_depth, int32_t top_k);  // all zero

  // cumulative[(d - 1) * top_k + (k - 1)] = top-k accuracy at depth d (non-decreasing in
  // k, within [0, 1]); InvalidArgument naming the entry otherwise.
  static AcceptanceTable from_cumulative(int32_t n_depth, int32_t top_k, std::span<const float> cumulative);

  int32_t n_depth() const { return n_depth_; }
  int32_t top_k() const { return top_k_; }
  float p(int32_t depth, int32_t rank) const;
  void set(int32_t depth, int32_t rank, float value);
  // top-1 .. top-k accuracy per depth, [n_depth, top_k].
  std::vector<float> cumulative() const;
  // Product of p along a rank path (depth = its length); 0 if too deep or a rank >= top_k.
  double path_prob(std::span<const int32_t> rank_path) const;

  // One outcome at `depth`: the target token was the rank-`rank` candidate (-1 = not
  // among the candidates). p(depth, .) moves towards that one-hot by `alpha` (EMA).
  void update(int32_t depth, int32_t rank, float alpha);
  // Outcomes for depths 1..ranks.size() at once.
  void update(std::span<const int32_t> ranks_by_depth, float alpha);

 private:
  int32_t n_depth_ = 0;
  int32_t top_k_ = 0;
  std::vector<float> p_;  // [n_depth, top_k]
};

// The best-first tree: nodes added in decreasing order of path probability (ties: smaller
// depth, then lexicographically smaller rank path), each node's parent already in the
// tree. Because a child's probability never exceeds its parent's, the first n nodes are
// an n-node tree of maximum expected accepted length under the table, and T_1 ⊂ T_2 ⊂ ...
// (the size-n tree is the n-prefix of every larger one).
struct BestFirstTree {
  TreeShape shape;
  std::vector<double> node_prob;  // [size]: acceptance probability of each node (root 1)
  std::vector<double> expected;   // [size]: expected[n-1] = E[accepted drafted tokens] of the n-node prefix
};

// n_nodes includes the root (>= 1). max_depth 0 = the table's depth; ranks < table top_k.
BestFirstTree build_best_first(const AcceptanceTable& table, int32_t n_nodes, int32_t max_depth = 0);

// Sum over non-root nodes of their path probability.
double expected_accepted(const TreeShape& shape, const AcceptanceTable& table);

}  // namespace treespec::tree
