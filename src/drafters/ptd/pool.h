// PTD pool P (algorithms.md §3.2): per sequence, a map from token v to a trie of
// continuations observed after v (the trie's root stands for v itself). Tries are filled
// from the draft tree (key-first insertion I), from the model's predictions at every
// verified trie node (feedback F) and, with the re-insertion fix, from every verified trie
// node's subtree under that node's own token. A trie holding more than `cap` nodes drops
// its oldest first-level branch, once per insertion (the reference's rule).
//
// Node ids of a trie are stable while the node is alive, so feedback can be applied to
// the live trie by id (fix 4 of §3.9).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace treespec::drafters::ptd {

class DraftTree;

struct TrieNode {
  int32_t tok = -1;
  int32_t parent = -1;        // -1 for the root (node 0)
  std::vector<int32_t> kids;  // insertion order
  bool alive = false;
};

class Trie {
 public:
  explicit Trie(int32_t key = -1);

  int32_t key() const { return nodes_[0].tok; }
  // Non-root nodes alive (the reference's node count).
  int32_t size() const { return n_alive_ - 1; }
  bool empty() const { return size() == 0; }
  const TrieNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  int32_t tok(int32_t id) const { return node(id).tok; }
  bool alive(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < nodes_.size() && nodes_[static_cast<size_t>(id)].alive;
  }

  int32_t find_child(int32_t id, int32_t tok) const;
  // Child of id with this token: the existing one, or a new one appended. *added tells which.
  int32_t child(int32_t id, int32_t tok, bool* added = nullptr);
  // Removes id (not the root) and its subtree; returns the number of nodes removed.
  int32_t remove_subtree(int32_t id);
  // Drops the root's oldest child and its subtree; returns the number of nodes removed.
  int32_t evict_oldest();
  // Non-root nodes in pre-order (children in insertion order).
  std::vector<int32_t> preorder() const;
  // Up to max_nodes non-root nodes, shallow first (breadth-first, insertion order):
  // an ancestor-closed selection for a row budget.
  std::vector<int32_t> breadth_first(int32_t max_nodes) const;

 private:
  std::vector<TrieNode> nodes_;
  std::vector<int32_t> free_;
  int32_t n_alive_ = 0;
};

// A small standalone tree used as the source of a merge: token, children, and an optional
// extra child token (`pred`) merged after the children.
struct MergeSource {
  struct Node {
    int32_t tok = -1;
    int32_t pred = -1;
    std::vector<int32_t> kids;
  };
  std::vector<Node> nodes;  // nodes[0] is the subtree root (its token is the key)
};

struct PoolCounters {
  int64_t merges = 0;          // subtree merges (insertion I and re-insertion)
  int64_t nodes_inserted = 0;  // trie nodes created by merges
  int64_t feedback_added = 0;  // trie nodes created by feedback F
  int64_t evictions = 0;       // first-level branches dropped by the cap
  int64_t nodes_evicted = 0;
  int64_t reinsert_merges = 0;        // merges from the re-insertion fix
  int64_t snapshot_replacements = 0;  // reference-mode feedback that replaced a changed live trie
};

class Pool {
 public:
  explicit Pool(int32_t cap = 60) : cap_(cap) {}

  void clear() { tries_.clear(); }
  int32_t cap() const { return cap_; }
  Trie* find(int32_t key);
  const Trie* find(int32_t key) const;
  Trie& get(int32_t key);  // creates an empty trie when missing
  void put(int32_t key, Trie t) { tries_[key] = std::move(t); }
  size_t n_keys() const { return tries_.size(); }
  int64_t n_nodes() const;

  // Merges src (root token = key) into P[key]: every src child path is added, and each
  // src node's pred (when >= 0) becomes an extra child of the matching trie node. Then the
  // cap rule: if P[key] holds more than cap nodes, its oldest first-level branch goes.
  void merge(const MergeSource& src);

  // Merge sources from a draft tree node's subtree (with preds) and a trie node's subtree.
  static MergeSource from_draft(const DraftTree& d, int32_t id);
  static MergeSource from_trie(const Trie& t, int32_t id);

  PoolCounters counters;

 private:
  int32_t cap_;
  std::unordered_map<int32_t, Trie> tries_;
};

}  // namespace treespec::drafters::ptd
