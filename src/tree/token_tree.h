// TokenTree: the candidate continuations of one sequence for one step, as flat arrays in
// topological order (every node after its parent). Node 0 is the root: the newest token
// known to be correct whose KV is not cached yet. Node i sits at position
// n_past + depth[i]; it attends to the committed prefix plus its ancestors and itself.
//
// Invariants (checked by validate(), enforced by add()): exactly one root (node 0,
// parent -1); parent[i] in [0, i); depth[i] = depth[parent[i]] + 1; token ids >= 0; a
// candidate's parent is a candidate (a guess below an aux row could never be reached by
// the verifier, and would inflate the drafted-token count).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace treespec::tree {

// candidate: a guess the verifier may accept. aux: a row fed only so the drafter can read
// the model's prediction there (lookahead's Jacobi window, PTD's draft tree); never
// accepted, its KV never committed.
enum class NodeKind : uint8_t { candidate = 0, aux = 1 };

class TokenTree {
 public:
  TokenTree() = default;
  explicit TokenTree(int32_t root_token) { add(root_token, -1); }

  // Builds and validates; InvalidArgument naming the first bad node. `depths`, when
  // given (trees read from outside: files, requests), must agree with the parents.
  static TokenTree from_arrays(std::span<const int32_t> tokens, std::span<const int32_t> parents,
                               std::span<const float> probs = {}, std::span<const int32_t> depths = {});
  // root -> t0 -> t1 -> ...
  static TokenTree chain(int32_t root_token, std::span<const int32_t> continuation);

  // Appends a node; parent must be an existing node (or -1 for the first node only).
  // Returns its index. Throws InvalidArgument (naming the node) on a bad parent, a
  // negative token, or a candidate whose parent is aux.
  int32_t add(int32_t token, int32_t parent, float prob = 1.0f, NodeKind kind = NodeKind::candidate);

  int32_t size() const { return static_cast<int32_t>(token_.size()); }
  bool empty() const { return token_.empty(); }
  int32_t token(int32_t i) const { return token_[static_cast<size_t>(i)]; }
  int32_t parent(int32_t i) const { return parent_[static_cast<size_t>(i)]; }
  int32_t depth(int32_t i) const { return depth_[static_cast<size_t>(i)]; }
  // Draft probability of the node's token under the drafter (1 for point-mass drafts).
  float prob(int32_t i) const { return prob_[static_cast<size_t>(i)]; }
  NodeKind kind(int32_t i) const { return kind_[static_cast<size_t>(i)]; }
  bool is_candidate(int32_t i) const { return kind_[static_cast<size_t>(i)] == NodeKind::candidate; }
  // Number of candidate nodes other than the root (the drafted tokens of this step).
  int32_t n_candidates() const;
  int32_t max_depth() const;
  const std::vector<int32_t>& tokens() const { return token_; }
  const std::vector<int32_t>& parents() const { return parent_; }
  const std::vector<int32_t>& depths() const { return depth_; }

  // Children of node i in insertion order.
  const std::vector<int32_t>& children(int32_t i) const;
  // Candidate child of i with this token, or -1.
  int32_t find_child(int32_t i, int32_t token) const;

  // Ancestor-or-self bitset of node i: bit j set iff j is i or an ancestor of i.
  int32_t mask_words() const;
  const uint64_t* ancestors(int32_t i) const;
  bool is_ancestor_or_self(int32_t a, int32_t i) const;

  // Node indices root..i.
  std::vector<int32_t> path_to(int32_t i) const;

  // Sub-tree keeping only `keep` nodes (must contain the root and be closed under
  // ancestors, in increasing order). Returns the new tree; old_index[k] = original index.
  TokenTree subtree(std::span<const int32_t> keep, std::vector<int32_t>* old_index = nullptr) const;
  // The first n nodes (a topological prefix is ancestor-closed); the tree itself when it
  // has at most n.
  TokenTree prefix(int32_t n) const;

  // Throws InvalidArgument naming the first node that breaks an invariant.
  void validate() const;

 private:
  void build_derived() const;

  std::vector<int32_t> token_;
  std::vector<int32_t> parent_;
  std::vector<int32_t> depth_;
  std::vector<float> prob_;
  std::vector<NodeKind> kind_;
  // Derived lazily (mutable cache, rebuilt after add()).
  mutable bool derived_valid_ = false;
  mutable int32_t words_ = 0;
  mutable std::vector<uint64_t> anc_;  // [size, words_]
  mutable std::vector<std::vector<int32_t>> children_;
};

}  // namespace treespec::tree
