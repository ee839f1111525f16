// Training ProPD prune heads by self-distillation (treespec train-heads --prune-layer):
// on the residual states the Medusa trainer tapped while the model wrote its own text
// (MedusaTrainParams::tap_layers), a head per layer learns the final model's next-token
// distribution at the same position (its top entries, mixed with its argmax), the base
// model frozen. The head starts as the logit lens (PruneHead), so training can only
// sharpen what the lens already knows. The Medusa trainer's hand-written backward pass
// and Adam do the work.
//
// The held-out recall of the final argmax (top-1..top-k) is measured for every tapped
// layer before (= the logit lens) and after training, and the default prune layer is the
// smallest trained layer whose recall at default_k reaches recall_target.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "drafters/propd/prune_head.h"
#include "drafters/propd/prune_spec.h"
#include "train/medusa_train.h"

namespace treespec::model {
class Model;
}

namespace treespec::train {

struct PruneTrainParams {
  int32_t steps = 1000;  // Adam steps per layer
  float lr = 1e-2f;
  float warmup = 0.05f;
  int32_t batch = 256;    // positions per step
  int32_t n_blocks = -1;  // residual blocks per head; -1: default_head_blocks()
  // false (default): the heads' logits come from the model's output matrix, frozen (the
  // file stores only their blocks); true: each trains its own copy (train-heads --own-lm-head).
  bool own_output = false;
  int32_t blocks_for(int32_t n_embd) const;
  float soft_weight = 0.5f;  // weight of the final distribution's top entries (rest: its argmax)
  int32_t eval_top_k = 16;   // recall table width
  float recall_target = 0.98f;
  int32_t default_k = drafters::kDefaultPruneK;
  uint64_t seed = 1;
  void validate() const;  // InvalidArgument naming the flag
};

struct PruneTrainReport {
  std::vector<int32_t> layers;
  std::vector<float> recall_before;             // [layers, eval_top_k] (the logit lens)
  std::vector<float> recall_after;              // [layers, eval_top_k]
  std::vector<double> loss_before, loss_after;  // held-out cross-entropy to the argmax, nats
  int64_t heldout_rows = 0;
  double seconds = 0.0;
};

// Trains one head per tapped layer; the result carries the heads, the recall tables
// (lens for every layer from taps.lens_hits, trained heads for their layers), the default
// layer, and the model's identity (for check_fits).
std::shared_ptr<drafters::PruneHeadSet> train_prune_heads(const model::Model& m, const PruneTaps& taps,
                                                          const PruneTrainParams& p, core::ThreadPool& pool,
                                                          PruneTrainReport* report = nullptr,
                                                          const TrainProgressFn& progress = {});

// Held-out recall of `head` on taps layer index ti: [top_k] cumulative, plus the mean
// cross-entropy of the final argmax.
std::vector<float> prune_head_recall(const model::Model& m, const drafters::PruneHead& head, const PruneTaps& taps,
                                     size_t ti, int32_t top_k, core::ThreadPool& pool, double* loss = nullptr);

}  // namespace treespec::train
