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
  uint16_t d;  // fp16 scale
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

// Q4_1: x[j] = d * (qs[j] & 15) + m, x[j + 16] = d * (qs[j] >> 4) + m, j < 16
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: 5-bit q = nibble | (bit << 4); element j < 16: low nibble of qs[j] and bit j of
// qh (a little-endian uint32), element j + 16: high nibble and bit j + 16; x = d * (q - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: as Q5_0 with x = d * q + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// IQ4_NL: as Q4_0, but x = d * kIq4nlValues[nibble] (a fixed non-uniform grid).
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q2_K: 16 sub-blocks of 16; scales[s] = 4-bit scale (low) | 4-bit min (high);
// x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q 2-bit. Element e = 128h +
// 32j + l (h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32h + l]; its sub-block is e / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16 with 6-bit scales (stored + 32, packed in scales[12], see
// q3_k_scale); x = d * (scale - 32) * (q - 4), q 3-bit: the 2 low bits as in Q2_K's qs,
// the high bit is bit 4h + j of hmask[l] (element 128h + 32j + l).
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q5_K: as Q4_K (8 sub-blocks of 32, 6-bit scales and mins packed the same way) with a
// fifth bit per value: element 32j + l (sub-block j) has the nibble of Q4_K's layout and
// bit j of qh[l]; x = d*sc*q - dmin*m, q in 0..31.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales ls (low 4 bits in scales_l[s / 2], nibble
// s % 2; high 2 bits at bits 2s of scales_h); x = d * (ls - 32) * kIq4nlValues[nibble],
// sub-block s's 32 values laid out as one IQ4_NL block in qs[16s .. 16s + 16).
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The 6-bit stored scale (0..63; the value is scale - 32) of sub-block s of a Q3_K block:
// low 4 bits from scales[s] (s < 8, low nibble) or scales[s - 8] (high nibble), high 2
// bits from scales[8 + s % 4] at bits 2 * (s / 4).
inline int q3_k_scale(int s, const uint8_t* scales) {
  const int lo = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4;
  const int hi = (scales[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
  return lo | (hi << 4);
}

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

// True for the types quantize_row/dequantize_row handle: f32 f16 bf16 q8_0 q4_0 q4_1
// q5_0 q5_1 iq4_nl q2_k q3_k q4_k q5_k q6_k iq4_xs.
bool quant_supported(DType t);

// dst[n] = src (row_bytes(t, n) bytes) as f32. n must be a multiple of the block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// dst (row_bytes(t, n) bytes) = src[n] quantised. n must be a multiple of the block size.
// Reference quantisers: Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 as GGML's reference ones (round
// to nearest, scales from the block's extremes); the K-quants, IQ4_NL and IQ4_XS choose
// scales by a small search that minimises the squared error of each sub-block, without
// importance weights (docs/kernels.md); F16/BF16 round to nearest even.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace treespec::tensor
