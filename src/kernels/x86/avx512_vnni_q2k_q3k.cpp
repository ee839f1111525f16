// AVX-512 VNNI kernels for Q2_K and Q3_K, the K-quants with sub-blocks of 16 and 2-bit
// groups in qs.
//
// Q3_K: Q6_K's scheme (an activation block of 32 covers two
// sub-blocks of 16, each with its own scale), on 3-bit values q in 0..7 (value q - 4):
// the integer dots start at -4 * (sum of that half's x_q) and go through accumulate_q6k.
//
// Element e = 128h + 32jj + l of a super-block: bits 2jj..2jj+1 of qs[32h + l] and bit
// 4h + jj of hmask[l]; activation block j = 4h + jj is elements 32j .. 32j + 31, so its
// 32 values come from one 32-byte group of qs and from hmask.
//
// Packed, kQ3KPacked bytes per tile of 16 rows and super-block: [0, 32) the rows' f16 d,
// [32, 288) the 16 signed scales (stored - 32) of sub-block s at 32 + 16s (lane r = row
// r), padding to 320, then qs as 2 groups of 8 vectors (group h at 320 + 512h) and hmask
// as 8 vectors (at 1344), vector k lane r = bytes 4k..4k+3 of row r's 32 bytes.
#include <cstring>

#include "kernels/x86/vnni_common.h"

namespace treespec::kernels {
namespace {

constexpr int64_t kQ3KPacked = 320 + 1024 + 512;

// [row p0's 32 bytes | row p1's 32 bytes], the input of transpose_16x8.
inline __m512i load_rows_32(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
}

// 3-bit values of activation block j from the 2-bit vectors qv (already the right group)
// and the hmask vectors hv: W[k] = ((qv >> 2jj) & 3) | (bit (4h + jj) of hv, at bit 2).
inline void q3k_values(const __m512i qv[8], const __m512i hv[8], int j, __m512i W[8]) {
  const int h = j / 4, jj = j % 4, b = 4 * h + jj;
  const __m512i m3 = _mm512_set1_epi8(0x03), bit2 = _mm512_set1_epi8(0x04);
  for (int k = 0; k < 8; ++k) {
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(qv[k], static_cast<unsigned>(2 * jj)), m3);
    __m512i hb = hv[k];
    if (b > 2) hb = _mm512_srli_epi16(hb, static_cast<unsigned>(b - 2));  // 16-bit shifts: the bits
    if (b < 2) hb = _mm512_slli_epi16(hb, static_cast<unsigned>(2 - b));  // crossing bytes are masked
    W[k] = _mm512_ternarylogic_epi32(lo, hb, bit2, 0xF8);                 // lo | (hb & 4)
  }
}

int64_t pack_q3k(const WeightView& w, void* dst) {
  const int64_t nsb = w.n_in / 256, n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * nsb * kQ3KPacked;
  const int64_t rb = w.row_bytes();
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, static_cast<size_t>(n_tiles * nsb * kQ3KPacked));
  for (int64_t t = 0; t < n_tiles; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* p = out + (t * nsb + sb) * kQ3KPacked;
      for (int r = 0; r < 16 && 16 * t + r < w.n_out; ++r) {
        const auto* blk =
            reinterpret_cast<const tensor::BlockQ3_K*>(static_cast<const uint8_t*>(w.data) + (16 * t + r) * rb) + sb;
        std::memcpy(p + 2 * r, &blk->d, 2);
        for (int s = 0; s < 16; ++s)
          p[32 + 16 * s + r] = static_cast<uint8_t>(static_cast<int8_t>(tensor::q3_k_scale(s, blk->scales) - 32));
        auto lane = [&](int64_t base, int i) { return base + 64 * (i / 4) + 4 * r + i % 4; };
        for (int i = 0; i < 64; ++i) p[lane(320 + 512 * (i / 32), i % 32)] = blk->qs[i];
        for (int i = 0; i < 32; ++i) p[lane(1344, i)] = blk->hmask[i];
      }
    }
  }
  return n_tiles * nsb * kQ3KPacked;
}

template <int kT>
void q3k_tiles_packed(const uint8_t* packed, int64_t nsb, const impl::ActQ8* xq, const int32_t* half_corr, int64_t M,
                      int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tp[kT];
  for (int t = 0; t < kT; ++t) tp[t] = packed + (t0 / 16 + t) * nsb * kQ3KPacked;
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 d[kT];
    __m512i hv[kT][8];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* p = tp[t] + sb * kQ3KPacked;
      prefetch_ahead(p, kQ3KPacked);
      d[t] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
      for (int k = 0; k < 8; ++k) hv[t][k] = _mm512_load_si512(p + 1344 + 64 * k);
    }
    for_each_block8([&]<int j>() {
      __m512i W[kT][8];
      __m512 vsa[kT], vsb[kT];
      for (int t = 0; t < kT; ++t) {
        const uint8_t* p = tp[t] + sb * kQ3KPacked;
        __m512i qv[8];
        for (int k = 0; k < 8; ++k) qv[k] = _mm512_load_si512(p + 320 + 512 * (j / 4) + 64 * k);
        q3k_values(qv, hv[t], j, W[t]);
        int8_pair_scales(d[t], p + 32, j, vsa[t], vsb[t]);
      }
      accumulate_q6k<kT>(W, vsa, vsb, xq, half_corr, M, n, nb, sb * 8 + j, facc);
    });
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

// The GGUF rows directly: the same values, transposed in registers, and the same scales
// (one float product each, computed in scalar code).
template <int kT>
void q3k_tiles(const uint8_t* base, int64_t rb, int64_t nsb, const impl::ActQ8* xq, const int32_t* half_corr, int64_t M,
               int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tile = base + t0 * rb;
  const tensor::BlockQ3_K* rows[kT][16];
  tile_rows(tile, rb, nr, rows);
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_rows(rows, sb, nsb);
    alignas(64) float dsc[kT][16][16];
    __m512i hv[kT][8], qv[kT][2][8];
    for (int t = 0; t < kT; ++t) {
      for (int i = 0; i < 16; ++i) {
        const auto& b = rows[t][i][sb];
        const float d = h2f(b.d);
        for (int s = 0; s < 16; ++s) dsc[t][s][i] = d * static_cast<float>(tensor::q3_k_scale(s, b.scales) - 32);
      }
      __m512i a[8];
      for (int i = 0; i < 8; ++i) a[i] = load_rows_32(rows[t][i][sb].hmask, rows[t][i + 8][sb].hmask);
      transpose_16x8(a, hv[t]);
      for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < 8; ++i) a[i] = load_rows_32(rows[t][i][sb].qs + 32 * h, rows[t][i + 8][sb].qs + 32 * h);
        transpose_16x8(a, qv[t][h]);
      }
    }
    for (int j = 0; j < 8; ++j) {
      __m512i W[kT][8];
      __m512 vsa[kT], vsb[kT];
      for (int t = 0; t < kT; ++t) {
        q3k_values(qv[t][j / 4], hv[t], j, W[t]);
        vsa[t] = _mm512_load_ps(dsc[t][2 * j]);
        vsb[t] = _mm512_load_ps(dsc[t][2 * j + 1]);
      }
      accumulate_q6k<kT>(W, vsa, vsb, xq, half_corr, M, n, nb, sb * 8 + j, facc);
    }
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

void matmul_rows_q3k(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
  const int64_t n = w.n_in, nsb = n / 256;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* pk = static_cast<const uint8_t*>(w.packed);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));
  const int32_t* half_corr = half_corr_sums(xq, M, n, -4);
  auto pass = [&]<int kT>(int64_t t0, int nr) {
    if (pk != nullptr) {
      q3k_tiles_packed<kT>(pk, nsb, xq, half_corr, M, n, y, ldy, t0, nr, facc);
    } else {
      q3k_tiles<kT>(base, w.row_bytes(), nsb, xq, half_corr, M, n, y, ldy, t0, nr, facc);
    }
  };
  for_each_pass(r0, r1, pass);
}

// ---- Q2_K ---------------------------------------------------------------------------
// value = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in 0..3, sub-blocks of 16;
// the 2-bit groups of qs exactly as Q3_K's low bits. Per activation block j (sub-blocks
// 2j, 2j + 1) and activation row: f += da (d sc_a dx) + db (d sc_b dx) - (dmin m_a)(dx
// sum_a x_q) - (dmin m_b)(dx sum_b x_q), one shared sequence of float operations.
// Packed, kQ2KPacked bytes per tile of 16 rows and super-block (the GGUF rows' size):
// [0, 32) the rows' f16 d, [32, 64) f16 dmin, [64, 320) scales[s] at 64 + 16s (lane r =
// row r), then qs as 2 groups of 8 vectors at 320 + 512h.

constexpr int64_t kQ2KPacked = 320 + 1024;

template <int kT>
inline void accumulate_q2k(const __m512i (&W)[kT][8], const __m512 (&vsa)[kT], const __m512 (&vsb)[kT],
                           const __m512 (&vma)[kT], const __m512 (&vmb)[kT], const impl::ActQ8* xq,
                           const int32_t* half_sums, int64_t M, int64_t n, int64_t nb, int64_t jb,
                           float* __restrict facc) {
  for (int64_t m = 0; m < M; ++m) {
    const auto* xb = reinterpret_cast<const int32_t*>(xq->q + m * n + jb * 32);
    const int64_t ib = m * nb + jb;
    const float dx = xq->d[ib];
    const __m512 vdx = _mm512_set1_ps(dx);
    const __m512 vha = _mm512_set1_ps(dx * static_cast<float>(half_sums[2 * ib]));
    const __m512 vhb = _mm512_set1_ps(dx * static_cast<float>(half_sums[2 * ib + 1]));
    __m512i acc_a[kT], acc_b[kT];
    for (int t = 0; t < kT; ++t) acc_a[t] = acc_b[t] = _mm512_setzero_si512();
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
      r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_b[t]), _mm512_mul_ps(vsb[t], vdx), r);
      r = _mm512_fnmadd_ps(vma[t], vha, r);
      _mm512_storeu_ps(f, _mm512_fnmadd_ps(vmb[t], vhb, r));
    }
  }
}

// 2-bit values of activation block j from the group vectors qv: (qv >> 2jj) & 3.
inline void q2k_values(const __m512i qv[8], int j, __m512i W[8]) {
  const __m512i m3 = _mm512_set1_epi8(0x03);
  for (int k = 0; k < 8; ++k) W[k] = _mm512_and_si512(_mm512_srli_epi16(qv[k], static_cast<unsigned>(2 * (j % 4))), m3);
}

int64_t pack_q2k(const WeightView& w, void* dst) {
  const int64_t nsb = w.n_in / 256, n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * nsb * kQ2KPacked;
  const int64_t rb = w.row_bytes();
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, static_cast<size_t>(n_tiles * nsb * kQ2KPacked));
  for (int64_t t = 0; t < n_tiles; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* p = out + (t * nsb + sb) * kQ2KPacked;
      for (int r = 0; r < 16 && 16 * t + r < w.n_out; ++r) {
        const auto* blk =
            reinterpret_cast<const tensor::BlockQ2_K*>(static_cast<const uint8_t*>(w.data) + (16 * t + r) * rb) + sb;
        std::memcpy(p + 2 * r, &blk->d, 2);
        std::memcpy(p + 32 + 2 * r, &blk->dmin, 2);
        for (int s = 0; s < 16; ++s) p[64 + 16 * s + r] = blk->scales[s];
        for (int i = 0; i < 64; ++i) p[320 + 512 * (i / 32) + 64 * ((i % 32) / 4) + 4 * r + i % 4] = blk->qs[i];
      }
    }
  }
  return n_tiles * nsb * kQ2KPacked;
}

// Lane scales of sub-block s from the packed scale bytes: d * (sc & 15), dmin * (sc >> 4).
inline void q2k_scales(__m512 d, __m512 dmin, const uint8_t* s16, __m512& vs, __m512& vm) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(s16)));
  vs = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15))));
  vm = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)));
}

template <int kT>
void q2k_tiles_packed(const uint8_t* packed, int64_t nsb, const impl::ActQ8* xq, const int32_t* half_sums, int64_t M,
                      int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tp[kT];
  for (int t = 0; t < kT; ++t) tp[t] = packed + (t0 / 16 + t) * nsb * kQ2KPacked;
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 d[kT], dmin[kT];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* p = tp[t] + sb * kQ2KPacked;
      prefetch_ahead(p, kQ2KPacked);
      d[t] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
      dmin[t] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
    }
    for_each_block8([&]<int j>() {
      __m512i W[kT][8];
      __m512 vsa[kT], vsb[kT], vma[kT], vmb[kT];
      for (int t = 0; t < kT; ++t) {
        const uint8_t* p = tp[t] + sb * kQ2KPacked;
        __m512i qv[8];
        for (int k = 0; k < 8; ++k) qv[k] = _mm512_load_si512(p + 320 + 512 * (j / 4) + 64 * k);
        q2k_values(qv, j, W[t]);
        q2k_scales(d[t], dmin[t], p + 64 + 16 * (2 * j), vsa[t], vma[t]);
        q2k_scales(d[t], dmin[t], p + 64 + 16 * (2 * j + 1), vsb[t], vmb[t]);
      }
      accumulate_q2k<kT>(W, vsa, vsb, vma, vmb, xq, half_sums, M, n, nb, sb * 8 + j, facc);
    });
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

template <int kT>
void q2k_tiles(const uint8_t* base, int64_t rb, int64_t nsb, const impl::ActQ8* xq, const int32_t* half_sums, int64_t M,
               int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const uint8_t* tile = base + t0 * rb;
  const tensor::BlockQ2_K* rows[kT][16];
  tile_rows(tile, rb, nr, rows);
  const int64_t nb = n / 32;
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t sb = 0; sb < nsb; ++sb) {
    prefetch_rows(rows, sb, nsb);
    alignas(64) float dsc[kT][16][16], dmn[kT][16][16];
    __m512i qv[kT][2][8];
    for (int t = 0; t < kT; ++t) {
      for (int i = 0; i < 16; ++i) {
        const auto& b = rows[t][i][sb];
        const float d = h2f(b.d), dmin = h2f(b.dmin);
        for (int s = 0; s < 16; ++s) {
          dsc[t][s][i] = d * static_cast<float>(b.scales[s] & 15);
          dmn[t][s][i] = dmin * static_cast<float>(b.scales[s] >> 4);
        }
      }
      for (int h = 0; h < 2; ++h) {
        __m512i a[8];
        for (int i = 0; i < 8; ++i) a[i] = load_rows_32(rows[t][i][sb].qs + 32 * h, rows[t][i + 8][sb].qs + 32 * h);
        transpose_16x8(a, qv[t][h]);
      }
    }
    for (int j = 0; j < 8; ++j) {
      __m512i W[kT][8];
      __m512 vsa[kT], vsb[kT], vma[kT], vmb[kT];
      for (int t = 0; t < kT; ++t) {
        q2k_values(qv[t][j / 4], j, W[t]);
        vsa[t] = _mm512_load_ps(dsc[t][2 * j]);
        vsb[t] = _mm512_load_ps(dsc[t][2 * j + 1]);
        vma[t] = _mm512_load_ps(dmn[t][2 * j]);
        vmb[t] = _mm512_load_ps(dmn[t][2 * j + 1]);
      }
      accumulate_q2k<kT>(W, vsa, vsb, vma, vmb, xq, half_sums, M, n, nb, sb * 8 + j, facc);
    }
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

void matmul_rows_q2k(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
  const int64_t n = w.n_in, nsb = n / 256;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* pk = static_cast<const uint8_t*>(w.packed);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));
  const int32_t* half_sums = half_corr_sums(xq, M, n, 1);
  auto pass = [&]<int kT>(int64_t t0, int nr) {
    if (pk != nullptr) {
      q2k_tiles_packed<kT>(pk, nsb, xq, half_sums, M, n, y, ldy, t0, nr, facc);
    } else {
      q2k_tiles<kT>(base, w.row_bytes(), nsb, xq, half_sums, M, n, y, ldy, t0, nr, facc);
    }
  };
  for_each_pass(r0, r1, pass);
}

}  // namespace

void impl::register_avx512_vnni_q2k_q3k(KernelTable& t) {
  auto set = [&](tensor::DType d, MatmulRowsFn fn, PackFn pack) {
    const int id = static_cast<int>(d);
    t.matmul_rows[id] = fn;
    t.pack[id] = pack;
    t.act[id] = ActFormat::q8;
    t.row_grain[id] = 16;
  };
  set(tensor::DType::q2_k, matmul_rows_q2k, pack_q2k);
  set(tensor::DType::q3_k, matmul_rows_q3k, pack_q3k);
}

}  // namespace treespec::kernels
