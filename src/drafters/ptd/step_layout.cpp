#include "drafters/ptd/step_layout.h"

#include <algorithm>

#include "core/assert.h"
#include "drafters/ptd/draft_tree.h"
#include "drafters/ptd/pool.h"

namespace treespec::drafters::ptd {

RowSplit split_rows(int32_t budget, int32_t draft_max, int32_t trie_max, int32_t draft_have, int32_t trie_have) {
  const int64_t avail = std::max(0, budget - 1);
  const int64_t dmax = std::max(0, std::min(draft_max, draft_have));
  const int64_t tmax = std::max(0, std::min(trie_max, trie_have));
  const int64_t wsum = static_cast<int64_t>(std::max(0, draft_max)) + std::max(0, trie_max);
  if (wsum == 0 || avail == 0) return {};
  const int64_t d_share = avail * std::max(0, draft_max) / wsum;
  const int64_t t_share = avail - d_share;
  int64_t d = std::min(d_share, dmax);
  int64_t t = std::min(t_share, tmax);
  int64_t spare = avail - d - t;
  const int64_t dd = std::min(spare, dmax - d);
  d += dd;
  spare -= dd;
  t += std::min(spare, tmax - t);
  return {static_cast<int32_t>(d), static_cast<int32_t>(t)};
}

StepLayout build_step(int32_t anchor, const DraftTree& draft, const Trie* trie, std::span<const int32_t> trie_nodes) {
  StepLayout out;
  out.tree = tree::TokenTree(anchor);
  out.draft_id.push_back(-1);
  out.trie_id.push_back(-1);
  auto push = [&](int32_t tok, int32_t parent_row, tree::NodeKind kind, int32_t did, int32_t tid) {
    const int32_t row = out.tree.add(tok, parent_row, 1.0f, kind);
    out.draft_id.push_back(did);
    out.trie_id.push_back(tid);
    return row;
  };

  // Draft tree: spine chained, each spine node followed by its own subtree.
  std::vector<int32_t> row_of(static_cast<size_t>(draft.id_limit()), -1);  // draft id -> row
  int32_t prev_spine_row = 0;
  for (int32_t s : draft.spine()) {
    for (int32_t id : draft.subtree_preorder(s)) {
      const int32_t parent_row = id == s ? prev_spine_row : row_of[static_cast<size_t>(draft.node(id).parent)];
      TREESPEC_ASSERT(parent_row >= 0, "ptd layout: draft parent emitted after its child");
      const int32_t row = push(draft.tok(id), parent_row, tree::NodeKind::aux, id, -1);
      row_of[static_cast<size_t>(id)] = row;
      if (id == s) prev_spine_row = row;
    }
  }
  out.n_draft = out.tree.size() - 1;

  // Guess trie: the selected nodes in pre-order.
  if (trie != nullptr && !trie_nodes.empty()) {
    std::vector<char> keep(static_cast<size_t>(
                               std::max<int32_t>(1, *std::max_element(trie_nodes.begin(), trie_nodes.end()) + 1)),
                           0);
    for (int32_t id : trie_nodes) keep[static_cast<size_t>(id)] = 1;
    auto kept = [&](int32_t id) { return static_cast<size_t>(id) < keep.size() && keep[static_cast<size_t>(id)]; };
    std::vector<std::pair<int32_t, int32_t>> stack;  // (trie id, parent row)
    const auto& first = trie->node(0).kids;
    for (auto it = first.rbegin(); it != first.rend(); ++it) {
      if (kept(*it)) stack.emplace_back(*it, 0);
    }
    while (!stack.empty()) {
      const auto [id, prow] = stack.back();
      stack.pop_back();
      const int32_t row = push(trie->tok(id), prow, tree::NodeKind::candidate, -1, id);
      const auto& kids = trie->node(id).kids;
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
        if (kept(*it)) stack.emplace_back(*it, row);
      }
    }
  }
  out.n_trie = out.tree.size() - 1 - out.n_draft;
  TREESPEC_ASSERT(out.n_trie == static_cast<int32_t>(trie_nodes.size()) || trie == nullptr,
                  "ptd layout: trie selection must be ancestor-closed");
  return out;
}

}  // namespace treespec::drafters::ptd
