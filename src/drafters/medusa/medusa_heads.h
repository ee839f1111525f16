// MedusaHeads: K extra decoding heads on a base model's final normed hidden state.
//
// Head k (0-based) = R residual blocks x <- x + SiLU(W x + b), then a vocab projection:
// the base model's own output matrix (shared, Hydra / Medusa-2 style: the file stores only
// the blocks; medusa.output = "base", what train-heads writes) or the head's own copy
// (medusa.output = "own", and every file written before the key existed). At position t
// head k predicts the token at t + k + 2 (the base LM head predicts t + 1). Shared heads
// take the output matrix from the model in bind(), in its quantised type, and all K heads
// go through it in one matmul call (forward_all). Stored as GGUF tensors (names and
// metadata keys in docs/medusa.md), either in a heads-only file or beside the base
// model's tensors in the model file. The file records
// the base model's identity (embedding width, vocab size, layer count, a hash of the
// output matrix bytes); check_fits() rejects heads trained for another model.
//
// Weights are model::Linear projections, so a loaded file stays memory-mapped and any
// dtype Linear handles works; freshly trained heads own f32 storage.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/linear.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// The activation of the residual blocks (Medusa heads, their trainer and the prune heads).
inline float block_silu(float z) { return z / (1.0f + std::exp(-z)); }

// Who the heads were made for, and how they were calibrated.
struct MedusaHeadsInfo {
  int32_t n_heads = 0;
  int32_t n_blocks = 0;
  int32_t n_embd = 0;
  int32_t n_vocab = 0;
  int32_t hidden_layer = 0;    // the heads read the final normed state after this many layers
  bool shared_output = false;  // logits from the base model's output matrix (no own projections)
  // Shared heads only: the token ids (ascending) they draft from, the most frequent ones of
  // their training text (medusa.draft_vocab); empty = the whole vocabulary. Keeps the
  // heads' share of the output matrix small on 128k vocabularies (FR-Spec's idea).
  std::vector<int32_t> draft_vocab;
  std::string base_name;  // informational
  int32_t base_n_layer = 0;
  std::string base_output_hash;  // output_matrix_hash() of the base model
  // Calibration (held-out top-1 .. top-k accuracy per head): [n_heads, calib_top_k].
  int32_t calib_top_k = 0;
  std::vector<float> calibration;
  std::vector<float> calib_loss;  // [n_heads] held-out cross-entropy, nats
  int64_t calib_tokens = 0;       // held-out positions evaluated (head 0)
  // How they were trained: metadata under medusa.train.* (written and read back as is).
  std::vector<std::pair<std::string, gguf::Value>> train_meta;
  bool has_calibration() const { return calib_top_k > 0 && !calibration.empty(); }
};

// "fnv1a64:<16 hex digits>" over the raw bytes of the model's output matrix (the token
// embedding when the output is tied), taken 8 bytes at a time (tail bytes one by one).
std::string output_matrix_hash(const model::Model& m);

class MedusaHeads {
 public:
  // One residual block: weight [n_embd, n_embd] (GGUF ne {n_embd, n_embd}), bias [n_embd].
  struct Block {
    model::Linear w;
    std::vector<float> b;
  };
  struct Head {
    std::vector<Block> blocks;
    model::Linear out;  // [n_vocab, n_embd]; unset when the heads share the base output
  };

  // Medusa's initialisation: every W and b zero; every vocab projection a copy of the
  // base output matrix (dequantised to f32), or, with `shared_output`, the base output
  // itself (bound here). Owns its storage.
  static std::shared_ptr<MedusaHeads> init_from_model(const model::Model& m, int32_t n_heads, int32_t n_blocks,
                                                      bool shared_output = false);
  // From raw f32 parameters (the trainer): blocks[k][r] = {W [E*E], b [E]}, out[k] [V*E]
  // (out empty when info.shared_output: bind() a model before forward).
  static std::shared_ptr<MedusaHeads> from_f32(MedusaHeadsInfo info,
                                               std::vector<std::vector<std::vector<float>>> block_w,
                                               std::vector<std::vector<std::vector<float>>> block_b,
                                               std::vector<std::vector<float>> out_w);

  // Heads file (or a model file with heads). FormatError naming the file and key/tensor.
  static std::shared_ptr<MedusaHeads> load(const std::string& path);
  static std::shared_ptr<MedusaHeads> from_gguf(std::shared_ptr<const gguf::GgufFile> file);
  // True if the GGUF holds Medusa heads (metadata key medusa.head_count).
  static bool present_in(const gguf::GgufFile& file);

  const MedusaHeadsInfo& info() const { return info_; }
  MedusaHeadsInfo& mutable_info() { return info_; }
  int32_t n_heads() const { return info_.n_heads; }
  int32_t n_blocks() const { return info_.n_blocks; }
  int32_t n_embd() const { return info_.n_embd; }
  int32_t n_vocab() const { return info_.n_vocab; }
  const Head& head(int32_t k) const { return heads_[static_cast<size_t>(k)]; }
  const std::string& source() const { return source_; }

  // InvalidArgument naming every field that differs (embedding width, vocab size, layer,
  // output matrix hash) between these heads and `m`.
  void check_fits(const model::Model& m, const std::string& model_path = "") const;

  // check_fits(m), then keeps m's output matrix for shared-output heads (m must outlive
  // the heads). Heads with their own projections need no binding.
  void bind(const model::Model& m, const std::string& model_path = "");
  // The output matrix itself, unchecked ([n_vocab, n_embd]; benchmarks, tests).
  void bind_output(const model::Linear& out);
  bool bound() const { return !info_.shared_output || base_out_.data() != nullptr; }

  // Head k on M hidden rows: h [M, n_embd] -> logits [M, n_vocab]. work: [2 * M * n_embd].
  void forward(int32_t k, const float* h, int64_t M, float* work, float* logits, core::ThreadPool* pool) const;
  // Every head at one hidden state h [n_embd] -> logits [n_heads, n_draft()] over the
  // draft vocabulary (column i is token draft_token(i); without one, row k is bit for bit
  // what forward(k, h, 1, ...) gives). Shared-output heads multiply by the output matrix
  // (or its draft-vocabulary rows) once for all K rows. work: [(n_heads + 1) * n_embd].
  void forward_all(const float* h, float* work, float* logits, core::ThreadPool* pool) const;
  int32_t n_draft() const { return draft_out_.empty() ? info_.n_vocab : draft_out_.linear().n_out(); }
  int32_t draft_token(int32_t i) const { return draft_out_.empty() ? i : info_.draft_vocab[static_cast<size_t>(i)]; }
  // The vocab projection of head k (the base output when shared).
  const model::Linear& output(int32_t k) const;

  // Metadata and tensors into a writer (the caller may add a model's own first).
  void add_to(gguf::GgufWriter& w) const;
  // Heads-only file.
  void write(const std::string& path) const;

 private:
  MedusaHeads() = default;
  MedusaHeadsInfo info_;
  std::vector<Head> heads_;
  std::string source_;                          // file path or "<trained>"
  std::shared_ptr<const gguf::GgufFile> file_;  // keeps mapped tensors alive
  std::vector<std::vector<float>> owned_;       // f32 storage for trained heads
  model::Linear base_out_;                      // the bound model's output (shared_output)
  model::RowSubset draft_out_;                  // its draft_vocab rows (when there is one)
};

// Writes the model's metadata and tensors plus the heads into one GGUF file.
void write_model_with_heads(const model::Model& m, const MedusaHeads& heads, const std::string& path);

// Tensor names (documented in docs/medusa.md).
std::string medusa_block_weight_name(int32_t head, int32_t block);
std::string medusa_block_bias_name(int32_t head, int32_t block);
std::string medusa_output_name(int32_t head);

}  // namespace treespec::drafters
