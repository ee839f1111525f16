// PTD draft tree D (algorithms.md §3.2-3.4): the "lookahead branch" of progressive tree
// drafting. A virtual root (played by the step's anchor) has an ordered list of children,
// the spine; every node may have up to W children in insertion order. Each node keeps
// `pred`, the model's argmax at that node from the latest forward pass, and every step
// the tree grows by each node's own prediction (grow), keeps a spine of S nodes
// (maintain_spine), slides a spine subtree whose height reaches max_depth (slide), and
// cuts branches near end-of-generation tokens (prune_eos).
//
// For attention and positions the spine is a chain (spine[k] sees spine[0..k-1]); that is
// the step layout's business (step_layout.h). Here the spine nodes are plain roots.
//
// Invariants: node ids are stable while a node is alive (freed ids are reused); a node's
// children are alive and list it as parent; spine nodes have parent -1; a child is always
// created after its parent.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"

namespace treespec::drafters::ptd {

struct DraftNode {
  int32_t tok = -1;
  int32_t parent = -1;        // -1: a spine node (child of the virtual root)
  int32_t pred = -1;          // argmax at this node from the latest forward; -1 = not fed yet
  std::vector<int32_t> kids;  // insertion order
  uint64_t born = 0;          // creation stamp (budget trimming removes the newest first)
  bool alive = false;
};

class DraftTree {
 public:
  int32_t size() const { return n_alive_; }
  bool empty() const { return n_alive_ == 0; }
  // One past the largest node id ever used (for id-indexed side tables).
  int32_t id_limit() const { return static_cast<int32_t>(nodes_.size()); }
  const std::vector<int32_t>& spine() const { return spine_; }
  const DraftNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  int32_t tok(int32_t id) const { return node(id).tok; }
  int32_t pred(int32_t id) const { return node(id).pred; }
  void set_pred(int32_t id, int32_t tok) { nodes_[static_cast<size_t>(id)].pred = tok; }
  bool alive(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < nodes_.size() && nodes_[static_cast<size_t>(id)].alive;
  }

  // Adds a node: parent -1 appends a spine node. Returns its id. No limits are checked
  // here (the update rules check W and S).
  int32_t add(int32_t tok, int32_t parent);
  // Removes id and its whole subtree (detaching it from its parent or the spine).
  // Returns the number of nodes removed.
  int32_t remove_subtree(int32_t id);
  void clear();

  int32_t find_child(int32_t id, int32_t tok) const;
  bool is_spine_token(int32_t tok) const;
  // Tree depth: 1 for spine nodes.
  int32_t depth(int32_t id) const;
  // Hops from id to its deepest descendant (0 for a leaf).
  int32_t height(int32_t id) const;
  // Deepest node's depth (0 when empty). A spine subtree of height h reaches depth h + 1.
  int32_t max_depth() const;
  // Alive nodes in pre-order: spine[0], its subtree, spine[1], its subtree, ...
  std::vector<int32_t> preorder() const;
  // Pre-order of id's subtree (id first).
  std::vector<int32_t> subtree_preorder(int32_t id) const;

  // ---- update rules (algorithms.md §3.4), in the order one step applies them ----

  // Seeding: n_seeds spine chains of random length 1..init_depth; the first token of each
  // chain is a distinct prompt token drawn without replacement (falling back to a uniform
  // vocabulary id when the prompt runs out, as the reference does), the rest are drawn from
  // the remaining prompt tokens. n_vocab <= 0 disables the vocabulary fallback.
  void seed(std::span<const int32_t> prompt, int32_t n_seeds, int32_t init_depth, int32_t n_vocab, core::Rng& rng);

  // D3: every node that has a prediction gets it as a new child, unless a child already
  // carries that token or the node already has `width` children. Children added now are
  // not extended in the same call. Returns the number of nodes added.
  int32_t grow(int32_t width);

  // D4: with more than `spine_size` spine nodes, drops spine[0]'s subtree; with fewer,
  // appends v = pred(last spine node) (or `fallback` when the spine is empty), first
  // removing the last spine node's child with token v (it would duplicate the new spine
  // node); no append when v is already a spine token or unknown (-1).
  void maintain_spine(int32_t spine_size, int32_t fallback);

  // D5: every spine node whose height >= max_depth slides: its first child (insertion
  // order) whose token is not a current spine token replaces it, keeps its subtree, drops
  // its siblings and moves to the END of the spine; without such a child the spine node's
  // subtree is deleted. Then enforces `width` children per node (dropping the newest).
  // Returns the number of spine nodes that slid or were deleted.
  int32_t slide(int32_t max_depth, int32_t width);

  // D6: for every node whose token is in `eog`, climbs up to `climb` ancestors (never past
  // the spine) and deletes that ancestor's subtree. Returns the number of subtrees cut.
  int32_t prune_eos(std::span<const int32_t> eog, int32_t climb);

  // Hard row budget: while more than max_nodes nodes are alive, removes the newest branch
  // (a non-spine node that is not its parent's first child, with its subtree); when there
  // is none, the oldest spine subtree; with a single chain left, its newest node. Chains
  // of first children keep growing into the long paths pool insertion needs (removing the
  // newest nodes instead starves the pool under small budgets: docs/ptd.md). Returns the
  // number of nodes removed.
  int32_t trim_to(int32_t max_nodes);

 private:
  std::vector<DraftNode> nodes_;
  std::vector<int32_t> free_;
  std::vector<int32_t> spine_;
  int32_t n_alive_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace treespec::drafters::ptd
