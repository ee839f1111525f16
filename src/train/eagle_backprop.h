// The hand-written forward/backward pass of one EAGLE draft layer (arXiv 2401.15077) and
// its Adam update, f32, for training (public so tests can check the gradients against
// finite differences).
//
// Layer, per row i of a sequence (position p = row - first row of its sequence):
//   e = rmsnorm(emb_i) * enorm ; x0 = fc [e ; feat_i]
//   n1 = rmsnorm(x0) * attn_norm ; q, k, v = wq n1, wk n1, wv n1 ; RoPE(q, k) at p
//   h = x0 + wo attn(q, k, v)  (causal within the sequence, GQA)
//   n2 = rmsnorm(h) * ffn_norm ; x2 = h + w_down (silu(w_gate n2) * (w_up n2))
//   y = rmsnorm(x2) * out_norm ; logits = lm_head y  (lm_head frozen, the target's)
// with the conventions of model::Model for a plain llama layer (RoPE table as bind_rope
// computes it, rmsnorm x / sqrt(mean(x^2) + eps), scores scaled by 1/sqrt(head_dim)).
// Loss, averaged over the rows that have a token target:
//   feat_weight * (1/E) sum_j smoothl1(y_j - feat_target_j) + tok_weight * CE(logits, t),
//   t = (1 - kl) one-hot(target) + kl soft targets.
//
// Every parallel task owns a disjoint slice of the outputs and sums in a fixed order, so
// results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "train/medusa_backprop.h"

namespace treespec::train {

struct EagleShape {
  int32_t E = 0;                                    // n_embd of the target
  int32_t n_head = 0, n_head_kv = 0, head_dim = 0;  // GQA: n_head % n_head_kv == 0
  int32_t n_ff = 0;
  int32_t n_rot = 0;  // rotated dims per head (even, <= head_dim)
  int32_t V = 0;      // vocabulary (rows of the frozen LM head)
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  float rope_freq_scale = 1.0f;  // positions multiplied by this
  bool rope_neox = false;        // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  float attn_scale = 0.0f;       // 0: 1/sqrt(head_dim)
  int64_t n_q() const { return static_cast<int64_t>(n_head) * head_dim; }      // query width
  int64_t n_kv() const { return static_cast<int64_t>(n_head_kv) * head_dim; }  // key / value width
};

// All f32, matrices row-major [n_out, n_in] (row o = output o), like model::Linear.
struct EagleTensors {
  std::vector<float> enorm;                        // [E] RMSNorm gain applied to the token embedding
  std::vector<float> fc;                           // [E, 2E]: x0 = fc * concat(rmsnorm(emb) * enorm, feat)
  std::vector<float> attn_norm;                    // [E]
  std::vector<float> wq;                           // [n_head*head_dim, E]
  std::vector<float> wk, wv;                       // [n_head_kv*head_dim, E]
  std::vector<float> wo;                           // [E, n_head*head_dim]
  std::vector<float> ffn_norm;                     // [E]
  std::vector<float> w_gate, w_up;                 // [n_ff, E]
  std::vector<float> w_down;                       // [E, n_ff]
  std::vector<float> out_norm;                     // [E]
  static EagleTensors zeros(const EagleShape& s);  // every tensor sized, zero
  EagleTensors like(float value) const;            // same sizes, filled with value
  size_t n_params() const;
  // Every tensor in a fixed order: enorm, fc, attn_norm, wq, wk, wv, wo, ffn_norm,
  // w_gate, w_up, w_down, out_norm (for Adam, tests).
  std::vector<std::vector<float>*> all();
  std::vector<const std::vector<float>*> all() const;
};

struct EagleBatch {
  const float* emb = nullptr;          // [M, E] token embeddings of x_{t+1} (the caller looks them up)
  const float* feat = nullptr;         // [M, E] input features f_t
  const float* feat_target = nullptr;  // [M, E] f_{t+1} (may be null when feat_weight == 0)
  const int32_t* target = nullptr;     // [M] token target, -1 = no loss on this row (still context)
  SoftTargets soft;                    // optional (weight 0 or ids null: pure one-hot)
  int64_t M = 0;
  // First row of each sequence: strictly increasing, seq_start[0] == 0; a sequence runs
  // to the next start (or M).
  std::span<const int64_t> seq_start;
  float feat_weight = 1.0f, tok_weight = 0.1f;
};

// What the forward pass keeps for the backward one, and the backward's buffers: grown on
// demand, reused across steps. Row-major [M, ...] (Q = n_q(), KV = n_kv(), F = n_ff).
struct EagleScratch {
  std::vector<float> cat;                         // [M, 2E]: rmsnorm(emb) * enorm ; feat
  std::vector<float> x0, n1, h, n2, x2, y;        // [M, E] (n1, n2: the normed inputs of attention, FFN)
  std::vector<float> q, k, v, ao;                 // [M, Q], [M, KV], [M, KV], [M, Q] (q, k after RoPE)
  std::vector<float> g, u, a;                     // [M, F]: gate, up, silu(gate) * up
  std::vector<float> r_e, r1, r2, r3;             // [M]: 1 / sqrt(mean(x^2) + eps) of emb, x0, h, x2
  std::vector<float> inv_freq;                    // [n_rot / 2] RoPE frequencies (Model::bind_rope)
  std::vector<float> logits;                      // [M, V]; the backward turns it into dL/dlogits
  std::vector<float> probs;                       // attention probabilities per (sequence, head): [T, T]
  std::vector<int64_t> prob_off;                  // [n_seq * n_head + 1] offsets into probs
  std::vector<float> d1, d2, d3, d4, dq, dk, dv;  // backward: gradients of the activations
  std::vector<float> t1, t2;                      // backward: transposes
  std::vector<double> row_feat, row_tok;          // per-row loss parts
};

// Forward only: y [M, E] and (if logits != nullptr) logits [M, V]. Targets are not read.
void eagle_forward(const EagleTensors& p, const EagleShape& s, const float* lm_head, const EagleBatch& b, float* y,
                   float* logits, EagleScratch& sc, core::ThreadPool& pool);

// Forward + backward: writes every gradient into grad (same shapes as p; overwritten, not
// accumulated) and returns the mean loss over rows with a target (0 if none). feat_loss
// and tok_loss, when given, receive the unweighted means of the two parts (smooth-L1 per
// element, cross-entropy per row), so loss = feat_weight * feat_loss + tok_weight * tok_loss.
double eagle_forward_backward(const EagleTensors& p, const EagleShape& s, const float* lm_head, const EagleBatch& b,
                              EagleTensors& grad, EagleScratch& sc, core::ThreadPool& pool, double* feat_loss = nullptr,
                              double* tok_loss = nullptr);

// Adam (adam_step: the hyperparameters of the Medusa trainer's adam_update) over every tensor.
struct EagleAdam {
  EagleTensors m, v;
  explicit EagleAdam(const EagleTensors& shape) : m(shape.like(0.0f)), v(shape.like(0.0f)) {}
};
void eagle_adam_update(EagleTensors& p, const EagleTensors& g, EagleAdam& st, float lr, int64_t t,
                       core::ThreadPool& pool);

// Internal: the attention of the layer (eagle_attention.cpp), shared with eagle_backprop.cpp.
namespace eagle_detail {
// Causal attention within each sequence: q [M, Q], k, v [M, KV] (after RoPE) -> ao [M, Q];
// keeps the probabilities in sc.probs (offsets sc.prob_off) for the backward pass.
void attention_forward(const EagleShape& s, const EagleBatch& b, const float* q, const float* k, const float* v,
                       float* ao, EagleScratch& sc, core::ThreadPool& pool);
// From dao [M, Q]: dq [M, Q], dk, dv [M, KV] (overwritten; w.r.t. the post-RoPE q and k).
void attention_backward(const EagleShape& s, const EagleBatch& b, const float* q, const float* k, const float* v,
                        const float* dao, float* dq, float* dk, float* dv, const EagleScratch& sc,
                        core::ThreadPool& pool);
}  // namespace eagle_detail

}  // namespace treespec::train
