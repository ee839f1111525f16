// Pieces shared by the int8 tile translation units (avx512_vnni.cpp: Q8_0 / Q4_0,
// avx512_vnni_kquant.cpp: Q4_K / Q6_K): the 16-row tile transpose, the float step per
// block, the packed layouts and their loaders, the offset corrections, the tile store
// and the prefetch distances. Included only by files compiled with -mavx512vnni; like
// simd.h, everything is in an anonymous namespace (no cross-ISA ODR merges).
#pragma once

#include <utility>

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

// ---- The float step per (activation row, 16 output rows, block) -------------------
// Every int8 tile kernel (packed or not, any kT) computes the exact integer dot of a
// block and then calls one of these; sharing them is what makes the kernels agree bit
// for bit, so which one runs for a given M or layout changes no output. (An AMX kernel
// would have to end in the same step: docs/kernels.md, "AMX".)

// Q8_0 / Q4_0: f += float(dot) * (dw * dx).
inline void fold_q80(float* f, __m512i dot, __m512 dw, __m512 dx) {
  _mm512_storeu_ps(f, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx), _mm512_loadu_ps(f)));
}
// Q4_K sub-block: f = (f + float(dot) * (sc * dx)) - mn * ms, ms = dx * sum(x_q).
inline void fold_q4k(float* f, __m512i dot, __m512 vsc, __m512 vmn, __m512 vdx, __m512 vms) {
  const __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(vsc, vdx), _mm512_loadu_ps(f));
  _mm512_storeu_ps(f, _mm512_fnmadd_ps(vmn, vms, r));
}
// Q6_K, the two sub-blocks of 16 of an activation block: dots da, db (offsets included).
inline void fold_q6k(float* f, __m512i da, __m512i db, __m512 vsa, __m512 vsb, __m512 vdx) {
  const __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(da), _mm512_mul_ps(vsa, vdx), _mm512_loadu_ps(f));
  _mm512_storeu_ps(f, _mm512_fmadd_ps(_mm512_cvtepi32_ps(db), _mm512_mul_ps(vsb, vdx), r));
}

// ---- Q8_0-style blocks: one scale per 32 values ------------------------------------

// Loads block b of 16 rows (rows[0..15]) and transposes it into W[8] (unsigned bytes).
template <bool kQ4>
inline void load_tile_block(const uint8_t* const* rows, int64_t ob, __m512i W[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Q4_0: shift the high copy of each row's 16 bytes right by 4 (128-bit lanes 1 and 3).
  const __m512i nib_shift =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_setr_epi64x(0, 0, 0x0004000400040004LL, 0x0004000400040004LL)),
                         _mm256_setr_epi64x(0, 0, 0x0004000400040004LL, 0x0004000400040004LL), 1);
  __m512i a[8];
  for (int i = 0; i < 8; ++i) {
    if constexpr (kQ4) {
      const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + ob + 2));
      const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i + 8] + ob + 2));
      const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(lo)),
                                           _mm256_broadcastsi128_si256(hi), 1);
      a[i] = _mm512_and_si512(_mm512_srlv_epi16(z, nib_shift), m4);
    } else {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + ob + 2));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i + 8] + ob + 2));
      a[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
  }
  transpose_16x8(a, W);
  if constexpr (!kQ4) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int k = 0; k < 8; ++k) W[k] = _mm512_xor_si512(W[k], flip);
  }
}

// For every activation row m: facc[m, tile t] += float(block b's integer dot with
// W[t]) * (dw[t] * dx[m, b]); the one float operation per (row, output, block), in block
// order, that makes every tile kernel batch invariant and packed == unpacked.
template <int kT>
inline void accumulate_block(const __m512i (&W)[kT][8], const __m512 (&dw)[kT], const int8_t* __restrict xqq,
                             const float* __restrict xqd, const int32_t* __restrict corr, int64_t M, int64_t n,
                             int64_t nb, int64_t b, float* __restrict facc) {
  for (int64_t m = 0; m < M; ++m) {
    const auto* xb = reinterpret_cast<const int32_t*>(xqq + m * n + b * 32);
    const int64_t ib = m * nb + b;
    const __m512i c = _mm512_set1_epi32(corr[ib]);
    // Two short chains per tile (integer sums are exact in any order).
    __m512i acc0[kT], acc1[kT];
    for (int t = 0; t < kT; ++t) {
      acc0[t] = c;
      acc1[t] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 8; k += 2) {
      const __m512i x0 = _mm512_set1_epi32(xb[k]);
      const __m512i x1 = _mm512_set1_epi32(xb[k + 1]);
      for (int t = 0; t < kT; ++t) {
        acc0[t] = _mm512_dpbusd_epi32(acc0[t], W[t][k], x0);
        acc1[t] = _mm512_dpbusd_epi32(acc1[t], W[t][k + 1], x1);
      }
    }
    for (int t = 0; t < kT; ++t) acc0[t] = _mm512_add_epi32(acc0[t], acc1[t]);
    const __m512 dx = _mm512_set1_ps(xqd[ib]);
    for (int t = 0; t < kT; ++t) fold_q80(facc + (m * kT + t) * 16, acc0[t], dw[t], dx);
  }
}

// ---- Packed layouts (kernels.h pack_weights) and their block loaders ---------------
// Q8_0 / Q4_0: tile t (rows 16t..16t+15) occupies tile = align64(nb * 32) + nb * kQuant
// bytes: scales first (block b at 32 b: the 16 rows' f16 d), then the quants (block b at
// `scales + kQuant b`), as vectors whose lane r holds 4 bytes of row r (see
// avx512_vnni.cpp).
template <bool kQ4>
struct PackedLayout {
  static constexpr int64_t kQuant = kQ4 ? 256 : 512;
  int64_t nb, scales, tile;
  explicit PackedLayout(int64_t n_in) : nb(n_in / 32), scales((nb * 32 + 63) / 64 * 64), tile(scales + nb * kQuant) {}
};
// Per tile of 16 rows and super-block (layouts in avx512_vnni_kquant.cpp).
constexpr int64_t kQ4KPacked = 320 + 2048;
constexpr int64_t kQ6KPacked = 320 + 2048 + 1024;
constexpr int64_t kQ5KPacked = kQ4KPacked + 512;  // Q4_K's layout, then qh as 8 vectors
constexpr int64_t kIQ4XSPacked = 192 + 2048;      // layout in avx512_vnni_kquant.cpp

// Packed Q4_0 block (4 vectors of nibble pairs) -> W[8] of values 0..15.
inline void load_packed_q40(const uint8_t* q, __m512i W[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    const __m512i v = _mm512_load_si512(q + 64 * k);
    W[k] = _mm512_and_si512(v, m4);
    W[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
}
// IQ4_NL / IQ4_XS: nibbles (0..15 in every byte of W) -> llama.cpp's grid + 128, as
// unsigned bytes for VPDPBUSD (the dot then needs the Q8_0 correction -128 * sum(x_q)).
struct Grid128 {
  alignas(16) uint8_t v[16];
};
constexpr Grid128 make_grid128() {
  Grid128 g{};
  for (int i = 0; i < 16; ++i) g.v[i] = static_cast<uint8_t>(tensor::kIq4nlValues[i] + 128);
  return g;
}
inline constexpr Grid128 kGrid128 = make_grid128();
inline void iq4nl_lookup(__m512i W[8]) {
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kGrid128.v)));
  for (int k = 0; k < 8; ++k) W[k] = _mm512_shuffle_epi8(table, W[k]);
}

// Packed Q4_K super-block p, sub-block j -> W[8] (values 0..15) and the lane scales
// vsc = d * sc_j, vmn = dmin * m_j.
inline void load_packed_q4k(const uint8_t* p, int j, __m512i W[8], __m512& vsc, __m512& vmn) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const uint8_t* q = p + 320 + 512 * (j / 2);
  for (int k = 0; k < 8; ++k) {
    __m512i v = _mm512_load_si512(q + 64 * k);
    if (j & 1) v = _mm512_srli_epi16(v, 4);
    W[k] = _mm512_and_si512(v, m4);
  }
  const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512 dmin = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
  const __m128i sc = _mm_load_si128(reinterpret_cast<const __m128i*>(p + 64 + 16 * j));
  const __m128i mn = _mm_load_si128(reinterpret_cast<const __m128i*>(p + 192 + 16 * j));
  vsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
  vmn = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
}
// Packed Q5_K super-block p, sub-block j: Q4_K's nibbles with bit j of qh[l] as bit 4.
inline void load_packed_q5k(const uint8_t* p, int j, __m512i W[8], __m512& vsc, __m512& vmn) {
  load_packed_q4k(p, j, W, vsc, vmn);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  for (int k = 0; k < 8; ++k) {
    __m512i h = _mm512_load_si512(p + kQ4KPacked + 64 * k);
    // Move bit j of every byte to bit 4 (a 16-bit shift: the bits it carries across
    // bytes are masked off), then W |= h & 0x10 in one ternary-logic op.
    if (j < 4) h = _mm512_slli_epi16(h, 4 - j);
    if (j > 4) h = _mm512_srli_epi16(h, j - 4);
    W[k] = _mm512_ternarylogic_epi32(W[k], h, bit4, 0xF8);  // a | (b & c)
  }
}
// Lane scales d * sc of sub-blocks 2j and 2j + 1 from 16 int8 scales per sub-block
// (sub-block s at scales + 16 s, lane r = row r): the packed Q6_K and Q3_K layouts.
inline void int8_pair_scales(__m512 d, const uint8_t* scales, int j, __m512& vsa, __m512& vsb) {
  const __m128i sa = _mm_load_si128(reinterpret_cast<const __m128i*>(scales + 16 * (2 * j)));
  const __m128i sb = _mm_load_si128(reinterpret_cast<const __m128i*>(scales + 16 * (2 * j + 1)));
  vsa = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sa)));
  vsb = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sb)));
}
// Packed Q6_K super-block p, activation block j (sub-blocks 2j, 2j + 1) -> W[8] (values
// 0..63; W[0..3] the first sub-block, W[4..7] the second) and their lane scales d * sc.
inline void load_packed_q6k(const uint8_t* p, int j, __m512i W[8], __m512& vsa, __m512& vsb) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const int h = j / 4, k = j % 4;
  const uint8_t* ql = p + 320 + 512 * (2 * h + (k & 1));
  const uint8_t* qh = p + 2368 + 512 * h;
  for (int kk = 0; kk < 8; ++kk) {
    __m512i lo = _mm512_load_si512(ql + 64 * kk);
    if (k >> 1) lo = _mm512_srli_epi16(lo, 4);
    lo = _mm512_and_si512(lo, m4);
    // Bits 2k, 2k + 1 of qh to bits 4, 5 (16-bit shifts: what crosses a byte is masked),
    // then lo | (hi & 0x30) in one ternary-logic op.
    __m512i hi = _mm512_load_si512(qh + 64 * kk);
    if (k < 2) hi = _mm512_slli_epi16(hi, static_cast<unsigned>(4 - 2 * k));
    if (k > 2) hi = _mm512_srli_epi16(hi, 2);
    W[kk] = _mm512_ternarylogic_epi32(lo, hi, bits45, 0xF8);
  }
  int8_pair_scales(_mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p))), p + 32, j, vsa, vsb);
}

// Integer offset corrections, per thread (scratch slot 2), recomputed per call.
// Per (activation row, block): factor * sum(x_q): -128 for Q8_0 (weights stored + 128),
// -8 for Q4_0 (nibbles q for values q - 8).
inline const int32_t* block_corr(const impl::ActQ8* xq, int64_t M, int64_t nb, int32_t factor) {
  auto* corr = reinterpret_cast<int32_t*>(impl::thread_scratch(2, static_cast<size_t>(M * nb)));
  for (int64_t i = 0; i < M * nb; ++i) corr[i] = factor * xq->s[i];
  return corr;
}
// Q6_K (values q - 32), Q3_K (q - 4): factor * the sum of x_q over each half (16
// values) of every activation block, at [2 * (m * nb + b) + half].
inline const int32_t* half_corr_sums(const impl::ActQ8* xq, int64_t M, int64_t n, int32_t factor) {
  const int64_t nb = n / 32;
  auto* hc = reinterpret_cast<int32_t*>(impl::thread_scratch(2, static_cast<size_t>(M * nb * 2)));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = xq->q + m * n + b * 32;
      int32_t s0 = 0, s1 = 0;
      for (int j = 0; j < 16; ++j) {
        s0 += q[j];
        s1 += q[16 + j];
      }
      hc[2 * (m * nb + b)] = factor * s0;
      hc[2 * (m * nb + b) + 1] = factor * s1;
    }
  }
  return hc;
}

// Q4_K, activation block jb against the kT tiles' sub-block W (unsigned nibbles) with
// lane scales vsc = d*sc and mins vmn = dmin*m: the float operations per (row, output,
// sub-block) that the packed and unpacked kernels share.
template <int kT>
inline void accumulate_q4k(const __m512i (&W)[kT][8], const __m512 (&vsc)[kT], const __m512 (&vmn)[kT],
                           const impl::ActQ8* xq, int64_t M, int64_t n, int64_t nb, int64_t jb,
                           float* __restrict facc) {
  for (int64_t m = 0; m < M; ++m) {
    const auto* xb = reinterpret_cast<const int32_t*>(xq->q + m * n + jb * 32);
    const float dx = xq->d[m * nb + jb];
    const __m512 vdx = _mm512_set1_ps(dx);
    const __m512 vms = _mm512_set1_ps(dx * static_cast<float>(xq->s[m * nb + jb]));
    __m512i acc0[kT], acc1[kT];
    for (int t = 0; t < kT; ++t) acc0[t] = acc1[t] = _mm512_setzero_si512();
    for (int k = 0; k < 8; k += 2) {
      const __m512i x0 = _mm512_set1_epi32(xb[k]), x1 = _mm512_set1_epi32(xb[k + 1]);
      for (int t = 0; t < kT; ++t) {
        acc0[t] = _mm512_dpbusd_epi32(acc0[t], W[t][k], x0);
        acc1[t] = _mm512_dpbusd_epi32(acc1[t], W[t][k + 1], x1);
      }
    }
    for (int t = 0; t < kT; ++t)
      fold_q4k(facc + (m * kT + t) * 16, _mm512_add_epi32(acc0[t], acc1[t]), vsc[t], vmn[t], vdx, vms);
  }
}

// Sub-blocks of 16 (Q6_K, Q3_K), activation block jb (sub-blocks 2jb, 2jb + 1) against
// the kT tiles' W (unsigned values; W[0..3] the first sub-block, W[4..7] the second)
// with lane scales vsa, vsb: the float steps the packed and unpacked kernels share.
template <int kT>
inline void accumulate_q6k(const __m512i (&W)[kT][8], const __m512 (&vsa)[kT], const __m512 (&vsb)[kT],
                           const impl::ActQ8* xq, const int32_t* half_corr, int64_t M, int64_t n, int64_t nb,
                           int64_t jb, float* __restrict facc) {
  for (int64_t m = 0; m < M; ++m) {
    const auto* xb = reinterpret_cast<const int32_t*>(xq->q + m * n + jb * 32);
    const __m512 vdx = _mm512_set1_ps(xq->d[m * nb + jb]);
    const __m512i ca = _mm512_set1_epi32(half_corr[2 * (m * nb + jb)]);
    const __m512i cb = _mm512_set1_epi32(half_corr[2 * (m * nb + jb) + 1]);
    __m512i acc_a[kT], acc_b[kT];
    for (int t = 0; t < kT; ++t) {
      acc_a[t] = ca;
      acc_b[t] = cb;
    }
    for (int kk = 0; kk < 4; ++kk) {
      const __m512i x0 = _mm512_set1_epi32(xb[kk]), x1 = _mm512_set1_epi32(xb[kk + 4]);
      for (int t = 0; t < kT; ++t) {
        acc_a[t] = _mm512_dpbusd_epi32(acc_a[t], W[t][kk], x0);
        acc_b[t] = _mm512_dpbusd_epi32(acc_b[t], W[t][kk + 4], x1);
      }
    }
    for (int t = 0; t < kT; ++t) fold_q6k(facc + (m * kT + t) * 16, acc_a[t], acc_b[t], vsa[t], vsb[t], vdx);
  }
}

// Runs pass<kT>(t0, nr) over the output rows [r0, r1): two 16-row tiles per pass (each
// broadcast activation dword feeds two VPDPBUSDs), a single tile for an odd remainder.
template <class Pass>
inline void for_each_pass(int64_t r0, int64_t r1, Pass&& pass) {
  int64_t t0 = r0;
  for (; t0 + 16 < r1; t0 += 32) pass.template operator()<2>(t0, static_cast<int>(imin<int64_t>(32, r1 - t0)));
  if (t0 < r1) pass.template operator()<1>(t0, static_cast<int>(r1 - t0));
}

// The GGUF rows of kT tiles from `tile` (row stride rb, nr valid rows; rows past the end
// repeat the last one, their results are dropped), and the software prefetch of their
// super-block sb + 2 (32 row streams are more than the hardware prefetchers follow).
template <class Blk, int kT>
inline void tile_rows(const uint8_t* tile, int64_t rb, int nr, const Blk* (&rows)[kT][16]) {
  for (int t = 0; t < kT; ++t) {
    for (int i = 0; i < 16; ++i) rows[t][i] = reinterpret_cast<const Blk*>(tile + imin(16 * t + i, nr - 1) * rb);
  }
}
template <class Blk, int kT>
inline void prefetch_rows(const Blk* const (&rows)[kT][16], int64_t sb, int64_t nsb) {
  if (sb + 2 >= nsb) return;
  for (int t = 0; t < kT; ++t)
    for (int i = 0; i < 16; ++i)
      for (int l = 0; l < static_cast<int>(sizeof(Blk)); l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(&rows[t][i][sb + 2]) + l, _MM_HINT_T0);
}

constexpr int64_t kPrefetch = 256;     // bytes ahead in each weight row
constexpr int64_t kPrefetchEvery = 0;  // mask: prefetch when (block & mask) == 0

// Software prefetch of the packed weights. A packed tile is one contiguous stream read
// front to back, so each kernel asks, for every part of the stream it consumes, for the
// same bytes kStreamAhead further on, into L2 (T1): prefetches into L1 (T0) hold an L1
// miss buffer each until DRAM answers, and so many of them starved the demand loads that
// the K-quants streamed at half the DRAM rate.
constexpr int64_t kStreamAhead = 4096;  // Zen 4, Q6_K: 1 KiB 29, 2 KiB 32, 4 KiB 40, 8 KiB 38 tok/s
inline void prefetch_ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t l = 0; l < bytes; l += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kStreamAhead + l), _MM_HINT_T1);
}
// Part j of 8 of a super-block of kBytes at p (the K-quant kernels consume a super-block
// in 8 steps; one eighth of its prefetches per step keeps them spread out).
template <int64_t kBytes, int j>
inline void prefetch_eighth(const uint8_t* p) {
  constexpr int64_t lines = (kBytes + 63) / 64, per = (lines + 7) / 8;
  constexpr int64_t l0 = j * per, l1 = (j + 1) * per < lines ? (j + 1) * per : lines;
  for (int64_t l = l0; l < l1; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + kStreamAhead + 64 * l), _MM_HINT_T1);
}

}  // namespace
}  // namespace treespec::kernels
