// Internal kernel tables shared by ref/ and x86/ (not part of the public kernel API).
//
// One KernelTable per ISA level; dispatch.cpp builds each by starting from the scalar
// reference and letting every ISA at or below the level override entries. All kernels
// are *batch invariant*: the value computed for one (row, output) never depends on how
// many rows are in the call or where the row sits, so a tree of M rows gives bit-for-bit
// the logits that M separate one-row steps would (greedy speculation must not change
// the output; see docs/kernels.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace treespec::kernels::impl {

// Activations quantised once per matmul call to int8 blocks of 32 (the format llama.cpp
// feeds its integer dot products for Q8_0 / Q4_0), read by every thread.
constexpr int kActBlock = 32;
struct ActQ8 {
  const int8_t* q = nullptr;   // [M, n_in]
  const float* d = nullptr;    // [M, n_in / 32] block scales: x ~ d * q
  const int32_t* s = nullptr;  // [M, n_in / 32] sum of the block's q (for offset corrections)
};

enum class ActFormat : uint8_t { f32 = 0, q8 = 1 };

// Computes y[m, r] for rows r in [r0, r1) of W and all m in [0, M); y has row stride ldy.
// xq is non-null exactly when the table entry's ActFormat is q8.
using MatmulRowsFn = void (*)(const WeightView& w, const float* x, const ActQ8* xq, int64_t M, float* y, int64_t ldy,
                              int64_t r0, int64_t r1);
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// One activation row x[n] (n a multiple of 32) -> q[n], d[n/32], s[n/32].
using QuantizeActFn = void (*)(const float* x, int64_t n, int8_t* q, float* d, int32_t* s);
using RmsnormFn = void (*)(const float* x, const float* weight, float* y, int64_t n, float eps);
using SwigluFn = void (*)(const float* gate, const float* up, float* out, int64_t n);
using SoftmaxFn = void (*)(float* x, int64_t n);
using SoftcapFn = void (*)(float* x, int64_t n, float cap);
using AttentionRowsFn = void (*)(const AttentionRows& a);
// Packed copy of w (kernels.h pack_weights): returns its size in bytes; writes it when
// dst is non-null.
using PackFn = int64_t (*)(const WeightView& w, void* dst);

constexpr int kMaxTypeId = 40;

struct KernelTable {
  MatmulRowsFn matmul_rows[kMaxTypeId] = {};
  ActFormat act[kMaxTypeId] = {};
  int32_t row_grain[kMaxTypeId] = {};  // output rows per work item (the kernel's tile height)
  ToFloatFn to_float[kMaxTypeId] = {};
  PackFn pack[kMaxTypeId] = {};  // null: the matmul kernel reads the GGUF layout only
  QuantizeActFn quantize_act = nullptr;
  RmsnormFn rmsnorm = nullptr;
  SwigluFn swiglu = nullptr;
  SwigluFn geglu = nullptr;
  SoftmaxFn softmax = nullptr;
  SoftcapFn softcap = nullptr;
  AttentionRowsFn attention_rows = nullptr;
};

// Fills `t` with the scalar reference kernels.
void register_ref(KernelTable& t);
// Override entries with ISA-specific kernels (defined in x86/*.cpp; weak no-op fallbacks
// when a file is absent, e.g. on other architectures).
void register_avx2(KernelTable& t);
void register_avx2_int8(KernelTable& t);   // called by register_avx2 and register_avx512
void register_avx2_lanes(KernelTable& t);  // Q8_0, rows in lanes; called by register_avx2_int8
void register_avx512(KernelTable& t);
void register_avx512_vnni(KernelTable& t);
void register_avx512_vnni_kquant(KernelTable& t);   // called by register_avx512_vnni
void register_avx512_vnni_q2k_q3k(KernelTable& t);  // called by register_avx512_vnni
void register_avx512_vnni_b32(KernelTable& t);      // called by register_avx512_vnni

const KernelTable& table_for(Isa isa);

// Per-thread scratch of at least n floats (64-byte aligned), slot 0..3; contents are
// kept until the next call with the same slot on the same thread.
float* thread_scratch(int slot, size_t n);

// Scalar reference implementations, callable directly (tests use them as the oracle).
void ref_quantize_act(const float* x, int64_t n, int8_t* q, float* d, int32_t* s);
void ref_rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps);
void ref_swiglu(const float* gate, const float* up, float* out, int64_t n);
void ref_geglu(const float* gate, const float* up, float* out, int64_t n);
void ref_softmax(float* x, int64_t n);
void ref_softcap(float* x, int64_t n, float cap);
void ref_attention_rows(const AttentionRows& a);

}  // namespace treespec::kernels::impl
