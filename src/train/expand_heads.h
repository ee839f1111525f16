// Widening Medusa and ProPD heads for a function-preserving expansion of their base model
// (`treespec expand`, docs/expand.md; docs/propd.md "Heads on an expanded model").
//
// In the expanded model the final norm of the residual stream (after any real layer, and
// at the end) is the source's normed vector followed by exact zeros. Every head reads
// such a vector, so widening its matrices like the expansion widens the model's keeps its
// outputs identical:
//   - residual block W [n, n] -> [N, N]: the source block; rows >= n (outputs that must
//     stay zero so x + SiLU(W x + b) keeps zeros in the padding) zero on live columns;
//     every other new entry multiplies a zero and is random filler; bias padded with 0;
//   - vocab projection [V, n] -> [V, N]: filler on the padded columns.
// Prune heads and recall tables move with the layer map: a head after l source layers
// reads the same state as after real_layer_pos[l-1] + 1 expanded layers (the layers in
// between are pass-throughs), and the lens row of expanded layer l' is the source row of
// the number of real layers below l'. The map is the expansion tool's own knowledge;
// drafters never see it (docs/expand.md, "Honest use").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drafters/medusa/medusa_heads.h"
#include "drafters/propd/prune_head.h"

namespace treespec::model {
class Model;
}

namespace treespec::train {

struct ExpandedHeads {
  std::shared_ptr<drafters::MedusaHeads> medusa;
  std::shared_ptr<drafters::PruneHeadSet> prune;  // null if the source had none
};

// n_embd: the expanded width N (>= the heads' n); n_layer: the expanded depth;
// real_layer_pos[l]: expanded index of source layer l (increasing, one per source layer);
// output_hash: output_matrix_hash() of the expanded model. InvalidArgument on a mismatch.
ExpandedHeads expand_heads(const drafters::MedusaHeads& medusa, const drafters::PruneHeadSet* prune, int32_t n_embd,
                           int32_t n_layer, const std::vector<int32_t>& real_layer_pos, const std::string& output_hash,
                           uint64_t seed = 1);

// Reads the heads file `in`, widens it for the expanded model `expanded` (its width, depth
// and output hash), and writes `out`.
void expand_heads_file(const std::string& in, const model::Model& expanded, const std::vector<int32_t>& real_layer_pos,
                       const std::string& out, uint64_t seed = 1);

// Widens an EAGLE draft layer file (docs/eagle.md) trained on the source of `expanded`:
// its decoder layer like the expansion's layers (model::expand_gguf on a layer stack: the
// expanded model's width, heads, head size and FFN), fc and the norms so that it reads
// the expanded base's embedding rows and final-normed states (the source's, then zeros)
// and predicts the source's state followed by zeros; its base identity (layer count,
// output hash, name) becomes `expanded`'s. InvalidArgument on another vocabulary,
// Unsupported for a base family whose embedding carries a scale (Gemma).
void expand_eagle_file(const std::string& in, const model::Model& expanded, const std::string& out, uint64_t seed = 1);

}  // namespace treespec::train
