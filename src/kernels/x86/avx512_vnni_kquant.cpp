// AVX-512 VNNI kernels for the K-quants (Q4_K, Q5_K, Q6_K) and IQ4_XS: the tile scheme of
// avx512_vnni.cpp (16 weight rows per tile, VPDPBUSD on activations quantised per block
// of 32), reading either the GGUF rows or the load-time packed copy (kernels.h
// pack_weights), with bit-identical results.
#include <cstring>
#include <type_traits>

#include "kernels/x86/vnni_common.h"

namespace treespec::kernels {
namespace {

// ---- K-quants ---------------------------------------------------------------------
// Same tile scheme; the activation blocks of 32 line up with Q4_K's sub-blocks of 32 and
// with pairs of Q6_K's sub-blocks of 16. Per super-block of 256 the 16 rows' sub-block
// scales are unpacked into lane vectors once and shared by all M activation rows.

// Transposes 16 rows of 32 prepared bytes: a[i] = [row i | row i+8] (32 bytes each).
inline void transpose_prepared(__m512i a[8], __m512i W[8]) { transpose_16x8(a, W); }

// (accumulate_q4k, shared with the Q4_1 / Q5_1 kernels, in vnni_common.h.)

// Q4_K: value = d*sc*q - dmin*m, q in 0..15. Per (row, activation block j):
// acc += float(sum q*x_q) * (d*sc_j*dx) - (dmin*m_j) * (dx * sum x_q).
// Q5_K (Blk = BlockQ5_K): the same with q in 0..31, the fifth bit from qh. Both blocks
// start with d, dmin and the 12 scale bytes at the same offsets.
template <class Blk, int kT>
void q4k_tiles(const uint8_t* base, int64_t rb, int64_t nsb, const impl::ActQ8* xq, int64_t M, int64_t n, float* y,
               int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  constexpr bool kQ5 = std::is_same_v<Blk, tensor::BlockQ5_K>;
  const uint8_t* tile = base + t0 * rb;
  const Blk* rows[kT][16];
  __m512i gidx[kT];  // byte offset of each lane's row from `tile`, for gathering scales
  for (int t = 0; t < kT; ++t) {
    alignas(64) int32_t offs[16];
    for (int i = 0; i < 16; ++i) {
      const int ri = imin(16 * t + i, nr - 1);
      rows[t][i] = reinterpret_cast<const Blk*>(tile + ri * rb);
      offs[i] = static_cast<int32_t>(ri * rb);
    }
    gidx[t] = _mm512_load_si512(offs);
  }
  const int64_t nb = n / 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(0x01);
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_rows(rows, sb, nsb);
    // Sub-block scales of the 16 rows, one lane per row: gather d/dmin and the 12 scale
    // bytes as dwords and unpack the 6-bit fields (q4k_scale_min) in vectors.
    alignas(64) float dsc[kT][8][16], dmn[kT][8][16];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* bp = tile + sb * static_cast<int64_t>(sizeof(Blk));
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
          __m512i z =
              _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
          if (j & 1) z = _mm512_srli_epi16(z, 4);
          a[i] = _mm512_and_si512(z, m4);
          if constexpr (kQ5) {  // bit j of qh[l] is bit 4 of element 32j + l
            const __m512i h =
                _mm512_inserti64x4(_mm512_castsi256_si512(
                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i][sb].qh))),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t][i + 8][sb].qh)), 1);
            a[i] = _mm512_or_si512(a[i], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, j), one), 4));
          }
        }
        transpose_prepared(a, W[t]);
      }
      const int64_t jb = sb * 8 + j;  // activation block
      __m512 vsc[kT], vmn[kT];
      for (int t = 0; t < kT; ++t) {
        vsc[t] = _mm512_load_ps(dsc[t][j]);
        vmn[t] = _mm512_load_ps(dmn[t][j]);
      }
      accumulate_q4k<kT>(W, vsc, vmn, xq, M, n, nb, jb, facc);
    }
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

// Packed Q4_K (kernels.h pack_weights): per tile of 16 rows and super-block, kQ4KPacked
// bytes, tile-major: [0, 32) the rows' f16 d, [32, 64) f16 dmin, [64, 192) the 6-bit
// scales unpacked to bytes, sub-block j at 64 + 16j (lane r = row r), [192, 320) the
// mins likewise, then the quants: byte group g (qs[32g, 32g + 32): sub-block 2g in the
// low nibbles, 2g + 1 in the high) at 320 + 512g as 8 vectors, vector k lane r = bytes
// 4k..4k+3 of row r's group. Same size as the GGUF rows plus 4 bytes per row and
// super-block; same results bit for bit (the scales go through the same float ops).
// Packed Q5_K: the same kQ4KPacked bytes followed by qh as 8 vectors (vector k lane r =
// qh bytes 4k..4k+3 of row r): kQ5KPacked bytes per tile and super-block.
// (kQ4KPacked, kQ5KPacked and the block loaders load_packed_q4k / q5k in vnni_common.h.)

template <class Blk>
int64_t pack_q4k(const WeightView& w, void* dst) {
  constexpr bool kQ5 = std::is_same_v<Blk, tensor::BlockQ5_K>;
  constexpr int64_t kBytes = kQ5 ? kQ5KPacked : kQ4KPacked;
  const int64_t nsb = w.n_in / 256, n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * nsb * kBytes;
  const int64_t rb = w.row_bytes();
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, static_cast<size_t>(n_tiles * nsb * kBytes));
  for (int64_t t = 0; t < n_tiles; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* p = out + (t * nsb + sb) * kBytes;
      for (int r = 0; r < 16 && 16 * t + r < w.n_out; ++r) {
        const auto* blk = reinterpret_cast<const Blk*>(static_cast<const uint8_t*>(w.data) + (16 * t + r) * rb) + sb;
        std::memcpy(p + 2 * r, &blk->d, 2);
        std::memcpy(p + 32 + 2 * r, &blk->dmin, 2);
        for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk->scales, p + 64 + 16 * j + r, p + 192 + 16 * j + r);
        for (int i = 0; i < 128; ++i) p[320 + 512 * (i / 32) + 64 * ((i % 32) / 4) + 4 * r + i % 4] = blk->qs[i];
        if constexpr (kQ5) {
          for (int i = 0; i < 32; ++i) p[kQ4KPacked + 64 * (i / 4) + 4 * r + i % 4] = blk->qh[i];
        }
      }
    }
  }
  return n_tiles * nsb * kBytes;
}

template <bool kQ5, int kT>
void q4k_tiles_packed(const uint8_t* packed, int64_t nsb, const impl::ActQ8* xq, int64_t M, int64_t n, float* y,
                      int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  constexpr int64_t kBytes = kQ5 ? kQ5KPacked : kQ4KPacked;
  const uint8_t* tp[kT];
  for (int t = 0; t < kT; ++t) tp[t] = packed + (t0 / 16 + t) * nsb * kBytes;
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    for_each_block8([&]<int j>() {
      __m512i W[kT][8];
      __m512 vsc[kT], vmn[kT];
      for (int t = 0; t < kT; ++t) {
        const uint8_t* p = tp[t] + sb * kBytes;
        prefetch_eighth<kBytes, j>(p);
        if constexpr (kQ5) {
          load_packed_q5k(p, j, W[t], vsc[t], vmn[t]);
        } else {
          load_packed_q4k(p, j, W[t], vsc[t], vmn[t]);
        }
      }
      accumulate_q4k<kT>(W, vsc, vmn, xq, M, n, nb, sb * 8 + j, facc);
    });
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

// (accumulate_q6k, shared with the Q3_K kernel, in vnni_common.h.)

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
    prefetch_rows(rows, sb, nsb);
    // int8 scales (bytes 192..207) and d (208..209) of the 16 rows, gathered as dwords;
    // d is read from the dword at 206 so no gather touches a byte past the block.
    alignas(64) float dsc[kT][16][16];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* bp = tile + sb * static_cast<int64_t>(sizeof(tensor::BlockQ6_K));
      const __m512 d =
          _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_i32gather_epi32(gidx[t], bp + 206, 1), 16)));
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
      accumulate_q6k<kT>(W, vsa, vsb, xq, half_corr, M, n, nb, jb, facc);
    }
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

// Packed Q6_K: per tile of 16 rows and super-block, kQ6KPacked bytes: [0, 32) the rows'
// f16 d, [32, 288) the int8 scales, sub-block s at 32 + 16s (lane r = row r), padding
// to 320, then ql as 4 groups of 32 bytes (group g at 320 + 512g) and qh as 2 groups
// (at 2368 + 512h), each as 8 vectors whose lane r holds bytes 4k..4k+3 of row r's
// group. The byte-wise unpacking of the unpacked kernel commutes with that dword
// transpose, so the values, and the results, are the same bit for bit.
// (kQ6KPacked and the block loader load_packed_q6k in vnni_common.h.)

int64_t pack_q6k(const WeightView& w, void* dst) {
  const int64_t nsb = w.n_in / 256, n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * nsb * kQ6KPacked;
  const int64_t rb = w.row_bytes();
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, static_cast<size_t>(n_tiles * nsb * kQ6KPacked));
  for (int64_t t = 0; t < n_tiles; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* p = out + (t * nsb + sb) * kQ6KPacked;
      for (int r = 0; r < 16 && 16 * t + r < w.n_out; ++r) {
        const auto* blk =
            reinterpret_cast<const tensor::BlockQ6_K*>(static_cast<const uint8_t*>(w.data) + (16 * t + r) * rb) + sb;
        std::memcpy(p + 2 * r, &blk->d, 2);
        for (int sub = 0; sub < 16; ++sub) std::memcpy(p + 32 + 16 * sub + r, &blk->scales[sub], 1);
        auto lane = [&](int64_t group_base, int i) {
          return group_base + 512 * (i / 32) + 64 * ((i % 32) / 4) + 4 * r + i % 4;
        };
        for (int i = 0; i < 128; ++i) p[lane(320, i)] = blk->ql[i];
        for (int i = 0; i < 64; ++i) p[lane(2368, i)] = blk->qh[i];
      }
    }
  }
  return n_tiles * nsb * kQ6KPacked;
}

template <int kT>
void q6k_tiles_packed(const uint8_t* packed, int64_t nsb, const impl::ActQ8* xq, const int32_t* half_corr, int64_t M,
                      int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tp[kT];
  for (int t = 0; t < kT; ++t) tp[t] = packed + (t0 / 16 + t) * nsb * kQ6KPacked;
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    for_each_block8([&]<int j>() {
      __m512i W[kT][8];
      __m512 vsa[kT], vsb[kT];
      for (int t = 0; t < kT; ++t) {
        const uint8_t* p = tp[t] + sb * kQ6KPacked;
        prefetch_eighth<kQ6KPacked, j>(p);
        load_packed_q6k(p, j, W[t], vsa[t], vsb[t]);
      }
      accumulate_q6k<kT>(W, vsa, vsb, xq, half_corr, M, n, nb, sb * 8 + j, facc);
    });
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

// ---- IQ4_XS -------------------------------------------------------------------------
// 8 sub-blocks of 32, each an IQ4_NL block (nibbles -> llama.cpp's grid) with its own
// scale d * (ls - 32): per activation block (= sub-block) the Q8_0 float step
// (accumulate_block) with those lane scales, the grid lookup and the -128 * sum(x_q)
// correction. Packed, kIQ4XSPacked bytes per tile of 16 rows and super-block: [0, 32)
// the rows' f16 d, [32, 160) ls (0..63) of sub-block s at 32 + 16 s (lane r = row r),
// then sub-block s's quants at 192 + 256 s in the packed Q4_0 block layout (4 vectors,
// vector k lane r = bytes 4k..4k+3 of row r's qs[16 s, 16 s + 16)).

int iq4xs_ls(const tensor::BlockIQ4_XS& b, int s) {
  return ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b.scales_h >> (2 * s)) & 3) << 4);
}

int64_t pack_iq4xs(const WeightView& w, void* dst) {
  const int64_t nsb = w.n_in / 256, n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * nsb * kIQ4XSPacked;
  const int64_t rb = w.row_bytes();
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, static_cast<size_t>(n_tiles * nsb * kIQ4XSPacked));
  for (int64_t t = 0; t < n_tiles; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* p = out + (t * nsb + sb) * kIQ4XSPacked;
      for (int r = 0; r < 16 && 16 * t + r < w.n_out; ++r) {
        const auto* blk =
            reinterpret_cast<const tensor::BlockIQ4_XS*>(static_cast<const uint8_t*>(w.data) + (16 * t + r) * rb) + sb;
        std::memcpy(p + 2 * r, &blk->d, 2);
        for (int sub = 0; sub < 8; ++sub) {
          p[32 + 16 * sub + r] = static_cast<uint8_t>(iq4xs_ls(*blk, sub));
          for (int j = 0; j < 16; ++j) p[192 + 256 * sub + 64 * (j / 4) + 4 * r + j % 4] = blk->qs[16 * sub + j];
        }
      }
    }
  }
  return n_tiles * nsb * kIQ4XSPacked;
}

// Lane scales d * (ls - 32) of 16 rows (the same two float operations as the unpacked
// kernel's scalar ones).
inline __m512 iq4xs_scales(__m512 d, const uint8_t* ls16) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(ls16)));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(v, _mm512_set1_epi32(32))));
}

template <int kT>
void iq4xs_tiles_packed(const uint8_t* packed, int64_t nsb, const impl::ActQ8* xq, const int32_t* corr, int64_t M,
                        int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tp[kT];
  for (int t = 0; t < kT; ++t) tp[t] = packed + (t0 / 16 + t) * nsb * kIQ4XSPacked;
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 d[kT];
    for (int t = 0; t < kT; ++t) {
      d[t] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(tp[t] + sb * kIQ4XSPacked)));
    }
    for (int sub = 0; sub < 8; ++sub) {
      __m512i W[kT][8];
      __m512 dl[kT];
      for (int t = 0; t < kT; ++t) {
        const uint8_t* p = tp[t] + sb * kIQ4XSPacked;
        const uint8_t* q = p + 192 + 256 * sub;
        if (sub == 0) prefetch_ahead(p, 192);
        prefetch_ahead(q, 256);
        load_packed_q40(q, W[t]);
        iq4nl_lookup(W[t]);
        dl[t] = iq4xs_scales(d[t], p + 32 + 16 * sub);
      }
      accumulate_block<kT>(W, dl, xq->q, xq->d, corr, M, n, nb, sb * 8 + sub, facc);
    }
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

template <int kT>
void iq4xs_tiles(const uint8_t* base, int64_t rb, int64_t nsb, const impl::ActQ8* xq, const int32_t* corr, int64_t M,
                 int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tile = base + t0 * rb;
  const tensor::BlockIQ4_XS* rows[kT][16];
  tile_rows(tile, rb, nr, rows);
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_rows(rows, sb, nsb);
    alignas(64) float dl[kT][8][16];
    for (int t = 0; t < kT; ++t) {
      for (int i = 0; i < 16; ++i) {
        const float d = h2f(rows[t][i][sb].d);
        for (int sub = 0; sub < 8; ++sub) dl[t][sub][i] = d * static_cast<float>(iq4xs_ls(rows[t][i][sb], sub) - 32);
      }
    }
    for (int sub = 0; sub < 8; ++sub) {
      __m512i W[kT][8];
      __m512 dls[kT];
      for (int t = 0; t < kT; ++t) {
        const uint8_t* ptr[16];  // load_tile_block reads 16 bytes at ptr + 2 (a Q4_0 block's quants)
        for (int i = 0; i < 16; ++i) ptr[i] = rows[t][i][sb].qs + 16 * sub - 2;
        load_tile_block<true>(ptr, 0, W[t]);
        iq4nl_lookup(W[t]);
        dls[t] = _mm512_load_ps(dl[t][sub]);
      }
      accumulate_block<kT>(W, dls, xq->q, xq->d, corr, M, n, nb, sb * 8 + sub, facc);
    }
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

void matmul_rows_iq4xs(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
  const int64_t n = w.n_in, nsb = n / 256;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* pk = static_cast<const uint8_t*>(w.packed);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));
  const int32_t* corr = block_corr(xq, M, n / 32, -128);
  auto pass = [&]<int kT>(int64_t t0, int nr) {
    if (pk != nullptr) {
      iq4xs_tiles_packed<kT>(pk, nsb, xq, corr, M, n, y, ldy, t0, nr, facc);
    } else {
      iq4xs_tiles<kT>(base, w.row_bytes(), nsb, xq, corr, M, n, y, ldy, t0, nr, facc);
    }
  };
  for_each_pass(r0, r1, pass);
}

template <tensor::DType kType>
void matmul_rows_kquant(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  constexpr bool kQ6 = kType == tensor::DType::q6_k, kQ5 = kType == tensor::DType::q5_k;
  const int64_t n = w.n_in;
  const int64_t nsb = n / 256;
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));
  const int32_t* half_corr = kQ6 ? half_corr_sums(xq, M, n, -32) : nullptr;
  const auto* pk = static_cast<const uint8_t*>(w.packed);
  using Blk = std::conditional_t<kQ5, tensor::BlockQ5_K, tensor::BlockQ4_K>;
  auto pass = [&]<int kT>(int64_t t0, int nr) {
    if constexpr (kQ6) {
      if (pk != nullptr) {
        q6k_tiles_packed<kT>(pk, nsb, xq, half_corr, M, n, y, ldy, t0, nr, facc);
      } else {
        q6k_tiles<kT>(base, rb, nsb, xq, half_corr, M, n, y, ldy, t0, nr, facc);
      }
    } else {
      if (pk != nullptr) {
        q4k_tiles_packed<kQ5, kT>(pk, nsb, xq, M, n, y, ldy, t0, nr, facc);
      } else {
        q4k_tiles<Blk, kT>(base, rb, nsb, xq, M, n, y, ldy, t0, nr, facc);
      }
    }
  };
  for_each_pass(r0, r1, pass);
}

}  // namespace

void impl::register_avx512_vnni_kquant(KernelTable& t) {
  using tensor::DType;
  const int q4k = static_cast<int>(DType::q4_k), q5k = static_cast<int>(DType::q5_k),
            q6k = static_cast<int>(DType::q6_k);
  t.matmul_rows[q4k] = matmul_rows_kquant<DType::q4_k>;
  t.matmul_rows[q5k] = matmul_rows_kquant<DType::q5_k>;
  t.matmul_rows[q6k] = matmul_rows_kquant<DType::q6_k>;
  t.pack[q4k] = pack_q4k<tensor::BlockQ4_K>;
  t.pack[q5k] = pack_q4k<tensor::BlockQ5_K>;
  t.pack[q6k] = pack_q6k;
  const int iq4xs = static_cast<int>(DType::iq4_xs);
  t.matmul_rows[iq4xs] = matmul_rows_iq4xs;
  t.pack[iq4xs] = pack_iq4xs;
  for (int id : {q4k, q5k, q6k, iq4xs}) {
    t.act[id] = ActFormat::q8;
    t.row_grain[id] = 16;
  }
}

}  // namespace treespec::kernels
