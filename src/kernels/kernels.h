// Compute kernels behind one narrow interface (a future CUDA backend replaces this
// layer only). Every function has a scalar reference in ref/ that is the test oracle;
// x86/ holds AVX2 / AVX-512 / VNNI versions chosen at run time (see dispatch.cpp).
//
// Conventions: row-major, last dimension contiguous; shapes in comments as
// [rows, cols]. A weight matrix W is [n_out, n_in] stored row by row in its dtype
// (quant blocks run along n_in), exactly as GGUF stores a tensor with ne = {n_in, n_out}.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "tensor/dtype.h"

namespace treespec::kernels {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, avx512_vnni = 3 };
const char* isa_name(Isa isa);
bool isa_supported(Isa isa);      // by this CPU (and OS state)
Isa best_isa();                   // best supported
Isa active_isa();                 // what matmul() etc. use now (default best_isa())
void set_active_isa(Isa isa);     // tests and benchmarks; clamps to supported

struct WeightView {
  const void* data = nullptr;  // [n_out, n_in] in `type`
  tensor::DType type = tensor::DType::f32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t row_bytes() const { return tensor::row_bytes(type, n_in); }
};

// True if matmul/get_row handle this dtype.
bool dtype_supported(tensor::DType type);

// y[M, n_out] = x[M, n_in] * W^T. Streams each weight row once for all M rows, so a
// tree of M rows costs about one weight read. `pool` may be null (single thread).
void matmul(const WeightView& w, const float* x, int64_t M, float* y, core::ThreadPool* pool);

// out[n_in] = row r of W, dequantised (embedding lookup).
void get_row(const WeightView& w, int64_t r, float* out);

// Dequantise n elements (n a multiple of the block size) of `type` to f32.
void to_float(tensor::DType type, const void* src, float* dst, int64_t n);

// y[n] = x[n] / sqrt(mean(x^2) + eps) * weight[n]   (y may alias x)
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// Rotary embedding in place on one row of n_head heads of head_dim, at position pos.
// neox = false: rotate adjacent pairs (x[2i], x[2i+1]) (GGML "normal", llama2.c);
// neox = true: rotate (x[i], x[i + n_rot/2]) (GGML "neox", Qwen2). Only the first
// n_rot dims of each head rotate. inv_freq[n_rot/2] holds the per-pair frequencies
// (theta^(-2i/n_rot), already scaled), so every RoPE scaling variant is a table.
void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const float* inv_freq, bool neox,
          float attn_factor = 1.0f);

// out[n] = silu(gate[n]) * up[n]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// In-place softmax over n values; returns nothing; handles -inf entries.
void softmax(float* x, int64_t n);

// One attention row: out[n_head, head_dim] for query q[n_head, head_dim] against the
// keys/values of one sequence. K and V are [n_head_kv, n_cells, head_dim] (per layer,
// per sequence). Visible cells: [0, n_committed) and then the n_extra cells listed in
// extra[] (tree ancestors incl. self). GQA: query head h uses kv head h / (n_head / n_head_kv).
// scratch must hold n_committed + n_extra floats.
void attention_row(const float* q, const float* k, const float* v, int64_t n_head, int64_t n_head_kv,
                   int64_t head_dim, int64_t n_cells, int64_t n_committed, const int32_t* extra, int64_t n_extra,
                   float scale, float* scratch, float* out);

}  // namespace treespec::kernels
