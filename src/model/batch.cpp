#include "model/batch.h"

#include <algorithm>

namespace treespec::model {

void Batch::add_chain(int32_t seq, int32_t n_past, std::span<const int32_t> toks) {
  BatchSegment s{seq, n_past, n_rows(), static_cast<int32_t>(toks.size()), nullptr};
  for (size_t i = 0; i < toks.size(); ++i) {
    tokens.push_back(toks[i]);
    pos.push_back(n_past + static_cast<int32_t>(i));
    node.push_back(static_cast<int32_t>(i));
  }
  segs.push_back(s);
}

void Batch::add_tree(int32_t seq, int32_t n_past, const tree::TokenTree& t) {
  BatchSegment s{seq, n_past, n_rows(), t.size(), &t};
  for (int32_t i = 0; i < t.size(); ++i) {
    tokens.push_back(t.token(i));
    pos.push_back(n_past + t.depth(i));
    node.push_back(i);
  }
  segs.push_back(s);
}

void Batch::add_tree_rows(int32_t seq, int32_t n_past, const tree::TokenTree& t, std::span<const int32_t> nodes) {
  BatchSegment s{seq, n_past, n_rows(), static_cast<int32_t>(nodes.size()), &t};
  for (int32_t i : nodes) {
    tokens.push_back(t.token(i));
    pos.push_back(n_past + t.depth(i));
    node.push_back(i);
  }
  segs.push_back(s);
}

int32_t Batch::cells_needed(const BatchSegment& s) const {
  int32_t mx = -1;
  for (int32_t r = s.row_begin; r < s.row_begin + s.n_rows; ++r) mx = std::max(mx, node[static_cast<size_t>(r)]);
  return mx + 1;
}

}  // namespace treespec::model
