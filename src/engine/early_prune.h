// Early pruning inside the verification forward (ProPD, docs/propd.md), for whichever
// drafter asks for it: each sequence's Drafter::prune() names a layer, a width k and a
// PruneScorer; after that layer a candidate node survives only if its parent survived
// and its token is among the parent's top-k under the scorer (sampling::top_k_ids). The
// engine runs the layers; this class decides and compacts the rows between them. It
// never knows which drafter or scorer it is working for.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "drafters/drafter.h"
#include "model/batch.h"
#include "tree/token_tree.h"

namespace treespec::core {
class ThreadPool;
}
namespace treespec::model {
class Model;
}

namespace treespec::engine {

class EarlyPruning {
 public:
  // Starts a step: which sequence is pruned at which layer (only trees with a drafted
  // candidate can lose rows). Returns the distinct layers in increasing order.
  std::vector<int32_t> plan(std::span<const drafters::PruneSpec* const> specs, std::span<const tree::TokenTree> trees,
                            int32_t n_layer);

  // After `layer` layers: scores the parent rows of every sequence pruned there, keeps
  // the survivors, writes their rows into `next` (same segments, fewer rows) and moves
  // their hidden states in x to match. Sequences pruned elsewhere keep all their rows.
  void prune_at(int32_t layer, const model::Model& m, core::ThreadPool* pool, std::span<const tree::TokenTree> trees,
                const model::Batch& batch, float* x, model::Batch& next);

  // Per sequence of the step: the layer it was pruned after (0 = not pruned), and per
  // node 1 if it reached the last layer (empty when not pruned).
  int32_t layer(size_t i) const { return layer_[i]; }
  std::span<const uint8_t> survived(size_t i) const {
    return layer_[i] > 0 ? std::span<const uint8_t>(survived_[i]) : std::span<const uint8_t>();
  }

 private:
  // Next-token logits of the parent rows of the sequences pruned at `layer`;
  // score_of_row[r] = the row's index into scores_ (-1: not scored).
  void score_parents(int32_t layer, const model::Model& m, core::ThreadPool* pool,
                     std::span<const tree::TokenTree> trees, const model::Batch& batch, const float* x,
                     std::vector<int32_t>& score_of_row);
  // The nodes of sequence i's tree that survive (ancestor-closed, in node order).
  void keep_nodes(size_t i, const tree::TokenTree& t, const model::BatchSegment& seg, int32_t n_vocab,
                  std::span<const int32_t> score_of_row, std::vector<int32_t>& nodes);

  std::vector<const drafters::PruneSpec*> specs_;  // per sequence of the step
  std::vector<int32_t> layer_;                     // per sequence (0 = none)
  std::vector<std::vector<uint8_t>> survived_;     // per sequence, per node
  core::AlignedBuffer<float> x_;                   // [parents, n_embd] scorer inputs
  core::AlignedBuffer<float> work_;                // [2 * parents, n_embd] scorer scratch
  core::AlignedBuffer<float> logits_;              // [parents, n_vocab] scorer outputs
};

}  // namespace treespec::engine
