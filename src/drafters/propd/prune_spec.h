// Turning prune options into a PruneSpec for a model: which layer, how wide (k), which
// head (a trained ProPD prune head from a heads file, or the logit lens), with defaults
// from the recall tables measured when the heads were trained, or from a start-up
// calibration of the logit lens on text the model writes itself.
//
// Default layer: the smallest layer whose top-k recall of the final model's argmax is at
// least `recall_target` (98%), preferring a trained head's table over the lens'. Recall
// is exactly the probability that pruning keeps a node the verifier would accept, so
// the target bounds the acceptance lost per accepted token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "drafters/drafter.h"
#include "drafters/propd/prune_head.h"
#include "drafters/spec_config.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// Recall of the logit lens measured on `n_seqs` x `n_tokens` positions of text the model
// samples itself (temperature 0.8, fixed seed), for the layers a binary search over
// [1, n_layer) needs to find the smallest one meeting `target` at `k` (recall grows with
// depth, nearly always); unmeasured layers read -1. Cached per model.
PruneCalibration calibrate_logit_lens(const model::Model& m, int32_t k, float target, core::ThreadPool* pool,
                                      int32_t n_seqs = 4, int32_t n_tokens = 64);

// The prune heads / recall tables in `path` (empty: the model file), or null when the file
// has none. Checked against the model (InvalidArgument naming the difference). Cached.
std::shared_ptr<const PruneHeadSet> load_prune_heads(const std::string& path, const model::Model& m);

// The spec for this model (see the header comment); `heads_path` as for load_prune_heads.
PruneSpec resolve_prune_spec(const PruneParams& p, const std::string& heads_path, const model::Model& m,
                             core::ThreadPool* pool);

}  // namespace treespec::drafters
