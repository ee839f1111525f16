// Model: Llama-family weights bound from a GGUF file, and the forward pass.
//
// The Model is immutable after load and may be shared by many sequences; all mutable
// state lives in a ForwardContext (scratch buffers, thread pool) and a KvCache. The
// forward runs on a hidden-state buffer x [n_rows, n_embd] one layer range at a time,
// so callers can run layers [0, l), drop rows (early pruning), then run [l, L).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/arch.h"
#include "model/batch.h"
#include "model/linear.h"
#include "treespec/status.h"

namespace treespec::gguf {
class GgufFile;
}

namespace treespec::model {

struct Hparams {
  std::string arch;  // general.architecture
  std::string name;  // general.name (may be empty)
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_rot = 0;  // rotated dims per head
  int32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear scaling: positions multiplied by this
  bool rope_neox = false;        // pair (i, i + n_rot/2) instead of (2i, 2i+1)
  bool has_qkv_bias = false;
  bool tied_output = false;
  // Family features (model/arch.h; docs/models.md).
  bool qk_norm = false;         // per-head RMSNorm of Q and K before RoPE
  bool post_norms = false;      // RMSNorm of the attention and FFN outputs before the residual add
  FfnAct act = FfnAct::silu;    // FFN gate activation
  float embd_scale = 1.0f;      // embeddings are multiplied by this
  float attn_scale = 0.0f;      // query scale (1/sqrt(head_dim) unless the family says otherwise)
  float residual_scale = 1.0f;  // block outputs are multiplied by this before the residual add
  float logit_scale = 1.0f;     // output logits are divided by this
  float attn_softcap = 0.0f;    // > 0: attention logits soft-capped
  float final_softcap = 0.0f;   // > 0: output logits soft-capped
  int32_t n_swa = 0;            // sliding window (positions a local layer sees, itself included); 0: none
  float rope_theta_swa = 0.0f;  // > 0: local layers use this RoPE base, unscaled (Gemma 3)
  // LongRoPE (Phi-3/3.5/4-mini): per-pair factors rope_factors_short / _long; the long
  // ones when a sequence's context (KV cells) exceeds n_ctx_orig, as llama.cpp chooses.
  bool longrope = false;
  int32_t n_ctx_orig = 0;         // rope.scaling.original_context_length (else n_ctx_train)
  float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor: cos and sin are multiplied by it
  // A layer stack (general.architecture = kLayerStackArch: an EAGLE draft layer, docs/eagle.md):
  // decoder layers and a final norm only; `arch` is its <prefix>base_architecture, n_vocab
  // its base model's. embed(), lm_head() and forward() need a full model.
  bool layers_only = false;

  int32_t n_embd_q() const { return n_head * head_dim; }
  int32_t n_embd_kv() const { return n_head_kv * head_dim; }
};

struct LayerWeights {
  std::vector<float> attn_norm;                      // [n_embd]
  std::vector<float> ffn_norm;                       // [n_embd]
  kernels::WeightView wq, wk, wv, wo;                // row ranges of attn_qkv when the file fuses them
  std::vector<float> bq, bk, bv;                     // empty unless has_qkv_bias
  std::vector<float> q_norm, k_norm;                 // [head_dim], empty unless qk_norm
  std::vector<float> attn_post_norm, ffn_post_norm;  // [n_embd], empty unless post_norms
  kernels::WeightView w_gate, w_up, w_down;          // gate / up: halves of ffn_up when fused
  bool swa = false;                                  // sliding-window (local) layer
  bool rope = true;                                  // false: a RoPE-free layer (SmolLM3)
};

class ForwardContext;
class TensorBinder;

// general.architecture of a layer-stack file (Hparams::layers_only).
inline constexpr const char* kLayerStackArch = "eagle";

class Model {
 public:
  // Opens, validates and binds a GGUF model. Errors: IoError, FormatError (missing or
  // mis-shaped tensor, bad hyperparameter: named), Unsupported (architecture, dtype).
  static std::unique_ptr<Model> load(const std::string& path);
  static std::unique_ptr<Model> from_gguf(std::shared_ptr<const gguf::GgufFile> file);
  // A layer-stack file (Hparams::layers_only; e.g. an EAGLE draft layer). load() and
  // from_gguf() refuse one with InvalidArgument, and these refuse a full model.
  static std::unique_ptr<Model> load_layer_stack(const std::string& path);
  static std::unique_ptr<Model> layer_stack_from_gguf(std::shared_ptr<const gguf::GgufFile> file);
  ~Model();

  const Hparams& hparams() const { return hp_; }
  const gguf::GgufFile& gguf() const { return *file_; }
  std::shared_ptr<const gguf::GgufFile> gguf_shared() const { return file_; }
  const LayerWeights& layer(int32_t il) const { return layers_[static_cast<size_t>(il)]; }
  // The embedding table and the output matrix (the embedding when tied) as model::Linear,
  // how code above the model reads or multiplies by them (with the load-time packed copy).
  Linear token_embd() const { return Linear(tok_embd_); }
  Linear output() const { return Linear(output_); }
  const std::vector<float>& output_norm() const { return output_norm_; }
  // Bytes of weights a plain decode step reads (for bandwidth reports).
  uint64_t weight_bytes() const;
  // Bytes of the load-time repacked copies of the matrices (kernels::pack_weights; 0 when
  // nothing was repacked: no packed kernel for the types on this CPU, or TREESPEC_REPACK=0).
  uint64_t packed_bytes() const { return packed_bytes_; }
  uint64_t n_params() const;

  // Layer stacks: x[n, n_embd] = fc * [RMSNorm(emb) * enorm ; feat] per row (the EAGLE
  // input: a token's embedding, from the base model's embed(), and a hidden state of the
  // base), tensors fc.weight [2 n_embd -> n_embd] and enorm.weight [n_embd].
  void stack_input(ForwardContext& ctx, const float* emb, const float* feat, int32_t n, float* x) const;

  // x[n_rows, n_embd] = embedding of batch tokens.
  void embed(const Batch& batch, float* x) const;

  // Runs layers [l0, l1) in place on x[n_rows, n_embd], writing K/V of every row into
  // kv. Returns context_full (and does nothing) if a segment's rows do not fit.
  Status run_layers(ForwardContext& ctx, const Batch& batch, int32_t l0, int32_t l1, float* x, kv::KvCache& kv) const;

  // Runs the listed layers in order (any indices in [0, n_layer), e.g. a subset of the
  // model used as its own draft model) in place on x[n_rows, n_embd]. kv holds one layer
  // per list entry: KV layer k belongs to model layer layers[k]. Same Status as run_layers.
  Status run_layer_list(ForwardContext& ctx, const Batch& batch, std::span<const int32_t> layers, float* x,
                        kv::KvCache& kv) const;

  // out[n, n_embd] = final RMSNorm of x rows `rows` (all rows if empty).
  void final_norm(const float* x, int32_t n_rows, std::span<const int32_t> rows, float* out) const;

  // logits[n, n_vocab] from normed hidden states xn[n, n_embd].
  void lm_head(ForwardContext& ctx, const float* xn, int32_t n, float* logits) const;

  // Convenience: embed + all layers + final norm + lm_head for `out_rows` (all rows if
  // empty). logits: [n_out, n_vocab]; normed (optional): [n_out, n_embd].
  Status forward(ForwardContext& ctx, const Batch& batch, kv::KvCache& kv, std::span<const int32_t> out_rows,
                 float* logits, float* normed = nullptr) const;

  // A KV cache shaped for this model.
  kv::KvShape kv_shape(int32_t n_seq, int32_t n_cells) const;

 private:
  Model() = default;
  static std::unique_ptr<Model> make(std::shared_ptr<const gguf::GgufFile> file, bool layer_stack);
  void bind(bool layer_stack);
  // Hyperparameters under metadata prefix `a` ("llama.", "eagle.", ...).
  void read_hparams(const ArchTraits& arch, const std::string& a);
  void bind_embeddings(TensorBinder& b, const std::string& a);
  void bind_rope(TensorBinder& b);
  void bind_layer(TensorBinder& b, const ArchTraits& arch, int32_t il);
  // Repacks every matrix the forward multiplies with into the best kernels' tile layout.
  void repack();
  // Checks the batch against kv and fills ctx's per-row visible tree cells.
  Status prepare_rows(ForwardContext& ctx, const Batch& batch, kv::KvCache& kv) const;
  // One layer `il` on x, its K/V in KV layer `kv_layer` (prepare_rows ran first).
  void run_layer(ForwardContext& ctx, const Batch& batch, int32_t il, int32_t kv_layer, float* x,
                 kv::KvCache& kv) const;
  // The attention half of layer il: ctx.tmp_ = attention output projected to [n, n_embd].
  void attention(ForwardContext& ctx, const Batch& batch, int32_t il, int32_t kv_layer, kv::KvCache& kv) const;
  // The FFN half: ctx.tmp_ = FFN of ctx.xn_.
  void ffn(ForwardContext& ctx, int32_t n, const LayerWeights& L) const;

  std::shared_ptr<const gguf::GgufFile> file_;
  Hparams hp_;
  kernels::WeightView tok_embd_;
  kernels::WeightView output_;
  std::vector<float> output_norm_;
  kernels::WeightView stack_fc_;      // layer stacks: fc.weight
  std::vector<float> stack_enorm_;    // layer stacks: enorm.weight
  std::vector<float> inv_freq_;       // [n_rot / 2]
  std::vector<float> inv_freq_swa_;   // local layers' table when rope_theta_swa > 0
  std::vector<float> inv_freq_long_;  // LongRoPE: the table with the long factors
  std::vector<LayerWeights> layers_;
  std::vector<core::AlignedBuffer<uint8_t>> packed_;  // owned by the views' `packed`
  uint64_t packed_bytes_ = 0;
};

// Scratch buffers and the thread pool of one forward pass at a time.
class ForwardContext {
 public:
  ForwardContext(const Model& model, int32_t n_threads);
  // Runs on a borrowed pool (which must outlive this context), e.g. a draft model's
  // forward on the engine's pool between the engine's own passes.
  ForwardContext(const Model& model, core::ThreadPool& pool);
  core::ThreadPool& pool() { return *pool_; }
  int32_t n_threads() const { return pool_->n_threads(); }

  // Grows the buffers to hold n rows (and attention over n_cells).
  void reserve(int32_t n_rows, int32_t n_cells);

  // Hidden-state buffer the convenience forward uses: [max_rows, n_embd].
  float* x() { return x_.data(); }

 private:
  friend class Model;
  const Model& model_;
  std::unique_ptr<core::ThreadPool> owned_pool_;  // null when the pool is borrowed
  core::ThreadPool* pool_;
  int32_t max_rows_ = 0;
  int32_t max_cells_ = 0;
  core::AlignedBuffer<float> x_, xn_, q_, k_, v_, att_, gate_, up_, tmp_;
  core::AlignedBuffer<float> stack_cat_;  // layer stacks: [rows, 2 n_embd] input of fc
  // Query rows per attention task: bounds the score scratch and still shares each K/V
  // read among many tree rows.
  static constexpr int32_t kAttnRows = 16;
  struct AttnTask {
    int32_t seg, row, n_rows, kv_head;
  };
  size_t scores_per_thread_ = 0;
  core::AlignedBuffer<float> scores_;        // [n_threads, scores_per_thread_]
  std::vector<std::vector<int32_t>> extra_;  // per row: visible tree cells
  std::vector<const int32_t*> extra_ptr_;    // [n_rows] extra_[r].data()
  std::vector<int32_t> extra_len_;           // [n_rows]
  // Sliding-window layers: per row the first position (= index in its visible list) inside
  // the window.
  std::vector<int64_t> window_begin_;
  std::vector<AttnTask> attn_tasks_;
};

}  // namespace treespec::model
