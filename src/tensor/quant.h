// GGUF block layouts of the weight types treespec computes with, their reference
// (scalar, exact) dequantisers and reference quantisers.
//
// Every struct below is byte-for-byte the GGML block (little endian, packed): a tensor
// row of n elements is n / block_size consecutive blocks. The dequantisers define the
// numbers: every SIMD kernel is tested against them.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace treespec::tensor {

// Q8_0: x[j] = d * qs[j]
struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8), j < 16
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_K: super-block of 256 = 8 sub-blocks of 32. Sub-block s has a 6-bit scale sc[s] and
// a 6-bit min m[s] packed in scales[12] (see q4_k_scale_min); x = d*sc*q - dmin*m with
// q a 4-bit value. qs: 4 chunks of 32 bytes; chunk c holds sub-block 2c in the low
// nibbles and sub-block 2c+1 in the high nibbles.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q6_K: super-block of 256 = 16 sub-blocks of 16 with int8 scales; x = d*scales[s]*(q-32),
// q a 6-bit value: low 4 bits in ql, high 2 bits in qh (layout in dequantize_q6_k).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Scale and min of sub-block j (0..7) of a Q4_K block (GGML's get_scale_min_k4).
inline void q4_k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// True for the types quantize_row/dequantize_row handle (f32 f16 bf16 q8_0 q4_0 q4_k q6_k).
bool quant_supported(DType t);

// dst[n] = src (row_bytes(t, n) bytes) as f32. n must be a multiple of the block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// dst (row_bytes(t, n) bytes) = src[n] quantised. n must be a multiple of the block size.
// Reference quantisers: Q8_0 and Q4_0 exactly as GGML (round to nearest, scale from the
// largest magnitude); Q4_K and Q6_K choose scales by a small search that minimises the
// squared error of each sub-block (see docs/kernels.md); F16/BF16 round to nearest even.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace treespec::tensor
