// Pieces shared by the AVX-512 VNNI translation units (avx512_vnni.cpp: Q8_0 / Q4_0,
// avx512_vnni_kquant.cpp: Q4_K / Q6_K): the 16-row tile transpose, the tile store and
// the prefetch distances. Included only by files compiled with -mavx512vnni; like
// simd.h, everything is in an anonymous namespace (no cross-ISA ODR merges).
#pragma once

#include "kernels/x86/simd.h"

namespace treespec::kernels {
namespace {


// a[i] = [row i bytes 0..31 | row i+8 bytes 0..31]  ->  w[k] lane r = dword k of row r.
inline void transpose_16x8(const __m512i a[8], __m512i w[8]) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
  }
  // rows 0-3 (per 128-bit lane): u0 = dword 0, u1 = dword 1, u2 = dword 2, u3 = dword 3
  u[0] = _mm512_unpacklo_epi64(t[0], t[2]);
  u[1] = _mm512_unpackhi_epi64(t[0], t[2]);
  u[2] = _mm512_unpacklo_epi64(t[1], t[3]);
  u[3] = _mm512_unpackhi_epi64(t[1], t[3]);
  // rows 4-7
  u[4] = _mm512_unpacklo_epi64(t[4], t[6]);
  u[5] = _mm512_unpackhi_epi64(t[4], t[6]);
  u[6] = _mm512_unpacklo_epi64(t[5], t[7]);
  u[7] = _mm512_unpackhi_epi64(t[5], t[7]);
  // 128-bit lanes of u[j]: L0 = dword j of rows 0-3 (j+4 for L1), L2/L3 the same for rows 8-11.
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int j = 0; j < 4; ++j) {
    w[j] = _mm512_permutex2var_epi64(u[j], lo, u[j + 4]);
    w[j + 4] = _mm512_permutex2var_epi64(u[j], hi, u[j + 4]);
  }
}

// y[m, t0 + 16t + i] = facc[(m * kT + t) * 16 + i] for the nr valid rows of the pass.
template <int kT>
inline void store_tiles(const float* facc, int64_t M, float* y, int64_t ldy, int64_t t0, int nr) {
  for (int t = 0; t < kT; ++t) {
    const int rows_here = imin(16, nr - 16 * t);
    if (rows_here <= 0) break;
    const auto keep = static_cast<__mmask16>((1u << rows_here) - 1);
    for (int64_t m = 0; m < M; ++m) {
      _mm512_mask_storeu_ps(y + m * ldy + t0 + 16 * t, keep, _mm512_loadu_ps(facc + (m * kT + t) * 16));
    }
  }
}

constexpr int64_t kPrefetch = 256;  // bytes ahead in each weight row
constexpr int64_t kPackedPrefetch = 1024;  // bytes ahead in a packed tile's quant stream
constexpr int64_t kPrefetchEvery = 0;  // mask: prefetch when (block & mask) == 0

}  // namespace
}  // namespace treespec::kernels
