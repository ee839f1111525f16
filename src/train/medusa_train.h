// Self-distillation training of Medusa heads on the CPU, with no dataset: the base model
// writes its own training text (sampled with a seed per sample, from given prompts or
// from BOS), its final normed hidden states are recorded, and each head k learns, with
// Adam and the base model frozen, to predict the base model's own token k + 2 positions
// ahead (cross-entropy on the sampled token, optionally mixed with the base model's
// distribution there: a KL term). The backward pass is written by hand (residual SiLU
// blocks + vocab projection); the big products run on the thread pool, each output
// element summed by one task in a fixed order, so the result is the same for a seed
// whatever the thread count. Held-out samples give the calibration table (top-1..top-k
// accuracy per head) stored in the heads' metadata.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drafters/medusa/medusa_heads.h"

namespace treespec::model {
class Model;
class ForwardContext;
}  // namespace treespec::model

namespace treespec::train {

struct MedusaTrainParams {
  int32_t n_heads = 4;
  int32_t n_blocks = -1;  // residual blocks per head; -1: default_head_blocks()
  int32_t blocks_for(int32_t n_embd) const;
  int32_t steps = 2000;   // Adam steps (every head takes one per step)
  float lr = 1e-2f;       // peak learning rate (linear warm-up, cosine decay to 10%)
  float warmup = 0.05f;   // fraction of steps spent warming up
  int32_t batch = 256;    // positions per step
  int32_t samples = 512;  // generated samples (the last `holdout` fraction is held out)
  int32_t seq_len = 256;  // generated tokens per sample (fewer if it ends at EOG)
  float holdout = 0.1f;
  float temp = 0.5f;  // sampling temperature of the generated text (lower = closer to greedy text)
  float top_p = 1.0f;
  float kl_weight = 0.5f;   // 0 = pure cross-entropy on the sampled token; 1 = pure KL to the base distribution
  int32_t kl_top = 32;      // base distribution kept as its top entries (renormalised)
  int32_t eval_top_k = 10;  // calibration table width
  // false (default): the heads share the base model's output matrix, frozen; the file
  // stores only their blocks. true: each head trains its own copy (Medusa-1, larger file,
  // one vocab projection per head per step).
  bool own_output = false;
  // Shared heads draft from the N most frequent tokens of their training text (their
  // rows of the output matrix only: MedusaHeadsInfo::draft_vocab). 0: the whole vocabulary
  // up to 16,384 entries, else the 16,384 most frequent; N >= n_vocab: the whole.
  int32_t draft_vocab = 0;
  int32_t draft_vocab_for(int32_t n_vocab) const;  // 0 = the whole vocabulary
  std::vector<std::vector<int32_t>> prompts;       // token ids incl. BOS; empty = BOS alone
  int32_t bos_id = 1;
  std::vector<int32_t> eog_ids;  // a sample ends after emitting one of these
  uint64_t seed = 1;
  int32_t n_threads = 1;
  int32_t gen_batch = 32;  // sequences generated together in one forward pass
  // ProPD prune heads (train/prune_train.h): also record the final-normed
  // residual after each of these layers (1..n_layer-1) at every position, and measure the
  // logit lens' recall of the final argmax after every layer on the held-out samples.
  std::vector<int32_t> tap_layers;
  int32_t tap_top_k = 16;  // width of the lens recall table
  void validate() const;   // InvalidArgument naming the flag
};

// What MedusaTrainParams::tap_layers recorded, row-aligned with the generated text:
// row t of a sample is the position that predicted its token t + 1.
struct PruneTaps {
  std::vector<int32_t> layers;        // tapped layers
  std::vector<std::vector<float>> h;  // per layer: [n_rows, n_embd] final norm of the residual after that layer
  std::vector<int32_t> argmax;        // [n_rows] the final model's argmax (ties: lower id)
  std::vector<uint8_t> heldout;       // [n_rows] 1 = held-out sample
  std::vector<int32_t> kl_ids;        // [n_rows, kl_top] the final distribution's top entries (empty without --kl)
  std::vector<float> kl_p;            // [n_rows, kl_top]
  int32_t kl_top = 0;
  int64_t n_rows = 0;
  // Logit lens on the held-out rows: lens_hits[l * top_k + r] = rows whose final argmax is
  // the lens' rank-r token after l layers (l = 0..n_layer-1); recall@k = sum r < k / lens_rows.
  std::vector<int64_t> lens_hits;
  int32_t lens_top_k = 0;
  int64_t lens_rows = 0;
};

struct MedusaEval {
  std::vector<double> loss;     // [n_heads] mean cross-entropy on the sampled token, nats
  std::vector<float> topk_acc;  // [n_heads, top_k] top-1..top-k accuracy
  std::vector<int64_t> n;       // [n_heads] positions evaluated
  int32_t top_k = 0;
  double mean_loss() const;
};

struct MedusaTrainReport {
  int64_t generated_tokens = 0;
  int64_t train_positions = 0;
  int64_t heldout_positions = 0;
  double gen_seconds = 0.0;
  double train_seconds = 0.0;
  double eval_seconds = 0.0;
  double final_train_loss = 0.0;  // mean over heads, smoothed over the last steps
  MedusaEval before;              // held-out, at initialisation
  MedusaEval after;               // held-out, trained
  PruneTaps taps;                 // filled when MedusaTrainParams::tap_layers is set
  // With a draft vocabulary: its size, and the fraction of the held-out samples' tokens in it.
  int32_t draft_vocab = 0;
  double draft_vocab_coverage = 1.0;
};

struct TrainProgress {
  std::string phase;  // "generate" | "train" | "eval"
  int64_t done = 0;
  int64_t total = 0;
  double loss = 0.0;  // train: smoothed loss
  double rate = 0.0;  // generate: tokens/s; train: positions/s
  double elapsed_s = 0.0;
  double eta_s = 0.0;
};
using TrainProgressFn = std::function<void(const TrainProgress&)>;

// One generated sample: tokens[0] is the last prompt token; hidden row t is the final
// normed state at tokens[t] (it predicted tokens[t + 1]).
struct TrainingSample {
  std::vector<int32_t> tokens;           // [len]
  std::vector<float> hidden;             // [len - 1, n_embd]
  std::vector<int32_t> kl_ids;           // [len - 1, kl_top] base distribution's top entries (KL only)
  std::vector<float> kl_p;               // [len - 1, kl_top]
  std::vector<std::vector<float>> taps;  // per tapped layer [len - 1, n_embd] (ProPD prune heads)
  std::vector<int32_t> argmax;           // [len - 1] final argmax (taps only)
  int64_t n_rows() const { return static_cast<int64_t>(tokens.size()) - 1; }
};

// The base model writes its own training text (the samples, seq_len, temp, top_p,
// prompts, bos_id, eog_ids, seed, gen_batch, kl_weight / kl_top and tap_layers of p), with
// a progress report per phase "generate"; rep gets the generation counts (and taps).
// Shared by the Medusa, prune-head and EAGLE trainers. The last holdout fraction of the
// samples is what the trainers hold out.
std::vector<TrainingSample> generate_training_text(const model::Model& m, const MedusaTrainParams& p,
                                                   model::ForwardContext& ctx, const TrainProgressFn& progress,
                                                   MedusaTrainReport& rep);

std::shared_ptr<drafters::MedusaHeads> train_medusa_heads(const model::Model& m, const MedusaTrainParams& p,
                                                          MedusaTrainReport* report = nullptr,
                                                          const TrainProgressFn& progress = {});

// Held-out style evaluation of any heads on recorded hidden states h [n, n_embd] with
// targets [n_heads, n] (-1 = no target): loss and top-k accuracy per head.
MedusaEval evaluate_heads(const drafters::MedusaHeads& heads, const float* h, int64_t n,
                          const std::vector<std::vector<int32_t>>& targets, int32_t top_k, core::ThreadPool* pool);

}  // namespace treespec::train
