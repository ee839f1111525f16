// AVX-512 VNNI kernels: Q8_0 and Q4_0 weights times activations quantised per block of
// 32 to int8 (impl::ActQ8), with VPDPBUSD integer dot products.
//
// Tile layout. A tile is 16 consecutive weight rows (two tiles are processed per pass). For each block of 32 inputs the
// 16 rows' 32 bytes are transposed in registers into 8 vectors W[k] whose lane r holds
// bytes 4k..4k+3 of row r; one VPDPBUSD of W[k] with the broadcast bytes 4k..4k+3 of an
// activation block then advances 16 outputs at once, and after 8 of them lane r holds
// the block's exact integer dot product for row r. The weights are read from memory
// once per tile and reused for all M activation rows, so a tree of M rows costs about
// one weight read. No horizontal sums: lane r is output r.
//
// VPDPBUSD multiplies unsigned by signed bytes. Q8_0: weights are made unsigned by
// flipping the sign bit (w + 128) and the integer accumulator starts at -128 * sum(x_q).
// Q4_0: nibbles are already unsigned (q in 0..15, value q - 8); start at -8 * sum(x_q).
//
// Per (row, output) the float accumulation is acc += float(dot_b) * (d_w[b] * d_x[b])
// over blocks b in order: the same operations whatever M is (batch invariant).
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

constexpr int64_t kPrefetch = 256;  // bytes ahead in each weight row
constexpr int64_t kPrefetchEvery = 0;  // mask: prefetch when (block & mask) == 0

// Loads block b of 16 rows (rows[0..15]) and transposes it into W[8] (unsigned bytes).
template <bool kQ4>
inline void load_tile_block(const uint8_t* const* rows, int64_t ob, __m512i W[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // Q4_0: shift the high copy of each row's 16 bytes right by 4 (128-bit lanes 1 and 3).
  const __m512i nib_shift = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_setr_epi64x(0, 0, 0x0004000400040004LL, 0x0004000400040004LL)),
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

// kT tiles of 16 rows (kT = 2: 32 rows) per pass: each broadcast activation dword feeds
// kT VPDPBUSDs, which halves the broadcasts per multiply-add.
template <bool kQ4, int kT>
void vnni_tiles(const uint8_t* base, int64_t rb, int64_t nb, const int8_t* __restrict xqq,
                const float* __restrict xqd, const int32_t* __restrict corr, int64_t M, int64_t n, float* y,
                int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  constexpr int64_t kBlockBytes = kQ4 ? 18 : 34;
  const uint8_t* tile = base + t0 * rb;
  const uint8_t* rows[kT][16];
  __m512i gidx[kT];
  for (int t = 0; t < kT; ++t) {
    alignas(64) int32_t offs[16];
    for (int i = 0; i < 16; ++i) {
      const int ri = imin(16 * t + i, nr - 1);  // rows past the end repeat the last one; dropped
      rows[t][i] = tile + ri * rb;
      offs[i] = static_cast<int32_t>(ri * rb);
    }
    gidx[t] = _mm512_load_si512(offs);
  }
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t ob = b * kBlockBytes;
    __m512i W[kT][8];
    __m512 dw[kT];
    // 32 row streams are more than the hardware prefetchers follow: prefetch each row
    // kPrefetch bytes ahead, every block (measured: 256 B, every block, best of 128..2048 B).
    if ((b & kPrefetchEvery) == 0) {
      for (int t = 0; t < kT; ++t)
        for (int i = 0; i < 16; ++i) _mm_prefetch(reinterpret_cast<const char*>(rows[t][i] + ob + kPrefetch), _MM_HINT_T0);
    }
    for (int t = 0; t < kT; ++t) {
      load_tile_block<kQ4>(rows[t], ob, W[t]);
      dw[t] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(gidx[t], tile + ob, 1)));
    }
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
      for (int t = 0; t < kT; ++t) {
        float* f = facc + (m * kT + t) * 16;
        const __m512 dot = _mm512_cvtepi32_ps(acc0[t]);
        _mm512_storeu_ps(f, _mm512_fmadd_ps(dot, _mm512_mul_ps(dw[t], dx), _mm512_loadu_ps(f)));
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    const int rows_here = imin(16, nr - 16 * t);
    if (rows_here <= 0) break;
    const auto keep = static_cast<__mmask16>((1u << rows_here) - 1);
    for (int64_t m = 0; m < M; ++m) {
      _mm512_mask_storeu_ps(y + m * ldy + t0 + 16 * t, keep, _mm512_loadu_ps(facc + (m * kT + t) * 16));
    }
  }
}

template <bool kQ4>
void matmul_rows_vnni(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  const int64_t n = w.n_in;
  const int64_t nb = n / 32;
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));  // [M, 32]
  // Integer offset correction per (row, block), precomputed so the inner loop only
  // broadcasts it from memory: -128 * sum(x_q) (Q8_0, weights + 128) or -8 * sum(x_q) (Q4_0).
  auto* corr = reinterpret_cast<int32_t*>(impl::thread_scratch(2, static_cast<size_t>(M * nb)));
  for (int64_t i = 0; i < M * nb; ++i) corr[i] = (kQ4 ? -8 : -128) * xq->s[i];
  int64_t t0 = r0;
  for (; t0 + 16 < r1; t0 += 32) {
    vnni_tiles<kQ4, 2>(base, rb, nb, xq->q, xq->d, corr, M, n, y, ldy, t0, static_cast<int>(imin<int64_t>(32, r1 - t0)), facc);
  }
  if (t0 < r1) vnni_tiles<kQ4, 1>(base, rb, nb, xq->q, xq->d, corr, M, n, y, ldy, t0, static_cast<int>(r1 - t0), facc);
}

// ---- K-quants ---------------------------------------------------------------------
// Same tile scheme; the activation blocks of 32 line up with Q4_K's sub-blocks of 32 and
// with pairs of Q6_K's sub-blocks of 16. Per super-block of 256 the 16 rows' sub-block
// scales are unpacked into lane vectors once and shared by all M activation rows.

// Transposes 16 rows of 32 prepared bytes: a[i] = [row i | row i+8] (32 bytes each).
inline void transpose_prepared(__m512i a[8], __m512i W[8]) { transpose_16x8(a, W); }

// Q4_K: value = d*sc*q - dmin*m, q in 0..15. Per (row, activation block j):
// acc += float(sum q*x_q) * (d*sc_j*dx) - (dmin*m_j) * (dx * sum x_q).
template <int kT>
void q4k_tiles(const uint8_t* base, int64_t rb, int64_t nsb, const impl::ActQ8* xq, int64_t M, int64_t n, float* y,
               int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tile = base + t0 * rb;
  const tensor::BlockQ4_K* rows[kT][16];
  __m512i gidx[kT];  // byte offset of each lane's row from `tile`, for gathering scales
  for (int t = 0; t < kT; ++t) {
    alignas(64) int32_t offs[16];
    for (int i = 0; i < 16; ++i) {
      const int ri = imin(16 * t + i, nr - 1);
      rows[t][i] = reinterpret_cast<const tensor::BlockQ4_K*>(tile + ri * rb);
      offs[i] = static_cast<int32_t>(ri * rb);
    }
    gidx[t] = _mm512_load_si512(offs);
  }
  const int64_t nb = n / 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    if (sb + 2 < nsb) {  // as in the Q8_0 kernel: 32 row streams need software prefetch
      for (int t = 0; t < kT; ++t)
        for (int i = 0; i < 16; ++i)
          for (int l = 0; l < static_cast<int>(sizeof(tensor::BlockQ4_K)); l += 64)
            _mm_prefetch(reinterpret_cast<const char*>(&rows[t][i][sb + 2]) + l, _MM_HINT_T0);
    }
    // Sub-block scales of the 16 rows, one lane per row: gather d/dmin and the 12 scale
    // bytes as dwords and unpack the 6-bit fields (q4k_scale_min) in vectors.
    alignas(64) float dsc[kT][8][16], dmn[kT][8][16];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* bp = tile + sb * static_cast<int64_t>(sizeof(tensor::BlockQ4_K));
      const __m512i g0 = _mm512_i32gather_epi32(gidx[t], bp, 1);
      const __m512i s0 = _mm512_i32gather_epi32(gidx[t], bp + 4, 1);
      const __m512i s1 = _mm512_i32gather_epi32(gidx[t], bp + 8, 1);
      const __m512i s2 = _mm512_i32gather_epi32(gidx[t], bp + 12, 1);
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
      const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g0, 16)));
      const __m512i c63 = _mm512_set1_epi32(63), c15 = _mm512_set1_epi32(15), c3 = _mm512_set1_epi32(3);
      for (int j = 0; j < 4; ++j) {
        const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), c63);
        const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), c63);
        _mm512_store_ps(dsc[t][j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        _mm512_store_ps(dmn[t][j], _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)));
      }
      for (int k = 0; k < 4; ++k) {
        const __m512i b2 = _mm512_srli_epi32(s2, 8 * k);
        const __m512i hs = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, 8 * k + 6), c3), 4);
        const __m512i hm = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, 8 * k + 6), c3), 4);
        const __m512i sc = _mm512_or_si512(_mm512_and_si512(b2, c15), hs);
        const __m512i mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b2, 4), c15), hm);
        _mm512_store_ps(dsc[t][4 + k], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        _mm512_store_ps(dmn[t][4 + k], _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)));
      }
    }
    for (int j = 0; j < 8; ++j) {
      __m512i W[kT][8];
      for (int t = 0; t < kT; ++t) {
        __m512i a[8];
        for (int i = 0; i < 8; ++i) {
          const uint8_t* lo = rows[t][i][sb].qs + 32 * (j / 2);
          const uint8_t* hi = rows[t][i + 8][sb].qs + 32 * (j / 2);
          __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
          if (j & 1) z = _mm512_srli_epi16(z, 4);
          a[i] = _mm512_and_si512(z, m4);
        }
        transpose_prepared(a, W[t]);
      }
      const int64_t jb = sb * 8 + j;  // activation block
      __m512 vsc[kT], vmn[kT];
      for (int t = 0; t < kT; ++t) {
        vsc[t] = _mm512_load_ps(dsc[t][j]);
        vmn[t] = _mm512_load_ps(dmn[t][j]);
      }
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
        for (int t = 0; t < kT; ++t) {
          float* f = facc + (m * kT + t) * 16;
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(acc0[t], acc1[t]));
          __m512 r = _mm512_fmadd_ps(dot, _mm512_mul_ps(vsc[t], vdx), _mm512_loadu_ps(f));
          _mm512_storeu_ps(f, _mm512_fnmadd_ps(vmn[t], vms, r));
        }
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    const int rows_here = imin(16, nr - 16 * t);
    if (rows_here <= 0) break;
    const auto keep = static_cast<__mmask16>((1u << rows_here) - 1);
    for (int64_t m = 0; m < M; ++m) _mm512_mask_storeu_ps(y + m * ldy + t0 + 16 * t, keep, _mm512_loadu_ps(facc + (m * kT + t) * 16));
  }
}

// Q6_K: value = d*sc_s*(q - 32), q in 0..63, sub-blocks s of 16. Activation block j
// (32 values) covers sub-blocks 2j and 2j+1; their integer dots start at -32 * (sum of
// the x_q of that half) and each gets its own scale:
// acc += float(dot_a) * (d*sc_2j*dx) + float(dot_b) * (d*sc_2j+1*dx).
template <int kT>
void q6k_tiles(const uint8_t* base, int64_t rb, int64_t nsb, const impl::ActQ8* xq, const int32_t* half_corr, int64_t M,
               int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tile = base + t0 * rb;
  const tensor::BlockQ6_K* rows[kT][16];
  __m512i gidx[kT];
  for (int t = 0; t < kT; ++t) {
    alignas(64) int32_t offs[16];
    for (int i = 0; i < 16; ++i) {
      const int ri = imin(16 * t + i, nr - 1);
      rows[t][i] = reinterpret_cast<const tensor::BlockQ6_K*>(tile + ri * rb);
      offs[i] = static_cast<int32_t>(ri * rb);
    }
    gidx[t] = _mm512_load_si512(offs);
  }
  const int64_t nb = n / 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    if (sb + 2 < nsb) {
      for (int t = 0; t < kT; ++t)
        for (int i = 0; i < 16; ++i)
          for (int l = 0; l < static_cast<int>(sizeof(tensor::BlockQ6_K)); l += 64)
            _mm_prefetch(reinterpret_cast<const char*>(&rows[t][i][sb + 2]) + l, _MM_HINT_T0);
    }
    // int8 scales (bytes 192..207) and d (208..209) of the 16 rows, gathered as dwords;
    // d is read from the dword at 206 so no gather touches a byte past the block.
    alignas(64) float dsc[kT][16][16];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* bp = tile + sb * static_cast<int64_t>(sizeof(tensor::BlockQ6_K));
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_i32gather_epi32(gidx[t], bp + 206, 1), 16)));
      for (int q = 0; q < 4; ++q) {
        const __m512i v = _mm512_i32gather_epi32(gidx[t], bp + 192 + 4 * q, 1);
        for (int b = 0; b < 4; ++b) {
          const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * b), 24);  // sign-extended byte b
          _mm512_store_ps(dsc[t][4 * q + b], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        }
      }
    }
    for (int j = 0; j < 8; ++j) {
      const int h = j / 4, k = j % 4;  // half of the super-block, quarter within it
      __m512i W[kT][8];
      for (int t = 0; t < kT; ++t) {
        __m512i a[8];
        for (int i = 0; i < 8; ++i) {
          auto ld2 = [&](const uint8_t* p0, const uint8_t* p1) {
            return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
          };
          const auto& b0 = rows[t][i][sb];
          const auto& b1 = rows[t][i + 8][sb];
          __m512i ql = ld2(b0.ql + 64 * h + 32 * (k & 1), b1.ql + 64 * h + 32 * (k & 1));
          __m512i qh = ld2(b0.qh + 32 * h, b1.qh + 32 * h);
          if (k >> 1) ql = _mm512_srli_epi16(ql, 4);
          ql = _mm512_and_si512(ql, m4);
          qh = _mm512_and_si512(_mm512_srli_epi16(qh, 2 * k), m3);
          a[i] = _mm512_or_si512(ql, _mm512_slli_epi16(qh, 4));
        }
        transpose_prepared(a, W[t]);
      }
      const int64_t jb = sb * 8 + j;
      __m512 vsa[kT], vsb[kT];
      for (int t = 0; t < kT; ++t) {
        vsa[t] = _mm512_load_ps(dsc[t][2 * j]);
        vsb[t] = _mm512_load_ps(dsc[t][2 * j + 1]);
      }
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
        for (int t = 0; t < kT; ++t) {
          float* f = facc + (m * kT + t) * 16;
          __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_a[t]), _mm512_mul_ps(vsa[t], vdx), _mm512_loadu_ps(f));
          _mm512_storeu_ps(f, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_b[t]), _mm512_mul_ps(vsb[t], vdx), r));
        }
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    const int rows_here = imin(16, nr - 16 * t);
    if (rows_here <= 0) break;
    const auto keep = static_cast<__mmask16>((1u << rows_here) - 1);
    for (int64_t m = 0; m < M; ++m) _mm512_mask_storeu_ps(y + m * ldy + t0 + 16 * t, keep, _mm512_loadu_ps(facc + (m * kT + t) * 16));
  }
}

template <bool kQ6>
void matmul_rows_kquant(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  const int64_t n = w.n_in;
  const int64_t nsb = n / 256;
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));
  const int32_t* half_corr = nullptr;
  if constexpr (kQ6) {
    // -32 * sum of x_q over each half (16 values) of every activation block.
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
        hc[2 * (m * nb + b)] = -32 * s0;
        hc[2 * (m * nb + b) + 1] = -32 * s1;
      }
    }
    half_corr = hc;
  }
  int64_t t0 = r0;
  for (; t0 + 16 < r1; t0 += 32) {
    const int nr = static_cast<int>(imin<int64_t>(32, r1 - t0));
    if constexpr (kQ6) {
      q6k_tiles<2>(base, rb, nsb, xq, half_corr, M, n, y, ldy, t0, nr, facc);
    } else {
      q4k_tiles<2>(base, rb, nsb, xq, M, n, y, ldy, t0, nr, facc);
    }
  }
  if (t0 < r1) {
    if constexpr (kQ6) {
      q6k_tiles<1>(base, rb, nsb, xq, half_corr, M, n, y, ldy, t0, static_cast<int>(r1 - t0), facc);
    } else {
      q4k_tiles<1>(base, rb, nsb, xq, M, n, y, ldy, t0, static_cast<int>(r1 - t0), facc);
    }
  }
}

// Same numbers as impl::ref_quantize_act, bit for bit (same expressions, round to
// nearest even in both).
void quantize_act_avx512(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * 32);
    const __m512 v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
    const float amax = _mm512_reduce_max_ps(a);
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
    d[b] = db;
    s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

}  // namespace

void impl::register_avx512_vnni(KernelTable& t) {
  using tensor::DType;
  t.quantize_act = quantize_act_avx512;
  auto set = [&](DType d, MatmulRowsFn fn) {
    const int id = static_cast<int>(d);
    t.matmul_rows[id] = fn;
    t.act[id] = ActFormat::q8;
    t.row_grain[id] = 16;
  };
  set(DType::q8_0, matmul_rows_vnni<false>);
  set(DType::q4_0, matmul_rows_vnni<true>);
  set(DType::q4_k, matmul_rows_kquant<false>);
  set(DType::q6_k, matmul_rows_kquant<true>);
}

}  // namespace treespec::kernels
