#include "engine/early_prune.h"

#include <algorithm>
#include <cstring>

#include "core/assert.h"
#include "model/model.h"
#include "sampling/top_k.h"

namespace treespec::engine {

std::vector<int32_t> EarlyPruning::plan(std::span<const drafters::PruneSpec* const> specs,
                                        std::span<const tree::TokenTree> trees, int32_t n_layer) {
  const size_t n = specs.size();
  specs_.assign(specs.begin(), specs.end());
  layer_.assign(n, 0);
  survived_.resize(n);
  std::vector<int32_t> layers;
  for (size_t i = 0; i < n; ++i) {
    survived_[i].clear();
    const drafters::PruneSpec& ps = *specs[i];
    // Only trees with a drafted candidate can lose rows; the root is never tested.
    if (!ps.enabled() || ps.layer >= n_layer || trees[i].n_candidates() == 0) continue;
    TREESPEC_ASSERT(ps.head != nullptr, "pruning: an enabled PruneSpec has a scorer");
    layer_[i] = ps.layer;
    if (std::find(layers.begin(), layers.end(), ps.layer) == layers.end()) layers.push_back(ps.layer);
  }
  std::sort(layers.begin(), layers.end());
  return layers;
}

void EarlyPruning::score_parents(int32_t layer, const model::Model& m, core::ThreadPool* pool,
                                 std::span<const tree::TokenTree> trees, const model::Batch& batch, const float* x,
                                 std::vector<int32_t>& score_of_row) {
  const int64_t E = m.hparams().n_embd;
  const int64_t V = m.hparams().n_vocab;
  // A row whose node has a candidate child gets its top-k next tokens under the
  // sequence's scorer.
  std::vector<int32_t> parent_row;                    // batch rows scored
  std::vector<const drafters::PruneScorer*> head_of;  // per scored row
  score_of_row.assign(static_cast<size_t>(batch.n_rows()), -1);
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (layer_[i] != layer) continue;
    const tree::TokenTree& t = trees[i];
    const auto& seg = batch.segs[i];
    for (int32_t r = seg.row_begin; r < seg.row_begin + seg.n_rows; ++r) {
      const int32_t node = batch.node[static_cast<size_t>(r)];
      bool has_cand_child = false;
      for (int32_t c : t.children(node)) has_cand_child = has_cand_child || t.is_candidate(c);
      if (!has_cand_child) continue;
      score_of_row[static_cast<size_t>(r)] = static_cast<int32_t>(parent_row.size());
      parent_row.push_back(r);
      head_of.push_back(specs_[i]->head.get());
    }
  }
  const auto np = static_cast<int32_t>(parent_row.size());
  x_.reserve(static_cast<size_t>(np) * E, "prune head inputs");
  work_.reserve(2 * static_cast<size_t>(np) * E, "prune head scratch");
  logits_.reserve(static_cast<size_t>(np) * V, "prune head logits");
  for (int32_t k = 0; k < np; ++k) {
    std::memcpy(x_.data() + k * E, x + static_cast<int64_t>(parent_row[static_cast<size_t>(k)]) * E,
                static_cast<size_t>(E) * sizeof(float));
  }
  // Rows with the same scorer (usually all) go through it together.
  for (int32_t k0 = 0; k0 < np;) {
    int32_t k1 = k0 + 1;
    while (k1 < np && head_of[static_cast<size_t>(k1)] == head_of[static_cast<size_t>(k0)]) ++k1;
    head_of[static_cast<size_t>(k0)]->logits(m, x_.data() + k0 * E, k1 - k0, work_.data(), logits_.data() + k0 * V,
                                             pool);
    k0 = k1;
  }
}

void EarlyPruning::keep_nodes(size_t i, const tree::TokenTree& t, const model::BatchSegment& seg, int32_t n_vocab,
                              std::span<const int32_t> score_of_row, std::vector<int32_t>& nodes) {
  // Keep a node iff its parent is kept and (it is aux, or its token is among the
  // parent's top-k). Topological order makes one pass enough; the survivors are closed
  // under ancestors, so their mask is the sub-matrix of the tree's.
  const int32_t k = std::min(specs_[i]->top_k, n_vocab);
  auto& keep = survived_[i];
  keep.assign(static_cast<size_t>(t.size()), 0);
  keep[0] = 1;
  // Rows of this segment are every node 0..n-1 (a sequence is pruned once).
  TREESPEC_ASSERT(seg.n_rows == t.size(), "pruning: a tree is pruned once, from all its rows");
  std::vector<std::vector<int32_t>> top_of(static_cast<size_t>(t.size()));
  for (int32_t u = 1; u < t.size(); ++u) {
    const int32_t p = t.parent(u);
    if (!keep[static_cast<size_t>(p)]) continue;
    if (!t.is_candidate(u)) {
      keep[static_cast<size_t>(u)] = 1;
      continue;
    }
    auto& tp = top_of[static_cast<size_t>(p)];
    if (tp.empty()) {
      const int32_t sr = score_of_row[static_cast<size_t>(seg.row_begin + p)];
      TREESPEC_ASSERT(sr >= 0, "pruning: a candidate's parent was scored");
      tp.resize(static_cast<size_t>(k));
      sampling::top_k_ids(logits_.data() + static_cast<int64_t>(sr) * n_vocab, n_vocab, k, tp.data());
    }
    keep[static_cast<size_t>(u)] = std::find(tp.begin(), tp.end(), t.token(u)) != tp.end() ? 1 : 0;
  }
  nodes.clear();
  for (int32_t u = 0; u < t.size(); ++u) {
    if (keep[static_cast<size_t>(u)]) nodes.push_back(u);
  }
}

void EarlyPruning::prune_at(int32_t layer, const model::Model& m, core::ThreadPool* pool,
                            std::span<const tree::TokenTree> trees, const model::Batch& batch, float* x,
                            model::Batch& next) {
  const int64_t E = m.hparams().n_embd;
  std::vector<int32_t> score_of_row;
  score_parents(layer, m, pool, trees, batch, x, score_of_row);
  next.clear();
  std::vector<int32_t> nodes;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& seg = batch.segs[i];
    if (layer_[i] == layer) {
      keep_nodes(i, trees[i], seg, m.hparams().n_vocab, score_of_row, nodes);
    } else {
      nodes.clear();
      for (int32_t r = seg.row_begin; r < seg.row_begin + seg.n_rows; ++r)
        nodes.push_back(batch.node[static_cast<size_t>(r)]);
    }
    next.add_tree_rows(seg.seq, seg.n_past, trees[i], nodes);
  }
  // Gather the survivors' hidden states. Rows only move towards the front, in order.
  int32_t dst = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& seg = batch.segs[i];
    const auto& nseg = next.segs[i];
    int32_t r = seg.row_begin;
    for (int32_t q = nseg.row_begin; q < nseg.row_begin + nseg.n_rows; ++q) {
      const int32_t want = next.node[static_cast<size_t>(q)];
      while (batch.node[static_cast<size_t>(r)] != want) ++r;
      if (r != q)
        std::memmove(x + static_cast<int64_t>(q) * E, x + static_cast<int64_t>(r) * E,
                     static_cast<size_t>(E) * sizeof(float));
      ++r;
      ++dst;
    }
  }
  TREESPEC_ASSERT(dst == next.n_rows(), "pruning: every survivor gathered");
}

}  // namespace treespec::engine
