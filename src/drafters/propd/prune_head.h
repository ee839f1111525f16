// Early next-token predictors for ProPD's early pruning (docs/propd.md).
//
// A PruneHead reads the residual stream after `layer` decoder layers and returns
// next-token logits:
//
//   x -> the model's final RMSNorm (frozen) -> R residual blocks x + SiLU(W x + b)
//     -> vocab projection
//
// The logit lens is the PruneHead with no blocks and the model's own output matrix; a
// trained head starts as exactly that (W, b zero, projection = output matrix) and is
// distilled towards the final model's next-token distribution (train/prune_train.h).
// Putting the frozen norm first (the paper's reviews only say "a prediction head") makes
// the untrained head the logit lens, lets the Medusa trainer's backward pass train it
// unchanged, and keeps it function-preserving under `treespec expand` (the final norm of
// an expanded residual is the source's normed state padded with zeros).
//
// PruneHeadSet: the heads trained for a model (at most one per layer) and the recall
// tables measured when they were trained, stored in a GGUF next to Medusa heads
// (tensor names and metadata keys in docs/propd.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "drafters/drafter.h"
#include "gguf/gguf.h"
#include "model/linear.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

class PruneHead final : public PruneScorer {
 public:
  struct Block {
    model::Linear w;       // [n_embd, n_embd]
    std::vector<float> b;  // [n_embd]
  };

  // The logit lens after `layer` layers: final norm + the model's output matrix (one
  // shared instance per layer).
  static std::shared_ptr<const PruneHead> logit_lens(int32_t layer);
  // A trained head from f32 parameters: blocks (W [E*E], b [E]) and projection [V*E], or
  // no projection (out_w empty): the head's logits come from the model's own output
  // matrix, like the lens' (what train-heads writes: propd.prune.output = "base").
  static std::shared_ptr<PruneHead> from_f32(int32_t layer, int32_t n_embd, int32_t n_vocab,
                                             std::vector<std::vector<float>> block_w,
                                             std::vector<std::vector<float>> block_b, std::vector<float> out_w);

  int32_t layer() const { return layer_; }
  bool is_lens() const { return lens_; }
  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  const Block& block(int32_t r) const { return blocks_[static_cast<size_t>(r)]; }
  const model::Linear& out() const { return out_; }  // unset for the lens and shared heads
  bool shared_output() const { return out_.data() == nullptr; }
  int32_t n_embd() const { return n_embd_; }
  int32_t n_vocab() const { return n_vocab_; }

  // logits[n, n_vocab] from residual rows x[n, n_embd] of model m (after layer() layers).
  // work: [2 * n * n_embd] floats.
  void logits(const model::Model& m, const float* x, int32_t n, float* work, float* logits,
              core::ThreadPool* pool) const override;
  const char* kind() const override { return lens_ ? "logit lens" : "trained"; }
  // The same from rows already through the final norm: h[n, n_embd]. work: [2 * n * n_embd].
  void logits_normed(const model::Model& m, const float* h, int32_t n, float* work, float* logits,
                     core::ThreadPool* pool) const;

 private:
  friend class PruneHeadSet;
  PruneHead() = default;
  int32_t layer_ = 0;
  bool lens_ = true;
  int32_t n_embd_ = 0;
  int32_t n_vocab_ = 0;
  std::vector<Block> blocks_;
  model::Linear out_;
  std::vector<std::vector<float>> owned_;       // f32 storage of trained heads
  std::shared_ptr<const gguf::GgufFile> file_;  // keeps mapped tensors alive
};

// What the prune heads of a file were measured to do (held-out text, top-1..top-k).
struct PruneCalibration {
  int32_t top_k = 0;        // columns of the tables
  int64_t n_positions = 0;  // held-out positions evaluated
  // lens_recall[l * top_k + k - 1]: fraction of positions whose final argmax is among the
  // logit lens' top-k after l layers, l = 0 (embeddings) .. n_layer - 1. Empty if unmeasured.
  std::vector<float> lens_recall;
  // head_recall[i * top_k + k - 1]: the same for the trained head at layers[i].
  std::vector<int32_t> head_layers;
  std::vector<float> head_recall;
  float recall_target = 0.98f;  // default-layer rule: smallest layer whose recall@k >= this
  int32_t default_k = 0;        // the k the default layer was chosen for
  int32_t default_layer = 0;    // 0: none met the target (or not chosen)

  bool has_lens() const { return top_k > 0 && !lens_recall.empty(); }
  int32_t lens_layers() const { return top_k > 0 ? static_cast<int32_t>(lens_recall.size()) / top_k : 0; }
  // Recall at (layer, k) of the lens / of the trained head at `layer`; -1 if unmeasured.
  float lens(int32_t layer, int32_t k) const;
  float head(int32_t layer, int32_t k) const;
};

// Smallest layer l in [1, n_layer) whose recall(l, k) >= target, or 0 if none.
int32_t smallest_layer_meeting(int32_t n_layer, int32_t k, float target,
                               const std::function<float(int32_t, int32_t)>& recall);

class PruneHeadSet {
 public:
  PruneHeadSet() = default;

  // True if the GGUF holds ProPD metadata (prune heads or recall tables).
  static bool present_in(const gguf::GgufFile& f);
  // FormatError naming the file and key / tensor.
  static std::shared_ptr<PruneHeadSet> from_gguf(std::shared_ptr<const gguf::GgufFile> file);

  // Base model identity (checked by check_fits, like Medusa heads).
  int32_t n_embd = 0, n_vocab = 0, base_n_layer = 0;
  std::string base_output_hash;
  std::string source;
  PruneCalibration calib;
  std::map<int32_t, std::shared_ptr<const PruneHead>> heads;  // by layer

  // InvalidArgument naming every field that differs between these heads and `m`.
  void check_fits(const model::Model& m) const;
  // Metadata + tensors into a writer (after the model's or the Medusa heads' own).
  void add_to(gguf::GgufWriter& w) const;

 private:
  std::shared_ptr<const gguf::GgufFile> file_;
};

// Tensor names (docs/propd.md).
std::string prune_block_weight_name(int32_t layer, int32_t block);
std::string prune_block_bias_name(int32_t layer, int32_t block);
std::string prune_output_name(int32_t layer);

}  // namespace treespec::drafters
