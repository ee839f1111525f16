// The hand-written forward/backward pass of one Medusa head and its Adam update (used by
// the trainer; public so tests can check the gradients against finite differences).
//
// Head: x_0 = h; x_{r+1} = x_r + SiLU(W_r x_r + b_r) for r < R; logits = Wout x_R (Wout
// trained, or frozen when the heads share the base output matrix).
// Loss per row: cross-entropy against (1 - kl) * one-hot(target) + kl * soft target
// (the base model's top entries), averaged over rows that have a target.
//
// Every parallel task owns a disjoint slice of the outputs and sums in a fixed order, so
// results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace treespec::train {

// Residual blocks per head when the user gives none (Medusa and prune heads): 1 with own
// vocab projections; with the model's output matrix frozen, 512 / n_embd clamped to 1..4,
// since then the blocks carry all the adaptation (measured on stories260K, n_embd 64: one
// block gives Medusa head 0 top-1 0.35, four give 0.55, as own projections do;
// docs/medusa.md "Shared output matrix").
int32_t default_head_blocks(int32_t n_embd, bool own_output);

// Parameters (or gradients, or Adam moments) of one head, all f32.
struct HeadTensors {
  std::vector<std::vector<float>> w;  // R x [E, E]  (row o = output o)
  std::vector<std::vector<float>> b;  // R x [E]
  std::vector<float> out;             // [V, E]
  // The vocab projection is the base model's, frozen (heads that share the model's output
  // matrix): it is read, never trained; like() gives gradients and moments without it.
  bool out_frozen = false;
  // Same shapes, filled with `value` (out left empty when frozen).
  HeadTensors like(float value) const;
  size_t n_params() const;
};

struct SoftTargets {
  const int32_t* ids = nullptr;  // [M, n_top]
  const float* p = nullptr;      // [M, n_top], each row sums to 1
  int32_t n_top = 0;
  float weight = 0.0f;  // kl weight in [0, 1]
};

// Scratch of one step (grown on demand, reused across steps and heads).
struct HeadScratch {
  std::vector<std::vector<float>> x, z;
  std::vector<float> logits, dx, dz;
  std::vector<double> row_loss;
};

// h [M, E]; target[M] (-1 = row has no target). Writes every gradient in `grad` (same
// shapes as params) and returns the mean loss over rows with a target (0 if none).
double head_forward_backward(const HeadTensors& params, int32_t E, int32_t V, const float* h, int64_t M,
                             const int32_t* target, const SoftTargets& soft, HeadTensors& grad, HeadScratch& sb,
                             core::ThreadPool& pool);

// Adam (beta 0.9 / 0.999, eps 1e-8, bias-corrected) at step t >= 1.
struct AdamState {
  HeadTensors m, v;
  explicit AdamState(const HeadTensors& shape) : m(shape.like(0.0f)), v(shape.like(0.0f)) {}
};
// One tensor's Adam step (the update of adam_update and of the EAGLE trainer).
void adam_step(std::vector<float>& w, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
               float lr, int64_t t, core::ThreadPool& pool);
void adam_update(HeadTensors& params, const HeadTensors& grad, AdamState& st, float lr, int64_t t,
                 core::ThreadPool& pool);

}  // namespace treespec::train
