// AVX2 kernels with rows in lanes: the types with blocks of 32 values and one f16 scale
// (Q8_0, Q4_0, IQ4_NL) here, Q4_K / Q5_K, Q6_K and IQ4_XS further down. 8 weight rows per tile,
// lane r of every vector is row r, so each activation dword is broadcast once for 8 rows
// and a block's float step (one conversion and one FMA) serves 8 rows. They replace the
// row-at-a-time kernels of avx2_int8.cpp, whose per-row float step and scale broadcast
// made tree rows cost 6-7x a one-row step at 16 rows (docs/kernels.md, "AVX2: rows in
// lanes").
//
// Integer part per (activation row m, block b, tile): for k = 0..7, value vector k holds
// values 4k..4k+3 of the block for each of the 8 rows. Signed values (Q8_0, IQ4_NL's grid):
// VPSIGNB moves their signs onto the broadcast activation dword k and VPMADDUBSW multiplies
// with their magnitudes (|w| <= 128, |x| <= 127: a pair is at most 32512, no saturation);
// unsigned ones (Q4_0's nibbles, 0..15) multiply the dword directly, and the block's
// -8 * sum(x_q) is added at the end. VPMADDWD by 1 gives lane r = the exact sum of the 4
// products of row r; the 8 are added in two int32 chains (small unsigned values first add
// up to 8 VPMADDUBSW results as int16 and need one VPMADDWD: block_dot). Lane r then holds
// the block's exact integer dot for row r.
// Float part: acc[m][r] = fma(float(dot), d_w[r] * d_x[m], acc[m][r]) over blocks in order
// (one accumulator per (m, r), kept in scratch memory; in registers in the M = 1
// instance). Every (m, r) runs the same operations whatever M is, wherever the row sits,
// and whichever thread takes its tile: batch invariant.
//
// Load-time repacking (kernels.h pack_weights): tile t (rows 8t..8t+7) is
//   scales: align32(nb * 16) bytes, block b at 16 b: the 8 rows' f16 d;
//   quants: nb * 8 * kQB bytes, block b at 8 kQB b: kQB / 4 vectors, vector k lane r =
//           bytes 4k..4k+3 of row r's kQB quant bytes as stored (Q8_0: 32 signed values;
//           Q4_0 / IQ4_NL: 16 nibble bytes, low nibbles values 4k..4k+3, high 16+4k..);
// rows past n_out are zero. The GGUF size (8 rows x the block's bytes). Without a packed
// copy (a view never packed, or one packed for another level's kernels) the same kernel
// transposes each block of 8 rows in registers: the same operations, the same bits.
#include "kernels/x86/simd.h"

namespace treespec::kernels {
namespace {

constexpr int64_t kLanes = 8;  // rows per tile
// Prefetch distance in a tile's quant stream (one tile is one contiguous stream): 1-4 KiB
// measured alike on a Zen 3 VM (within its 10-15% noise), none clearly slower.
constexpr int64_t kPrefetch = 2048;
// The K-quant kernel does more work per byte; 4-8 KiB ahead streamed Q4_K at M = 1 about
// 1.25x faster than 2 KiB (same VM, interleaved).
constexpr int64_t kPrefetchKQ = 4096;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The activation blocks block-major, [block][row][32], in thread scratch slot 0: read in
// place, the M rows of one block lie n bytes apart, and when n is a multiple of 4 KiB (or
// 2 KiB) every row's block maps to the same L1 set, so 16 rows and more miss L1 on every
// block. M = 1 reads the row in place (the same layout).
inline const int8_t* blocks_by_row(const impl::ActQ8* xq, int64_t M, int64_t n) {
  if (M == 1) return xq->q;
  const int64_t nb = n / 32;
  auto* t = reinterpret_cast<int8_t*>(impl::thread_scratch(0, static_cast<size_t>((M * n + 3) / 4)));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t m = 0; m < M; ++m)
      _mm256_store_si256(reinterpret_cast<__m256i*>(t + (b * M + m) * 32), load256(xq->q + m * n + b * 32));
  return t;
}

// The integer dot of one activation block with 8 rows: lane r = sum over k of
// VPMADDWD(VPMADDUBSW(U[k], x(k)), w(k)) (w: int16 multipliers, 1 or per-lane scales, equal
// within a group). kG consecutive VPMADDUBSW results are first added as int16, which is
// exact when kG pair sums fit: with |x_q| <= 127 a pair of values up to v is at most
// 2 * v * 127, so 4-bit values (v = 15) allow 8, 5-bit 4 and 6-bit 2 (at most 31,496, 32,004);
// 8-bit magnitudes allow 1. Integers, so the result is the same for every kG: only the count
// of VPMADDWD (the multiply ports' second instruction per 32 products) changes.
template <int kG, class FX, class FW>
inline __m256i block_dot(const __m256i (&U)[8], FX x, FW w) {
  static_assert(kG == 1 || kG == 2 || kG == 4 || kG == 8);
  __m256i acc[2];
  for (int g = 0; g < 8 / kG; ++g) {
    const int k0 = g * kG;
    __m256i s = _mm256_maddubs_epi16(U[k0], x(k0));
    if constexpr (kG > 1) {
      __m256i t = _mm256_maddubs_epi16(U[k0 + 1], x(k0 + 1));
      for (int i = 2; i < kG; i += 2) {
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(U[k0 + i], x(k0 + i)));
        t = _mm256_add_epi16(t, _mm256_maddubs_epi16(U[k0 + i + 1], x(k0 + i + 1)));
      }
      s = _mm256_add_epi16(s, t);
    }
    const __m256i p = _mm256_madd_epi16(s, w(k0));
    acc[g & 1] = g < 2 ? p : _mm256_add_epi32(acc[g & 1], p);
  }
  return kG == 8 ? acc[0] : _mm256_add_epi32(acc[0], acc[1]);
}

// The weight types: GGUF block bytes, quant bytes per row and block, and the 8 value
// vectors of a packed block (prepare): signed kinds give magnitudes A and the signed
// values (in `vals`, or the packed bytes themselves: kSignsInPlace); unsigned kinds give
// the values in A and a per-block offset times sum(x_q).
struct KQ80 {
  static constexpr int64_t kBlk = sizeof(tensor::BlockQ8_0), kQB = 32;
  static constexpr bool kSigned = true, kSignsInPlace = true;
  static constexpr int32_t kOffset = 0;
  static constexpr int kGroup = 1;  // magnitudes up to 128
  static void prepare(const uint8_t* q, __m256i (&A)[8], int8_t*) {
    for (int k = 0; k < 8; ++k) A[k] = _mm256_abs_epi8(load256(q + 32 * k));  // |-128| = 128 as unsigned
  }
};
// Nibble kinds: packed vector j lane r holds row r's bytes 4j..4j+3: low nibbles are values
// 4j..4j+3 (value vector j), high nibbles 16+4j.. (value vector 4 + j).
inline void nibbles(const uint8_t* q, __m256i (&V)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m256i v = load256(q + 32 * j);
    V[j] = _mm256_and_si256(v, m4);
    V[4 + j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}
struct KQ40 {
  static constexpr int64_t kBlk = sizeof(tensor::BlockQ4_0), kQB = 16;
  static constexpr bool kSigned = false, kSignsInPlace = false;
  static constexpr int32_t kOffset = -8;  // value = nibble - 8
  static constexpr int kGroup = 8;        // nibbles, 0..15
  static void prepare(const uint8_t* q, __m256i (&A)[8], int8_t*) { nibbles(q, A); }
};
struct KIQ4NL {
  static constexpr int64_t kBlk = sizeof(tensor::BlockIQ4_NL), kQB = 16;
  static constexpr bool kSigned = true, kSignsInPlace = false;
  static constexpr int32_t kOffset = 0;
  static constexpr int kGroup = 1;  // grid magnitudes up to 127
  static void prepare(const uint8_t* q, __m256i (&A)[8], int8_t* vals) {
    const __m256i grid =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tensor::kIq4nlValues)));
    nibbles(q, A);
    for (int k = 0; k < 8; ++k) {
      const __m256i v = _mm256_shuffle_epi8(grid, A[k]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(vals + 32 * k), v);
      A[k] = _mm256_abs_epi8(v);
    }
  }
};

template <class K>
struct Layout {
  static constexpr int64_t kQuant = kLanes * K::kQB;  // packed quant bytes per tile and block
  int64_t nb, scales, tile;
  explicit Layout(int64_t n_in) : nb(n_in / 32), scales((nb * 16 + 31) / 32 * 32), tile(scales + nb * kQuant) {}
};

template <class K>
int64_t pack_lanes(const WeightView& w, void* dst) {
  const Layout<K> L(w.n_in);
  const int64_t n_tiles = (w.n_out + kLanes - 1) / kLanes;
  if (dst == nullptr) return n_tiles * L.tile;
  const int64_t rb = w.row_bytes();
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t t = 0; t < n_tiles; ++t) {
    uint8_t* tile = out + t * L.tile;
    for (int64_t i = L.nb * 16; i < L.scales; ++i) tile[i] = 0;
    for (int64_t b = 0; b < L.nb; ++b) {
      uint8_t* sc = tile + b * 16;
      uint8_t* q = tile + L.scales + b * L.kQuant;
      for (int64_t r = 0; r < kLanes; ++r) {
        const int64_t row = kLanes * t + r;
        const uint8_t* blk = row < w.n_out ? src + row * rb + b * K::kBlk : nullptr;
        sc[2 * r] = blk ? blk[0] : 0;
        sc[2 * r + 1] = blk ? blk[1] : 0;
        for (int64_t j = 0; j < K::kQB; ++j) q[32 * (j / 4) + 4 * r + j % 4] = blk ? blk[2 + j] : 0;
      }
    }
  }
  return n_tiles * L.tile;
}

// 4 x 8 dwords -> 8 rows x 4: each X[i] holds rows i (low 128 bits) and i + 4 (high); out
// vector j = dword j of every row.
inline void transpose_4x8(const __m256i (&X)[4], __m256i* out) {
  const __m256i t0 = _mm256_unpacklo_epi32(X[0], X[1]), t1 = _mm256_unpackhi_epi32(X[0], X[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(X[2], X[3]), t3 = _mm256_unpackhi_epi32(X[2], X[3]);
  const __m256i p0 = _mm256_unpacklo_epi64(t0, t2), p1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i p2 = _mm256_unpacklo_epi64(t1, t3), p3 = _mm256_unpackhi_epi64(t1, t3);
  // p_j: rows 0..3 dword j (low half), rows 4..7 dword j (high half): already lane r = row r.
  _mm256_store_si256(out + 0, p0);
  _mm256_store_si256(out + 1, p1);
  _mm256_store_si256(out + 2, p2);
  _mm256_store_si256(out + 3, p3);
}

// Rows r0..r0+nr-1 of the GGUF layout, block b -> the packed block (to `q`) and the 8 rows'
// scales (missing rows: zero).
template <class K>
inline void gather_block(const uint8_t* base, int64_t rb, int64_t r0, int nr, int64_t b, uint8_t* q, __m256& dw) {
  alignas(16) uint16_t d[kLanes];
  alignas(32) uint8_t rows[kLanes][32] = {};
  for (int r = 0; r < nr; ++r) {
    const uint8_t* blk = base + (r0 + r) * rb + b * K::kBlk;
    __builtin_memcpy(&d[r], blk, 2);
    __builtin_memcpy(rows[r], blk + 2, K::kQB);
  }
  for (int r = nr; r < kLanes; ++r) d[r] = 0;
  auto* out = reinterpret_cast<__m256i*>(q);
  // Each 16-byte half of the rows' quant bytes is a 4 x 8 transpose of dwords.
  for (int64_t h = 0; h < K::kQB / 16; ++h) {
    __m256i X[4];
    for (int i = 0; i < 4; ++i) {
      X[i] = _mm256_set_m128i(_mm_load_si128(reinterpret_cast<const __m128i*>(rows[i + 4] + 16 * h)),
                              _mm_load_si128(reinterpret_cast<const __m128i*>(rows[i] + 16 * h)));
    }
    transpose_4x8(X, out + 4 * h);
  }
  dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
}

// One block of one tile against every activation row: q = the packed block, dw = the 8
// rows' scales; facc [M, 8].
template <class K>
inline void block_all_rows(const uint8_t* q, __m256 dw, const impl::ActQ8* xq, const int8_t* xt, int64_t M, int64_t nb,
                           int64_t b, float* __restrict facc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i A[8];
  alignas(32) int8_t vals[K::kSignsInPlace ? 1 : 256];
  K::prepare(q, A, vals);
  const auto* sgn = K::kSignsInPlace ? reinterpret_cast<const int8_t*>(q) : vals;
  for (int64_t m = 0; m < M; ++m) {
    const auto* xb = reinterpret_cast<const int32_t*>(xt + (b * M + m) * 32);
    auto x = [&](int k) {
      __m256i v = _mm256_set1_epi32(xb[k]);
      if constexpr (K::kSigned) v = _mm256_sign_epi8(v, load256(sgn + 32 * k));
      return v;
    };
    __m256i s = block_dot<K::kGroup>(A, x, [&](int) { return ones; });
    if constexpr (K::kOffset != 0) s = _mm256_add_epi32(s, _mm256_set1_epi32(K::kOffset * xq->s[m * nb + b]));
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(xq->d[m * nb + b]));
    float* a = facc + m * kLanes;
    _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, _mm256_load_ps(a)));
  }
}

template <class K>
bool own_packing(const WeightView& w);

template <class K, bool kOne>
void matmul_rows_lanes(const WeightView& w, const impl::ActQ8* xq, const int64_t M_, float* y, int64_t ldy, int64_t r0,
                       int64_t r1) {
  const int64_t M = kOne ? 1 : M_;
  const int64_t n = w.n_in;
  const Layout<K> L(n);
  const bool packed = own_packing<K>(w);
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  float* facc = impl::thread_scratch(3, static_cast<size_t>(M * kLanes));
  const int8_t* xt = blocks_by_row(xq, M, n);
  alignas(32) uint8_t qbuf[Layout<K>::kQuant];
  for (int64_t t0 = r0; t0 < r1; t0 += kLanes) {
    const int nr = static_cast<int>(imin<int64_t>(kLanes, r1 - t0));
    for (int64_t i = 0; i < M * kLanes; i += 8) _mm256_store_ps(facc + i, _mm256_setzero_ps());
    const uint8_t* tile = packed ? static_cast<const uint8_t*>(w.packed) + (t0 / kLanes) * L.tile : nullptr;
    for (int64_t b = 0; b < L.nb; ++b) {
      __m256 dw;
      const uint8_t* q;
      if (packed) {
        q = tile + L.scales + b * L.kQuant;
        for (int64_t l = 0; l < L.kQuant; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetch + l), _MM_HINT_T0);
        if ((b & 3) == 0) _mm_prefetch(reinterpret_cast<const char*>(tile + b * 16 + 256), _MM_HINT_T0);
        dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + b * 16)));
      } else {
        gather_block<K>(base, rb, t0, nr, b, qbuf, dw);
        q = qbuf;
      }
      block_all_rows<K>(q, dw, xq, xt, M, L.nb, b, facc);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int r = 0; r < nr; ++r) y[m * ldy + t0 + r] = facc[m * kLanes + r];
  }
}

// The packed copy is this kernel's only when the best level's table packs with it (on an
// AVX-512 VNNI CPU whose tests select this level, `packed` holds the VNNI layout).
template <class K>
bool own_packing(const WeightView& w) {
  static const bool own = impl::table_for(best_isa()).pack[static_cast<int>(w.type)] == &pack_lanes<K>;
  return own && w.packed != nullptr;
}

// ---- Super-block types (Q4_K, Q5_K, Q6_K, IQ4_XS): 256 values per block ----------
// Row `row`'s super-block sb, or nullptr past `end` (a missing row packs as zeros).
template <class Blk>
inline const Blk* superblock_of(const WeightView& w, int64_t row, int64_t end, int64_t sb) {
  return row < end ? reinterpret_cast<const Blk*>(static_cast<const uint8_t*>(w.data) + row * w.row_bytes()) + sb
                   : nullptr;
}

// Tile t (rows 8t..8t+7), super-block sb at (t * nsb + sb) * kBytes, packed by kOne.
template <class Blk, int64_t kBytes, void (*kOne)(const Blk* const (&)[kLanes], uint8_t*)>
int64_t pack_superblocks(const WeightView& w, void* dst) {
  const int64_t nsb = w.n_in / 256, n_tiles = (w.n_out + kLanes - 1) / kLanes;
  if (dst == nullptr) return n_tiles * nsb * kBytes;
  for (int64_t t = 0; t < n_tiles; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const Blk* rows[kLanes];
      for (int r = 0; r < kLanes; ++r) rows[r] = superblock_of<Blk>(w, kLanes * t + r, w.n_out, sb);
      kOne(rows, static_cast<uint8_t*>(dst) + (t * nsb + sb) * kBytes);
    }
  }
  return n_tiles * nsb * kBytes;
}

// The packed super-block sb of the tile starting at row t0 (nr rows): from the packed copy
// (prefetching ahead) or, without one, packed into `buf` from the GGUF rows.
template <class Blk, int64_t kBytes, void (*kOne)(const Blk* const (&)[kLanes], uint8_t*)>
inline const uint8_t* superblock_at(const WeightView& w, const uint8_t* tile, int64_t t0, int nr, int64_t sb,
                                    uint8_t* buf) {
  if (tile != nullptr) {
    const uint8_t* P = tile + sb * kBytes;
    for (int64_t l = 0; l < kBytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(P + kPrefetchKQ + l), _MM_HINT_T0);
    return P;
  }
  const Blk* rows[kLanes];
  for (int r = 0; r < kLanes; ++r) rows[r] = superblock_of<Blk>(w, t0 + r, t0 + nr, sb);
  kOne(rows, buf);
  return buf;
}

// ---- Q4_K and Q5_K: super-blocks of 8 sub-blocks of 32 -----------------------------
// x = d * sc_j * q - dmin * m_j (q 4 bits, Q5_K 5 bits). Per (activation row m, sub-block
// j, tile): the exact integer dot of the sub-block for the 8 rows as above (unsigned
// values), then acc = fma(float(dot), d * sc_j * dx_j, acc) and acc = fnmadd(dmin * m_j,
// dx_j * sum_j(x_q), acc), in that order for j = 0..7 of each super-block.
//
// Packed tile (rows 8t..8t+7), per super-block (kSB bytes, 32-byte aligned):
//   0: the 8 rows' f16 d, then their f16 dmin (32 bytes);
//   32: sc[j][r] (64 bytes), 96: m[j][r] (64 bytes): the 6-bit scales and mins as bytes;
//   160: qs: pair p (sub-blocks 2p, 2p + 1) at 160 + 256 p, 8 vectors, vector k lane r =
//        bytes 4k..4k+3 of row r's qs[32p..32p+31] (low nibbles: sub-block 2p values
//        4k..4k+3, high nibbles: sub-block 2p + 1);
//   Q5_K, 1184: qh, 8 vectors, vector k lane r = bytes 4k..4k+3 of row r's qh (bit j of
//        byte l: the fifth bit of sub-block j's value l).
// 2.8% (Q4_K) / 2.3% (Q5_K) more bytes than the GGUF blocks: the scales as bytes.
template <bool kQ5>
struct KQK {
  using Blk = std::conditional_t<kQ5, tensor::BlockQ5_K, tensor::BlockQ4_K>;
  static constexpr int64_t kSB = kQ5 ? 1440 : 1184;
};

// One super-block of 8 rows (rows[r] == nullptr: a missing row, zero) in the packed layout.
template <bool kQ5>
void pack_superblock(const typename KQK<kQ5>::Blk* const (&rows)[kLanes], uint8_t* out) {
  for (int64_t i = 0; i < KQK<kQ5>::kSB; ++i) out[i] = 0;
  for (int r = 0; r < kLanes; ++r) {
    const auto* B = rows[r];
    if (B == nullptr) continue;
    __builtin_memcpy(out + 2 * r, &B->d, 2);
    __builtin_memcpy(out + 16 + 2 * r, &B->dmin, 2);
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, B->scales, out + 32 + 8 * j + r, out + 96 + 8 * j + r);
    for (int p = 0; p < 4; ++p)
      for (int l = 0; l < 32; ++l) out[160 + 256 * p + 32 * (l / 4) + 4 * r + l % 4] = B->qs[32 * p + l];
    if constexpr (kQ5) {
      for (int l = 0; l < 32; ++l) out[1184 + 32 * (l / 4) + 4 * r + l % 4] = B->qh[l];
    }
  }
}

template <bool kQ5>
int64_t pack_kq(const WeightView& w, void* dst) {
  return pack_superblocks<typename KQK<kQ5>::Blk, KQK<kQ5>::kSB, pack_superblock<kQ5>>(w, dst);
}

// The values of sub-block j (= 2p + kHi) for the 8 rows: 8 vectors of unsigned bytes.
template <bool kQ5, int kHi>
inline void kq_values(const uint8_t* P, int p, int j, __m256i (&U)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int k = 0; k < 8; ++k) {
    const __m256i v = load256(P + 160 + 256 * p + 32 * k);
    U[k] = _mm256_and_si256(kHi ? _mm256_srli_epi16(v, 4) : v, m4);
    if constexpr (kQ5) {
      // bit j of every qh byte -> bit 4 (a 16-bit shift; the mask drops what crossed bytes).
      const __m256i h = load256(P + 1184 + 32 * k);
      const __m256i b4 =
          _mm256_and_si256(_mm256_sll_epi16(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j)), _mm_cvtsi32_si128(4)),
                           _mm256_set1_epi8(0x10));
      U[k] = _mm256_or_si256(U[k], b4);
    }
  }
}

template <bool kQ5>
bool own_packing_kq(const WeightView& w) {
  static const bool own = impl::table_for(best_isa()).pack[static_cast<int>(w.type)] == &pack_kq<kQ5>;
  return own && w.packed != nullptr;
}

template <bool kQ5, bool kOne>
void matmul_rows_kq(const WeightView& w, const impl::ActQ8* xq, const int64_t M_, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  const int64_t M = kOne ? 1 : M_;
  constexpr int kGroup = kQ5 ? 4 : 8;  // 4-bit values (Q4_K) sum 8 pair vectors in int16, 5-bit (Q5_K) 4
  using Blk = typename KQK<kQ5>::Blk;
  constexpr int64_t kSB = KQK<kQ5>::kSB;
  const int64_t n = w.n_in, nb = n / 32, nsb = n / 256;
  const bool packed = own_packing_kq<kQ5>(w);
  float* facc = impl::thread_scratch(3, static_cast<size_t>(M * kLanes));
  const int8_t* xt = blocks_by_row(xq, M, n);
  float* dxs = impl::thread_scratch(1, static_cast<size_t>(M * nb));  // dx * sum(x_q) per (row, block)
  for (int64_t i = 0; i < M * nb; ++i) dxs[i] = xq->d[i] * static_cast<float>(xq->s[i]);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) uint8_t sbuf[kSB];
  alignas(32) float dsc[8][8], dmn[8][8];  // per sub-block j: d * sc_j and dmin * m_j of the 8 rows
  for (int64_t t0 = r0; t0 < r1; t0 += kLanes) {
    const int nr = static_cast<int>(imin<int64_t>(kLanes, r1 - t0));
    for (int64_t i = 0; i < M * kLanes; i += 8) _mm256_store_ps(facc + i, _mm256_setzero_ps());
    const uint8_t* tile = packed ? static_cast<const uint8_t*>(w.packed) + (t0 / kLanes) * nsb * kSB : nullptr;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* P = superblock_at<Blk, kSB, pack_superblock<kQ5>>(w, tile, t0, nr, sb, sbuf);
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(P)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(P + 16)));
      for (int j = 0; j < 8; ++j) {
        auto bytes = [&](int64_t off) {
          return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(P + off))));
        };
        _mm256_store_ps(dsc[j], _mm256_mul_ps(d, bytes(32 + 8 * j)));
        _mm256_store_ps(dmn[j], _mm256_mul_ps(dmin, bytes(96 + 8 * j)));
      }
      auto sub = [&]<int kHi>(int p) {
        const int j = 2 * p + kHi;
        __m256i U[8];
        kq_values<kQ5, kHi>(P, p, j, U);
        const __m256 vsc = _mm256_load_ps(dsc[j]), vmn = _mm256_load_ps(dmn[j]);
        const int64_t blk = sb * 8 + j;
        for (int64_t m = 0; m < M; ++m) {
          const auto* xb = reinterpret_cast<const int32_t*>(xt + (blk * M + m) * 32);
          const __m256i s = block_dot<kGroup>(
              U, [&](int k) { return _mm256_set1_epi32(xb[k]); }, [&](int) { return ones; });
          float* a = facc + m * kLanes;
          __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(vsc, _mm256_set1_ps(xq->d[m * nb + blk])),
                                       _mm256_load_ps(a));
          acc = _mm256_fnmadd_ps(vmn, _mm256_set1_ps(dxs[m * nb + blk]), acc);
          _mm256_store_ps(a, acc);
        }
      };
      for (int p = 0; p < 4; ++p) {
        sub.template operator()<0>(p);
        sub.template operator()<1>(p);
      }
    }
    for (int64_t m = 0; m < M; ++m)
      for (int r = 0; r < nr; ++r) y[m * ldy + t0 + r] = facc[m * kLanes + r];
  }
}

// ---- Q6_K: super-blocks of 16 sub-blocks of 16, int8 scales -----------------------
// x = d * sc_s * (q - 32), q 6 bits. An activation block kJ (h = kJ / 4, q = kJ % 4) covers
// sub-blocks 8h + 2q (its values 0..15) and 8h + 2q + 1 (16..31). Per (activation row m,
// block kJ, tile): value vectors 0..3 get the first sub-block's scale and 4..7 the second's
// inside VPMADDWD (lane r's two int16 pair sums times sc_r, exact), the offset is
// -32 * (sc_a * hs_a + sc_b * hs_b) with hs the sums of x_q over each half of the block (one
// VPMADDWD), all in int32; then acc = fma(float(dot), d * dx, acc) once per block.
//
// Packed tile, per super-block (1696 bytes): 0: the 8 rows' f16 d (16 bytes, then 16
// zero); 32: sc[s][r] (128 bytes, int8); 160: ql in 4 chunks of 32 bytes per row (chunk
// c = ql[32c..32c+31]), 8 vectors each, vector k lane r = bytes 4k..4k+3 of row r's chunk;
// 1184: qh in 2 chunks the same way. 1% more bytes than the GGUF blocks.
constexpr int64_t kQ6SB = 1696;

void pack_superblock_q6(const tensor::BlockQ6_K* const (&rows)[kLanes], uint8_t* out) {
  for (int64_t i = 0; i < kQ6SB; ++i) out[i] = 0;
  for (int r = 0; r < kLanes; ++r) {
    const tensor::BlockQ6_K* B = rows[r];
    if (B == nullptr) continue;
    __builtin_memcpy(out + 2 * r, &B->d, 2);
    for (int sb = 0; sb < 16; ++sb) out[32 + 8 * sb + r] = static_cast<uint8_t>(B->scales[sb]);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) out[160 + 256 * c + 32 * (l / 4) + 4 * r + l % 4] = B->ql[32 * c + l];
    for (int c = 0; c < 2; ++c)
      for (int l = 0; l < 32; ++l) out[1184 + 256 * c + 32 * (l / 4) + 4 * r + l % 4] = B->qh[32 * c + l];
  }
}

int64_t pack_q6(const WeightView& w, void* dst) {
  return pack_superblocks<tensor::BlockQ6_K, kQ6SB, pack_superblock_q6>(w, dst);
}

bool own_packing_q6(const WeightView& w) {
  static const bool own = impl::table_for(best_isa()).pack[static_cast<int>(tensor::DType::q6_k)] == &pack_q6;
  return own && w.packed != nullptr;
}

// The 8 values vectors (0..63) of activation block (h, q) of a packed super-block.
template <int kQ>
inline void q6_values(const uint8_t* P, int h, __m256i (&U)[8]) {
  for (int k = 0; k < 8; ++k) {
    __m256i lo = load256(P + 160 + 256 * (2 * h + (kQ & 1)) + 32 * k);
    if constexpr (kQ >= 2) lo = _mm256_srli_epi16(lo, 4);
    __m256i hi = load256(P + 1184 + 256 * h + 32 * k);  // bits 2q, 2q + 1 -> bits 4, 5
    if constexpr (kQ == 0) hi = _mm256_slli_epi16(hi, 4);
    if constexpr (kQ == 1) hi = _mm256_slli_epi16(hi, 2);
    if constexpr (kQ == 3) hi = _mm256_srli_epi16(hi, 2);
    U[k] = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0x0F)), _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
  }
}

// 8 int8 scales (one per row) -> int16 pairs (s_r, s_r) in lane r.
inline __m256i scale_pairs(const uint8_t* p) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

template <bool kOne>
void matmul_rows_q6(const WeightView& w, const impl::ActQ8* xq, const int64_t M_, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  const int64_t M = kOne ? 1 : M_;
  const int64_t n = w.n_in, nb = n / 32, nsb = n / 256;
  const bool packed = own_packing_q6(w);
  float* facc = impl::thread_scratch(3, static_cast<size_t>(M * kLanes));
  const int8_t* xt = blocks_by_row(xq, M, n);
  // Sums of x_q over each half (16 values) of every activation block, as int16 pairs.
  auto* hs = reinterpret_cast<int32_t*>(impl::thread_scratch(2, static_cast<size_t>(M * nb)));
  for (int64_t i = 0; i < M * nb; ++i) {
    const int8_t* q = xq->q + i * 32;
    int32_t s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
      s0 += q[j];
      s1 += q[16 + j];
    }
    hs[i] = static_cast<int32_t>((static_cast<uint32_t>(s0) & 0xFFFFu) | (static_cast<uint32_t>(s1) << 16));
  }
  alignas(32) uint8_t sbuf[kQ6SB];
  for (int64_t t0 = r0; t0 < r1; t0 += kLanes) {
    const int nr = static_cast<int>(imin<int64_t>(kLanes, r1 - t0));
    for (int64_t i = 0; i < M * kLanes; i += 8) _mm256_store_ps(facc + i, _mm256_setzero_ps());
    const uint8_t* tile = packed ? static_cast<const uint8_t*>(w.packed) + (t0 / kLanes) * nsb * kQ6SB : nullptr;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* P = superblock_at<tensor::BlockQ6_K, kQ6SB, pack_superblock_q6>(w, tile, t0, nr, sb, sbuf);
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(P)));
      auto block = [&]<int kJ>() {
        constexpr int h = kJ / 4, q = kJ % 4;
        __m256i U[8];
        q6_values<q>(P, h, U);
        const uint8_t* scp = P + 32 + 8 * (8 * h + 2 * q);
        const __m256i sa = scale_pairs(scp), sbv = scale_pairs(scp + 8);
        // Lane r: (sc_a, sc_b) of row r as int16, for the offset.
        const __m256i sab = _mm256_or_si256(_mm256_and_si256(sa, _mm256_set1_epi32(0xFFFF)),
                                            _mm256_and_si256(sbv, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
        const int64_t blk = sb * 8 + kJ;
        for (int64_t m = 0; m < M; ++m) {
          const auto* xb = reinterpret_cast<const int32_t*>(xt + (blk * M + m) * 32);
          // 6-bit values: pairs of pair vectors summed in int16 (a group never spans the two
          // sub-blocks, whose scales differ).
          const __m256i s = block_dot<2>(
              U, [&](int k) { return _mm256_set1_epi32(xb[k]); }, [&](int k) { return k < 4 ? sa : sbv; });
          const __m256i corr = _mm256_madd_epi16(sab, _mm256_set1_epi32(hs[m * nb + blk]));
          const __m256i dot = _mm256_sub_epi32(s, _mm256_slli_epi32(corr, 5));
          float* a = facc + m * kLanes;
          _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                             _mm256_mul_ps(d, _mm256_set1_ps(xq->d[m * nb + blk])), _mm256_load_ps(a)));
        }
      };
      for_each_block8(block);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int r = 0; r < nr; ++r) y[m * ldy + t0 + r] = facc[m * kLanes + r];
  }
}

// ---- IQ4_XS: super-blocks of 8 sub-blocks of 32, IQ4_NL values, 6-bit scales -------
// x = d * (ls_j - 32) * grid[nibble]: each sub-block is an IQ4_NL block whose scale, per
// row, is d * (ls_j - 32) (an exact product in f32), so it runs block_all_rows<KIQ4NL>.
// Packed tile, per super-block (1120 bytes): 0: the 8 rows' f16 d (16 bytes, then 16
// zero); 32: ls_j - 32 as int8, [j][r] (64 bytes); 96 + 128 j: sub-block j in the IQ4_NL
// block layout above (vector k lane r = bytes 4k..4k+3 of row r's qs[16j..16j+15]). 2.9%
// more bytes than the GGUF blocks.
constexpr int64_t kIXSB = 1120;

void pack_superblock_ixs(const tensor::BlockIQ4_XS* const (&rows)[kLanes], uint8_t* out) {
  for (int64_t i = 0; i < kIXSB; ++i) out[i] = 0;
  for (int r = 0; r < kLanes; ++r) {
    const tensor::BlockIQ4_XS* B = rows[r];
    if (B == nullptr) continue;
    __builtin_memcpy(out + 2 * r, &B->d, 2);
    for (int j = 0; j < 8; ++j) {
      const int ls = ((B->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((B->scales_h >> (2 * j)) & 3) << 4);
      out[32 + 8 * j + r] = static_cast<uint8_t>(static_cast<int8_t>(ls - 32));
      for (int l = 0; l < 16; ++l) out[96 + 128 * j + 32 * (l / 4) + 4 * r + l % 4] = B->qs[16 * j + l];
    }
  }
}

int64_t pack_ixs(const WeightView& w, void* dst) {
  return pack_superblocks<tensor::BlockIQ4_XS, kIXSB, pack_superblock_ixs>(w, dst);
}

bool own_packing_ixs(const WeightView& w) {
  static const bool own = impl::table_for(best_isa()).pack[static_cast<int>(tensor::DType::iq4_xs)] == &pack_ixs;
  return own && w.packed != nullptr;
}

template <bool kOne>
void matmul_rows_ixs(const WeightView& w, const impl::ActQ8* xq, const int64_t M_, float* y, int64_t ldy, int64_t r0,
                     int64_t r1) {
  const int64_t M = kOne ? 1 : M_;
  const int64_t n = w.n_in, nb = n / 32, nsb = n / 256;
  const bool packed = own_packing_ixs(w);
  float* facc = impl::thread_scratch(3, static_cast<size_t>(M * kLanes));
  const int8_t* xt = blocks_by_row(xq, M, n);
  alignas(32) uint8_t sbuf[kIXSB];
  for (int64_t t0 = r0; t0 < r1; t0 += kLanes) {
    const int nr = static_cast<int>(imin<int64_t>(kLanes, r1 - t0));
    for (int64_t i = 0; i < M * kLanes; i += 8) _mm256_store_ps(facc + i, _mm256_setzero_ps());
    const uint8_t* tile = packed ? static_cast<const uint8_t*>(w.packed) + (t0 / kLanes) * nsb * kIXSB : nullptr;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* P = superblock_at<tensor::BlockIQ4_XS, kIXSB, pack_superblock_ixs>(w, tile, t0, nr, sb, sbuf);
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(P)));
      for (int j = 0; j < 8; ++j) {
        const __m256i ls = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(P + 32 + 8 * j)));
        block_all_rows<KIQ4NL>(P + 96 + 128 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(ls)), xq, xt, M, nb, sb * 8 + j,
                               facc);
      }
    }
    for (int64_t m = 0; m < M; ++m)
      for (int r = 0; r < nr; ++r) y[m * ldy + t0 + r] = facc[m * kLanes + r];
  }
}

// The table's entry for kernel F: F<true> for one activation row (a compile-time M of 1,
// so the accumulators stay in registers and nothing waits on the scratch), F<false>
// otherwise. Both run the same operations on every (row, output): batch invariant.
using KernelM = void (*)(const WeightView&, const impl::ActQ8*, int64_t, float*, int64_t, int64_t, int64_t);
template <KernelM kOne, KernelM kMany>
void one_or_many(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy, int64_t r0,
                 int64_t r1) {
  (M == 1 ? kOne : kMany)(w, xq, M, y, ldy, r0, r1);
}

}  // namespace

void impl::register_avx2_lanes(KernelTable& t) {
  auto set = [&](tensor::DType d, MatmulRowsFn fn, PackFn pack) {
    const int id = static_cast<int>(d);
    t.matmul_rows[id] = fn;
    t.act[id] = ActFormat::q8;
    t.row_grain[id] = 2 * kLanes;
    t.pack[id] = pack;
  };
  set(tensor::DType::q8_0, one_or_many<matmul_rows_lanes<KQ80, true>, matmul_rows_lanes<KQ80, false>>,
      pack_lanes<KQ80>);
  set(tensor::DType::q4_0, one_or_many<matmul_rows_lanes<KQ40, true>, matmul_rows_lanes<KQ40, false>>,
      pack_lanes<KQ40>);
  set(tensor::DType::iq4_nl, one_or_many<matmul_rows_lanes<KIQ4NL, true>, matmul_rows_lanes<KIQ4NL, false>>,
      pack_lanes<KIQ4NL>);
  set(tensor::DType::q4_k, one_or_many<matmul_rows_kq<false, true>, matmul_rows_kq<false, false>>, pack_kq<false>);
  set(tensor::DType::q5_k, one_or_many<matmul_rows_kq<true, true>, matmul_rows_kq<true, false>>, pack_kq<true>);
  set(tensor::DType::q6_k, one_or_many<matmul_rows_q6<true>, matmul_rows_q6<false>>, pack_q6);
  set(tensor::DType::iq4_xs, one_or_many<matmul_rows_ixs<true>, matmul_rows_ixs<false>>, pack_ixs);
}

}  // namespace treespec::kernels
