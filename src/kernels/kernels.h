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

// ISA levels, each a superset of the one before. avx2 = AVX2+FMA+F16C; avx512 =
// F/BW/VL/DQ; avx512_vnni adds the int8 dot products (VPDPBUSD) used for Q8_0/Q4_0.
// AMX has no level: an AMX-INT8 kernel was built and measured and did not pay with
// 32-value block scales (docs/kernels.md, "AMX"); cpu_has_amx() reports the CPU.
enum class Isa { scalar = 0, avx2 = 1, avx512 = 2, avx512_vnni = 3 };
constexpr int kNumIsas = 4;
const char* isa_name(Isa isa);
bool isa_supported(Isa isa);   // by this CPU (and OS state)
Isa best_isa();                // best supported
Isa active_isa();              // what matmul() etc. use now (default best_isa())
void set_active_isa(Isa isa);  // tests and benchmarks; clamps to supported
bool cpu_has_amx();            // AMX-TILE + AMX-INT8 present (informational only)

struct WeightView {
  const void* data = nullptr;  // [n_out, n_in] in `type`
  tensor::DType type = tensor::DType::f32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  // Optional copy of the same matrix in the avx512_vnni kernels' tile layout (made once
  // at load by pack_weights). When set, those kernels read it instead of `data`, with
  // bit-identical results; every other kernel and get_row keep reading `data`.
  const void* packed = nullptr;
  int64_t row_bytes() const { return tensor::row_bytes(type, n_in); }
};

// Load-time repacking into the tile layout of the best ISA's matmul kernels, so the
// inner loop needs no in-register transposes and each 16-row tile is one contiguous
// stream. packed_bytes(w) is the size of the copy (0: no packed kernel for this type on
// this CPU); pack_weights writes it to dst (64-byte aligned, packed_bytes(w) bytes).
int64_t packed_bytes(const WeightView& w);
void pack_weights(const WeightView& w, void* dst);

// True if matmul/get_row handle this dtype.
bool dtype_supported(tensor::DType type);

// y[M, n_out] = x[M, n_in] * W^T. Streams each weight row once for all M rows, so a
// tree of M rows costs about one weight read. `pool` may be null (single thread).
void matmul(const WeightView& w, const float* x, int64_t M, float* y, core::ThreadPool* pool);

// Several matrices that read the same x[M, n_in] (q/k/v, gate/up): y_j[M, n_out_j] =
// x * W_j^T, with one activation quantisation and one parallel pass over all their
// tiles (fewer thread hand-offs per layer). Same results as separate matmul calls.
void matmul_multi(const WeightView* const* ws, float* const* ys, int n, const float* x, int64_t M,
                  core::ThreadPool* pool);

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
// out[n] = gelu(gate[n]) * up[n], GELU in its tanh form (Gemma)
void geglu(const float* gate, const float* up, float* out, int64_t n);

// In-place softmax over n values; returns nothing; handles -inf entries.
void softmax(float* x, int64_t n);
// In-place logit soft-capping: x[i] = cap * tanh(x[i] / cap) (Gemma 2).
void softcap(float* x, int64_t n, float cap);

// Keys or values of one KV head of one sequence, as the paged KV cache stores them
// (kv::KvCache::k_rows / v_rows): logical cell t is the row at
//   base + blocks[t >> block_shift] * block_stride + (t & (2^block_shift - 1)) * row_stride
// holding head_dim values of `type`: f32, f16, bf16 or q8_0 (head_dim a multiple of 32).
// A plain [n_cells, head_dim] f32 array is KvRows::contiguous(ptr, head_dim).
struct KvRows {
  const uint8_t* base = nullptr;
  const int32_t* blocks = nullptr;
  int64_t block_stride = 0;  // bytes
  int64_t row_stride = 0;    // bytes
  int32_t block_shift = 0;
  tensor::DType type = tensor::DType::f32;

  const uint8_t* row(int64_t t) const {
    return base + static_cast<int64_t>(blocks[t >> block_shift]) * block_stride +
           (t & ((int64_t{1} << block_shift) - 1)) * row_stride;
  }
  static KvRows contiguous(const float* rows, int64_t head_dim) {
    static constexpr int32_t kBlock0 = 0;
    KvRows r;
    r.base = reinterpret_cast<const uint8_t*>(rows);
    r.blocks = &kBlock0;
    r.row_stride = head_dim * static_cast<int64_t>(sizeof(float));
    r.block_shift = 40;  // every cell in "block" 0
    return r;
  }
};
// True for the element types attention reads from a KV cache.
bool kv_type_supported(tensor::DType t);

// Attention of several query rows of one sequence against one KV head (the rows of a
// token tree, or one decode row). Query head j (0 <= j < n_head, the GQA group sharing
// this KV head) of row i is q + i*ldq + j*head_dim; its output goes to out + i*ldo +
// j*head_dim. Row i sees the committed cells [0, n_committed) and then its n_extra[i]
// cells extra[i][0..] (tree ancestors incl. itself) of k, v.
// K and V rows of the committed prefix are read once for all rows. The result of a row
// does not depend on the other rows (bit for bit), so one call per tree equals one call
// per node; nor on where cells sit in memory (only on their values and logical order).
struct AttentionRows {
  const float* q = nullptr;
  int64_t ldq = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  int64_t n_rows = 0;
  int64_t n_head = 1;
  int64_t head_dim = 0;
  KvRows k;
  KvRows v;
  int64_t n_committed = 0;
  const int32_t* const* extra = nullptr;  // [n_rows] lists of (logical) cells
  const int32_t* n_extra = nullptr;       // [n_rows]
  float scale = 1.0f;
  float* scratch = nullptr;  // attention_scratch_floats(n_rows, n_head, max visible) floats
  // Sliding-window attention: row i sees only entries [window_begin[i], ...) of its list
  // of visible cells (committed, then extra; null: all). The list's index is the cell's
  // position for chains and trees, so this is the window. Entries before it get weight 0;
  // whole chunks of them are skipped, which gives the same bits as computing them.
  const int64_t* window_begin = nullptr;
  // > 0: logit soft-capping, score = softcap * tanh(score / softcap) (Gemma 2), after
  // `scale` and before the softmax.
  float softcap = 0.0f;
};
int64_t attention_scratch_floats(int64_t n_rows, int64_t n_head, int64_t max_visible);
void attention_rows(const AttentionRows& a);

// Streams `bytes` of memory (a buffer allocated and touched here, so it lives in DRAM
// when bytes >> last-level cache) with every thread of `pool` (null: one thread) and
// returns the best of its read bandwidths in GB/s (1e9 bytes per second): at least `reps`
// passes, and more until they have taken `min_seconds` in all (at most 1000 passes).
// The one bandwidth probe: `treespec membw` and bench's machine record both use it.
// If per_cpu_s is given it receives bytes / (process CPU seconds) of the best repetition
// divided by the thread count: the rate while the threads actually ran, which is what
// to compare with on a machine shared with other jobs (wall-clock there includes time
// the threads spent descheduled).
double measure_read_bandwidth(core::ThreadPool* pool, size_t bytes, int reps = 5, double* per_cpu_s = nullptr,
                              double min_seconds = 0.0);

// One attention row: out[n_head, head_dim] for query q[n_head, head_dim] against the
// keys/values of one sequence. K and V are [n_head_kv, n_cells, head_dim] (per layer,
// per sequence). Visible cells: [0, n_committed) and then the n_extra cells listed in
// extra[] (tree ancestors incl. self). GQA: query head h uses kv head h / (n_head / n_head_kv).
// scratch must hold n_committed + n_extra floats.
void attention_row(const float* q, const float* k, const float* v, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                   int64_t n_cells, int64_t n_committed, const int32_t* extra, int64_t n_extra, float scale,
                   float* scratch, float* out);

}  // namespace treespec::kernels
