// Self-distillation training of an EAGLE draft layer (docs/eagle.md), with no dataset:
// the target writes its own training text (train/medusa_train.h's generator, recording
// its final-normed hidden states and its top distribution at every position), and the
// layer learns, with Adam and the target frozen, to map (f_t, embedding of x_{t+1}) to
// f_{t+1}: SmoothL1 on the feature plus cross-entropy of the target's own output matrix
// on the prediction against the target's distribution at t + 1. Inputs get feature noise
// (EAGLE's augmentation against its own prediction errors). Training runs on windows of
// the samples; held-out samples give the calibration table (top-1 agreement with the
// target's argmax at draft depth 1, from true features, and depth 2, from the layer's
// own predictions), stored in the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/eagle_backprop.h"
#include "train/medusa_train.h"

namespace treespec::model {
class Model;
}

namespace treespec::train {

struct EagleTrainParams {
  MedusaTrainParams gen;  // the training text: samples, seq_len, temp, prompts, seed, threads, holdout, kl_top
  int32_t steps = 1500;
  float lr = 3e-3f;  // peak (linear warm-up, cosine decay to 10%)
  float warmup = 0.05f;
  int32_t window = 64;  // rows per training window (a causal sequence of the layer)
  int32_t windows = 8;  // windows per step
  float feat_weight = 1.0f;
  float tok_weight = 0.5f;
  float kl_weight = 0.7f;  // of the token term: the target's distribution (rest: its sampled token)
  float noise = 0.1f;      // uniform feature noise, times each row's RMS
  EagleTrainParams();
  void validate() const;  // InvalidArgument naming the flag
};

struct EagleEval {
  double loss = 0.0;         // held-out loss (same terms as training, no noise)
  std::vector<double> top1;  // [depth] agreement with the target's argmax (depth 1, 2)
  std::vector<double> top5;  // [depth] the target's argmax among the layer's top 5
  int64_t n = 0;             // held-out rows
};

struct EagleTrainReport {
  int64_t generated_tokens = 0;
  int64_t train_rows = 0;
  double gen_seconds = 0.0, train_seconds = 0.0;
  double final_train_loss = 0.0;
  EagleEval before, after;
};

// The layer's shape for target `m` (its attention and FFN sizes, its RoPE).
EagleShape eagle_shape_for(const model::Model& m);
// Initial parameters: the feature passes through fc, the layer's outputs start small.
EagleTensors eagle_init(const EagleShape& s, uint64_t seed);

// Trains and writes the layer file to `path` (f32 tensors).
void train_eagle(const model::Model& m, const EagleTrainParams& p, const std::string& path,
                 EagleTrainReport* report = nullptr, const TrainProgressFn& progress = {});

// The layer file for target `m` from f32 parameters (calib: top-1 per depth, may be empty).
void write_eagle_file(const std::string& path, const model::Model& m, const EagleShape& s, const EagleTensors& t,
                      const std::vector<float>& calib, int64_t calib_tokens,
                      const std::vector<std::pair<std::string, gguf::Value>>& train_meta);

}  // namespace treespec::train
