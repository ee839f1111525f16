// AVX-512 VNNI kernels for the other 32-value block types: Q4_1 (d * q + m, 4-bit),
// Q5_0 (d * (q - 16), 5-bit) and Q5_1 (d * q + m, 5-bit), on the tiles of
// avx512_vnni.cpp: the nibbles exactly as Q4_0's, the fifth bit merged in from qh.
//
// Float steps: Q5_0 is Q8_0's (accumulate_block, correction -16 * sum(x_q)); Q4_1 and
// Q5_1 are Q4_K's with the block's d as the lane scale and -m as the "min"
// (accumulate_q4k: f + dot * (d dx) - (-m) (dx sum x_q), the negation exact).
//
// The fifth bits: element e = 4K + i of a block is byte i of W[K] (K < 4: low nibbles,
// K >= 4: high nibbles, as load_tile_block / load_packed_q40 produce them). H, per row,
// holds in byte i bit K the qh bit of element 4K + i (qh_to_h), so W[K] |= bit K of H,
// moved to bit 4, in one shift and one ternary-logic op.
//
// Packed, per tile of 16 rows (PackedLayout32): the scales, block b at kScale * b (the
// rows' f16 d, then for Q4_1 / Q5_1 their f16 m), aligned to 64; then per block the
// packed Q4_0 nibble vectors (256 bytes) and for Q5 the 16 rows' H (64 bytes).
#include <immintrin.h>

#include <cstring>

#include "kernels/x86/vnni_common.h"

namespace treespec::kernels {
namespace {

enum class Kind { q4_1, q5_0, q5_1 };

template <Kind K>
struct B32 {
  static constexpr bool kQ5 = K != Kind::q4_1;
  static constexpr bool kMin = K != Kind::q5_0;
  static constexpr int64_t kBlockBytes = K == Kind::q4_1 ? 20 : K == Kind::q5_0 ? 22 : 24;
  static constexpr int64_t kQh = K == Kind::q5_0 ? 2 : 4;        // offset of qh in the block
  static constexpr int64_t kQs = K == Kind::q4_1 ? 4 : kQh + 4;  // offset of the nibbles
  static constexpr int64_t kScale = kMin ? 64 : 32;              // packed scale bytes per block
  static constexpr int64_t kQuant = kQ5 ? 320 : 256;             // packed quant bytes per block
};

struct PackedLayout32 {
  int64_t nb, scales, tile;
  PackedLayout32(int64_t n_in, int64_t scale_bytes, int64_t quant_bytes)
      : nb(n_in / 32), scales((nb * scale_bytes + 63) / 64 * 64), tile(scales + nb * quant_bytes) {}
};

// Byte i of the result, bit K = bit 4K + i of qh.
inline uint32_t qh_to_h(uint32_t qh) {
  uint32_t h = 0;
  for (int i = 0; i < 4; ++i) h |= _pext_u32(qh, 0x11111111u << i) << (8 * i);
  return h;
}

inline void merge_fifth_bits(__m512i H, __m512i W[8]) {
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  for (int k = 0; k < 8; ++k) {
    __m512i h = H;
    if (k < 4) h = _mm512_slli_epi16(h, static_cast<unsigned>(4 - k));
    if (k > 4) h = _mm512_srli_epi16(h, static_cast<unsigned>(k - 4));
    W[k] = _mm512_ternarylogic_epi32(W[k], h, bit4, 0xF8);  // W | (h & 0x10)
  }
}

template <Kind K>
int64_t pack_b32(const WeightView& w, void* dst) {
  using T = B32<K>;
  const PackedLayout32 L(w.n_in, T::kScale, T::kQuant);
  const int64_t n_tiles = (w.n_out + 15) / 16;
  if (dst == nullptr) return n_tiles * L.tile;
  const int64_t rb = w.row_bytes();
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, static_cast<size_t>(n_tiles * L.tile));
  for (int64_t t = 0; t < n_tiles; ++t) {
    uint8_t* tile = out + t * L.tile;
    for (int64_t b = 0; b < L.nb; ++b) {
      uint8_t* sc = tile + b * T::kScale;
      uint8_t* q = tile + L.scales + b * T::kQuant;
      for (int r = 0; r < 16 && 16 * t + r < w.n_out; ++r) {
        const uint8_t* blk = static_cast<const uint8_t*>(w.data) + (16 * t + r) * rb + b * T::kBlockBytes;
        std::memcpy(sc + 2 * r, blk, 2);                                  // d
        if constexpr (T::kMin) std::memcpy(sc + 32 + 2 * r, blk + 2, 2);  // m
        for (int j = 0; j < 16; ++j) q[64 * (j / 4) + 4 * r + j % 4] = blk[T::kQs + j];
        if constexpr (T::kQ5) {
          uint32_t qh;
          std::memcpy(&qh, blk + T::kQh, 4);
          const uint32_t h = qh_to_h(qh);
          std::memcpy(q + 256 + 4 * r, &h, 4);
        }
      }
    }
  }
  return n_tiles * L.tile;
}

// Lane scales of block b: d and -m of the 16 rows (f16 pairs or separate regions).
template <Kind K, int kT>
inline void accumulate(const __m512i (&W)[kT][8], const __m512 (&vd)[kT], const __m512 (&vnm)[kT],
                       const impl::ActQ8* xq, const int32_t* corr, int64_t M, int64_t n, int64_t nb, int64_t b,
                       float* facc) {
  if constexpr (B32<K>::kMin) {
    accumulate_q4k<kT>(W, vd, vnm, xq, M, n, nb, b, facc);
  } else {
    accumulate_block<kT>(W, vd, xq->q, xq->d, corr, M, n, nb, b, facc);
  }
}

template <Kind K, int kT>
void b32_tiles_packed(const uint8_t* packed, const PackedLayout32& L, const impl::ActQ8* xq, const int32_t* corr,
                      int64_t M, int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  using T = B32<K>;
  const uint8_t* tile[kT];
  for (int t = 0; t < kT; ++t) tile[t] = packed + (t0 / 16 + t) * L.tile;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < L.nb; ++b) {
    __m512i W[kT][8];
    __m512 vd[kT], vnm[kT];
    for (int t = 0; t < kT; ++t) {
      const uint8_t* q = tile[t] + L.scales + b * T::kQuant;
      prefetch_ahead(q, T::kQuant);
      if ((b & 1) == 0) prefetch_ahead(tile[t] + b * T::kScale, 2 * T::kScale);
      load_packed_q40(q, W[t]);
      if constexpr (T::kQ5) merge_fifth_bits(_mm512_load_si512(q + 256), W[t]);
      const uint8_t* sc = tile[t] + b * T::kScale;
      vd[t] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
      vnm[t] = T::kMin
                   ? _mm512_xor_ps(sign, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32))))
                   : _mm512_setzero_ps();
    }
    accumulate<K, kT>(W, vd, vnm, xq, corr, M, n, L.nb, b, facc);
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

template <Kind K, int kT>
void b32_tiles(const uint8_t* base, int64_t rb, int64_t nb, const impl::ActQ8* xq, const int32_t* corr, int64_t M,
               int64_t n, float* y, int64_t ldy, int64_t t0, int nr, float* __restrict facc) {
  using T = B32<K>;
  const uint8_t* tile = base + t0 * rb;
  const uint8_t* rows[kT][16];
  for (int t = 0; t < kT; ++t) {
    for (int i = 0; i < 16; ++i) rows[t][i] = tile + imin(16 * t + i, nr - 1) * rb;
  }
  for (int64_t m = 0; m < M * kT; ++m) _mm512_storeu_ps(facc + m * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t ob = b * T::kBlockBytes;
    __m512i W[kT][8];
    __m512 vd[kT], vnm[kT];
    for (int t = 0; t < kT; ++t) {
      for (int i = 0; i < 16; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(rows[t][i] + ob + kPrefetch), _MM_HINT_T0);
      load_tile_block<true>(rows[t], ob + T::kQs - 2, W[t]);  // reads the 16 nibble bytes at + 2
      alignas(64) float d[16], nm[16];
      alignas(64) uint32_t h[16];
      for (int i = 0; i < 16; ++i) {
        const uint8_t* blk = rows[t][i] + ob;
        uint16_t v;
        std::memcpy(&v, blk, 2);
        d[i] = h2f(v);
        std::memcpy(&v, blk + 2, 2);
        nm[i] = T::kMin ? -h2f(v) : 0.0f;
        uint32_t qh = 0;
        if constexpr (T::kQ5) std::memcpy(&qh, blk + T::kQh, 4);
        h[i] = qh_to_h(qh);
      }
      if constexpr (T::kQ5) merge_fifth_bits(_mm512_load_si512(h), W[t]);
      vd[t] = _mm512_load_ps(d);
      vnm[t] = _mm512_load_ps(nm);
    }
    accumulate<K, kT>(W, vd, vnm, xq, corr, M, n, nb, b, facc);
  }
  store_tiles<kT>(facc, M, y, ldy, t0, nr);
}

template <Kind K>
void matmul_rows_b32(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
  using T = B32<K>;
  const int64_t n = w.n_in, nb = n / 32;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* pk = static_cast<const uint8_t*>(w.packed);
  float* facc = impl::thread_scratch(1, static_cast<size_t>(M * 32));
  const int32_t* corr = K == Kind::q5_0 ? block_corr(xq, M, nb, -16) : nullptr;
  const PackedLayout32 L(n, T::kScale, T::kQuant);
  auto pass = [&]<int kT>(int64_t t0, int nr) {
    if (pk != nullptr) {
      b32_tiles_packed<K, kT>(pk, L, xq, corr, M, n, y, ldy, t0, nr, facc);
    } else {
      b32_tiles<K, kT>(base, w.row_bytes(), nb, xq, corr, M, n, y, ldy, t0, nr, facc);
    }
  };
  for_each_pass(r0, r1, pass);
}

}  // namespace

void impl::register_avx512_vnni_b32(KernelTable& t) {
  auto set = [&](tensor::DType d, MatmulRowsFn fn, PackFn pack) {
    const int id = static_cast<int>(d);
    t.matmul_rows[id] = fn;
    t.pack[id] = pack;
    t.act[id] = ActFormat::q8;
    t.row_grain[id] = 16;
  };
  set(tensor::DType::q4_1, matmul_rows_b32<Kind::q4_1>, pack_b32<Kind::q4_1>);
  set(tensor::DType::q5_0, matmul_rows_b32<Kind::q5_0>, pack_b32<Kind::q5_0>);
  set(tensor::DType::q5_1, matmul_rows_b32<Kind::q5_1>, pack_b32<Kind::q5_1>);
}

}  // namespace treespec::kernels
