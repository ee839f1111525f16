// AVX-512 VNNI kernels: Q8_0, Q4_0 and IQ4_NL weights times activations quantised per
// block of 32 to int8 (impl::ActQ8), with VPDPBUSD integer dot products.
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
#include <cstring>

#include "kernels/x86/vnni_common.h"

namespace treespec::kernels {
namespace {
// (load_tile_block and accumulate_block, shared with the IQ4_XS kernel, in vnni_common.h.)

// kT tiles of 16 rows (kT = 2: 32 rows) per pass: each broadcast activation dword feeds
// kT VPDPBUSDs, which halves the broadcasts per multiply-add.
// kNl (IQ4_NL, the Q4_0 layout): each nibble indexes llama.cpp's grid, looked up as
// grid + 128 (unsigned) with the Q8_0 correction -128 * sum(x_q).
template <bool kQ4, int kT, bool kNl = false>
void vnni_tiles(const uint8_t* base, int64_t rb, int64_t nb, const int8_t* __restrict xqq, const float* __restrict xqd,
                const int32_t* __restrict corr, int64_t M, int64_t n, float* y, int64_t ldy, int64_t t0, int nr,
                float* __restrict facc) {
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
        for (int i = 0; i < 16; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(rows[t][i] + ob + kPrefetch), _MM_HINT_T0);
    }
    for (int t = 0; t < kT; ++t) {
      load_tile_block<kQ4>(rows[t], ob, W[t]);
      if constexpr (kNl) iq4nl_lookup(W[t]);
      dw[t] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(gidx[t], tile + ob, 1)));
    }
    accumulate_block<kT>(W, dw, xqq, xqd, corr, M, n, nb, b, facc);
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

// ---- Packed Q8_0 / Q4_0 (load-time repacking, kernels.h pack_weights) --------------
// The same tiles, stored the way the loop above consumes them, so a block needs no
// transpose, no sign flip and no gather, and a tile is one contiguous stream. Tile t
// (rows 16t..16t+15) occupies tile_bytes = align64(nb * 32) + nb * kQuant bytes:
//   scales: block b at 32 b: the 16 rows' f16 d;
//   quants: block b at align64(nb * 32) + kQuant b:
//     Q8_0 (kQuant 512): 8 vectors of 64 bytes, vector k lane r = bytes 4k..4k+3 of
//       row r's 32 quants, sign-flipped (q + 128, unsigned);
//     Q4_0 (kQuant 256): 4 vectors, vector k lane r = bytes 4k..4k+3 of row r's 16
//       nibble bytes (low nibbles: values 4k..4k+3, high: 16+4k..16+4k+3).
// Rows past n_out are zero (scale 0). Results equal the unpacked kernel bit for bit:
// the integer block dots and the float accumulation are the same operations.
// (PackedLayout in vnni_common.h.)
template <bool kQ4>
int64_t pack_q40_q80(const WeightView& w, void* dst) {
  const PackedLayout<kQ4> L(w.n_in);
  const int64_t n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * L.tile;
  constexpr int64_t kBlockBytes = kQ4 ? 18 : 34;
  constexpr int kQB = kQ4 ? 16 : 32;  // quant bytes per block and row
  const int64_t rb = w.row_bytes();
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t t = 0; t < n_tiles; ++t) {
    uint8_t* tile = out + t * L.tile;
    for (int64_t b = 0; b < L.nb; ++b) {
      uint8_t* sc = tile + b * 32;
      uint8_t* q = tile + L.scales + b * L.kQuant;
      for (int r = 0; r < 16; ++r) {
        const int64_t row = 16 * t + r;
        const uint8_t* blk = row < w.n_out ? src + row * rb + b * kBlockBytes : nullptr;
        sc[2 * r] = blk ? blk[0] : 0;
        sc[2 * r + 1] = blk ? blk[1] : 0;
        for (int j = 0; j < kQB; ++j) {
          const int k = j / 4;  // destination vector
          uint8_t v = blk ? blk[2 + j] : (kQ4 ? 0x88 : 0x00);
          if constexpr (!kQ4) v ^= 0x80;
          q[64 * k + 4 * r + j % 4] = v;
        }
      }
    }
  }
  return n_tiles * L.tile;
}

template <bool kQ4, int kT, bool kNl = false>
void vnni_tiles_packed(const uint8_t* packed, const PackedLayout<kQ4>& L, const int8_t* __restrict xqq,
                       const float* __restrict xqd, const int32_t* __restrict corr, int64_t M, int64_t n, float* y,
                       int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  const int64_t nb = L.nb;
  const uint8_t* sc[kT];
  const uint8_t* qs[kT];
  for (int t = 0; t < kT; ++t) {
    const uint8_t* tile = packed + (t0 / 16 + t) * L.tile;
    sc[t] = tile;
    qs[t] = tile + L.scales;
  }
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    __m512i W[kT][8];
    __m512 dw[kT];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* q = qs[t] + b * L.kQuant;
      // Q8_0 at M = 1 (the least work per byte) streams fastest on the hardware prefetchers
      // alone (Zen 4, 1 thread: 19.7 against 17.4 tok/s with these prefetches); with more
      // rows the compute fills the reorder window and only prefetches keep DRAM busy.
      if (kQ4 || M > 1) {
        prefetch_ahead(q, L.kQuant);
        if ((b & 1) == 0) prefetch_ahead(sc[t] + b * 32, 64);
      }
      if constexpr (kQ4) {
        load_packed_q40(q, W[t]);
        if constexpr (kNl) iq4nl_lookup(W[t]);
      } else {
        for (int k = 0; k < 8; ++k) W[t][k] = _mm512_load_si512(q + 64 * k);
      }
      dw[t] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc[t] + b * 32)));
    }
    accumulate_block<kT>(W, dw, xqq, xqd, corr, M, n, nb, b, facc);
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

template <bool kQ4, bool kNl = false>
void matmul_rows_vnni(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                      int64_t r0, int64_t r1) {
  const int64_t n = w.n_in;
  const int64_t nb = n / 32;
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));  // [M, 32]
  // Integer offset correction per (row, block), precomputed so the inner loop only
  // broadcasts it from memory.
  const int32_t* corr = block_corr(xq, M, nb, kQ4 && !kNl ? -8 : -128);
  const auto* pk = static_cast<const uint8_t*>(w.packed);
  const PackedLayout<kQ4> L(n);
  auto pass = [&]<int kT>(int64_t t0, int nr) {
    if (pk != nullptr) {
      vnni_tiles_packed<kQ4, kT, kNl>(pk, L, xq->q, xq->d, corr, M, n, y, ldy, t0, nr, facc);
    } else {
      vnni_tiles<kQ4, kT, kNl>(base, rb, nb, xq->q, xq->d, corr, M, n, y, ldy, t0, nr, facc);
    }
  };
  for_each_pass(r0, r1, pass);
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
  set(DType::iq4_nl, matmul_rows_vnni<true, true>);
  t.pack[static_cast<int>(DType::q8_0)] = pack_q40_q80<false>;
  t.pack[static_cast<int>(DType::q4_0)] = pack_q40_q80<true>;
  t.pack[static_cast<int>(DType::iq4_nl)] = pack_q40_q80<true>;  // BlockIQ4_NL is laid out as BlockQ4_0
  register_avx512_vnni_kquant(t);
  register_avx512_vnni_q2k_q3k(t);
  register_avx512_vnni_b32(t);
}

}  // namespace treespec::kernels
