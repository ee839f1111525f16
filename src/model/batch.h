// Batch: the rows of one forward pass, grouped into per-sequence segments.
//
// Row r of a segment is tree node node[r] of that sequence's step tree. It sits at
// position pos[r] (n_past + depth), writes its K/V to cell n_past + node[r] and attends
// to the committed cells [0, n_past) plus the cells of its ancestors-or-self in the
// tree. A segment without a tree is a causal chain (prefill): node = row offset. Rows of
// a segment may be any ancestor-closed subset of its tree (early pruning), so node[]
// need not be 0..n-1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tree/token_tree.h"

namespace treespec::model {

struct BatchSegment {
  int32_t seq = 0;
  int32_t n_past = 0;  // committed cells of `seq` when the batch was built
  int32_t row_begin = 0;
  int32_t n_rows = 0;
  const tree::TokenTree* tree = nullptr;  // not owned; nullptr = causal chain
};

struct Batch {
  std::vector<int32_t> tokens;  // [n_rows]
  std::vector<int32_t> pos;     // [n_rows]
  std::vector<int32_t> node;    // [n_rows]
  std::vector<BatchSegment> segs;

  int32_t n_rows() const { return static_cast<int32_t>(tokens.size()); }
  void clear() {
    tokens.clear();
    pos.clear();
    node.clear();
    segs.clear();
  }
  // Causal rows for `seq` after n_past committed cells (prefill or plain decode).
  void add_chain(int32_t seq, int32_t n_past, std::span<const int32_t> toks);
  // Every node of `tree` (kept by reference: it must outlive the forward pass).
  void add_tree(int32_t seq, int32_t n_past, const tree::TokenTree& tree);
  // Only the listed nodes of `tree` (ancestor-closed, increasing).
  void add_tree_rows(int32_t seq, int32_t n_past, const tree::TokenTree& tree, std::span<const int32_t> nodes);
  // Highest cell offset (node index) + 1 that a segment writes: what must fit in the cache.
  int32_t cells_needed(const BatchSegment& s) const;
};

}  // namespace treespec::model
