// AVX2 int8 kernels, one weight row at a time: Q2_K and Q3_K weights times the q8
// activations (impl::ActQ8), for CPUs without AVX-512 VNNI (AMD Zen 2/3, Intel cores
// without AVX-512); Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS have rows-in-lanes kernels
// (avx2_lanes.cpp). Compiled with -mavx2 -mfma -mf16c -mbmi2 only; the AVX-512 level
// inherits them (register_avx512 calls register_avx2_int8 after its float path).
//
// Integer part: VPMADDUBSW (unsigned x signed bytes -> pairs summed into int16, with
// saturation) then VPMADDWD by 1 (or by the sub-block scales of Q2_K / Q3_K) -> 8 int32
// lanes, each the exact sum of 4 products. The pairs never saturate: the unsigned operand
// is at most 3 or 7 (Q2_K, Q3_K), and
// activations are at most 127 in magnitude (ref_quantize_act), so a pair is at most
// 2 * 128 * 127 = 32512.
//
// Float part, per (activation row m, weight row r): 8-lane accumulators, two of them
// alternating by block, acc = fma(float(lanes), scale of (r, block) * dx of (m, block),
// acc), summed to one float in a fixed order at the end of the row. Every (m, r) runs the
// same operations whatever M is, where m sits in its group of kMB rows, and which thread
// takes the row: batch invariant (impl.h). The results are not the VNNI kernels' bit for
// bit (those accumulate one float per block and row; CPUs differ anyway, see
// docs/kernels.md), only within the tests' q8 tolerance of the scalar reference.
//
// Loop order: rows in tiles of kRowTile; per tile, activation rows in groups of kMB;
// per group, every row of the tile. A group's activations (kMB * n bytes) stay in L1
// while the tile's rows stream through, and each weight block is unpacked once per group.
#include "kernels/x86/simd.h"

namespace treespec::kernels {
namespace {

constexpr int kMB = 4;            // activation rows per group (accumulators in registers)
constexpr int64_t kRowTile = 16;  // weight rows per tile
// Software prefetch distance in a weight row's stream (rows are contiguous, so it runs
// into the next rows): 2 KiB measured best on the 1 B expansions (1 and 4 KiB slower;
// without it decode ran at 14 / 23 tok/s instead of 18 / 30 on Q8_0 / Q4_K_M, since the
// hardware prefetchers alone leave the loop waiting on DRAM; docs/kernels.md).
constexpr int64_t kPrefetch = 2048;
inline void prefetch_ahead(const void* p, int64_t bytes) {
  for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(static_cast<const char*>(p) + kPrefetch + l, _MM_HINT_T0);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The activation block of row m, block b.
inline __m256i xblock(const impl::ActQ8* xq, int64_t m, int64_t n, int64_t b) {
  return load256(xq->q + m * n + b * 32);
}

// Per call: the sums of the two halves (16 values) of every activation block as int16 for
// the offsets of the sub-block-of-16 types (scratch slot 2, at [2 * (m * nb + b) + half]).
inline const int16_t* act_half_sums(const impl::ActQ8* xq, int64_t M, int64_t n) {
  const int64_t nb = n / 32;
  auto* hs = reinterpret_cast<int16_t*>(impl::thread_scratch(2, static_cast<size_t>(M * nb)));
  for (int64_t i = 0; i < M * nb; ++i) {
    const int8_t* q = xq->q + i * 32;
    int32_t s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
      s0 += q[j];
      s1 += q[16 + j];
    }
    hs[2 * i] = static_cast<int16_t>(s0);
    hs[2 * i + 1] = static_cast<int16_t>(s1);
  }
  return hs;
}

struct Ctx {
  const impl::ActQ8* xq;
  int64_t n, nb;
  const int16_t* hs;  // Q2_K / Q3_K / Q6_K
};

// ---- one weight row against kM activation rows (m0 .. m0 + kM - 1) -----------------
// Each writes out[k] = the dot of the row with activation row m0 + k.

// The row kernels below are overloads of run_row<kM>(Tag, row, ctx, m0, out), one tag
// per weight type; the driver is written once over the tag.

// Moves bit kBit of every byte of v to bit kTo (16-bit shifts; callers mask the result).
template <int kBit, int kTo>
inline __m256i move_bit(__m256i v) {
  if constexpr (kBit < kTo) return _mm256_slli_epi16(v, kTo - kBit);
  if constexpr (kBit > kTo) return _mm256_srli_epi16(v, kBit - kTo);
  return v;
}

// Lane kJ of v in every lane.
template <int kJ>
inline __m256 lane(__m256 v) {
  return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(kJ));
}

// Sub-blocks of 16 (Q6_K, Q3_K, Q2_K): x = d * sc_s * q - off_s with an integer scale
// per sub-block. An activation block j covers sub-blocks 2j and 2j + 1: VPMADDWD
// multiplies the int16 pair sums by their sub-block's scale (exact: at most
// 2 * 16002 * 128 for Q6_K). The offset of a super-block is one VPMADDWD per activation
// row, of 16 int16 offset weights with the 16 half-block sums of x_q (lane j =
// o_2j * hs_2j + o_2j+1 * hs_2j+1), times `offset_scale * dx_j`. Each Kind gives:
//   Blk; d(B); scales(B) and offsets(B): 16 int16; offset_scale(B);
//   values<J>(B): the 32 unsigned values of activation block J.
struct KQ3 {  // x = d * (sc - 32) * (q - 4), q 0..7: 2 bits from qs, the third from hmask
  using Blk = tensor::BlockQ3_K;
  static float d(const Blk& B) { return h2f(B.d); }
  // tensor::q3_k_scale for s = 0..15 at once: low nibbles from bytes 0-7 (s < 8: low
  // nibble of byte s, else high nibble of byte s - 8), 2 high bits from bytes 8-11
  // (bits 2 (s / 4) of byte 8 + s % 4): dword k of [h, h >> 2, h >> 4, h >> 6] & 0x03.
  static __m256i scales(const Blk& B) {
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(B.scales));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(a, m4), _mm_and_si128(_mm_srli_epi16(a, 4), m4));
    uint32_t h;
    __builtin_memcpy(&h, B.scales + 8, 4);
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(h)), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(3));
    const __m128i sc = _mm_or_si128(lo, _mm_slli_epi16(hi, 4));
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(sc), _mm256_set1_epi16(32));
  }
  static __m256i offsets(const Blk& B) { return scales(B); }
  static float offset_scale(const Blk& B) { return -4.0f * d(B); }
  template <int kJ>
  static __m256i values(const Blk& B) {  // element 128h + 32j + l
    constexpr int h = kJ / 4, j = kJ % 4;
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(load256(B.qs + 32 * h), 2 * j), _mm256_set1_epi8(3));
    const __m256i hi = _mm256_and_si256(move_bit<4 * h + j, 2>(load256(B.hmask)), _mm256_set1_epi8(4));
    return _mm256_or_si256(lo, hi);
  }
};
struct KQ2 {  // x = d * (sc & 15) * q - dmin * (sc >> 4), q 0..3
  using Blk = tensor::BlockQ2_K;
  static float d(const Blk& B) { return h2f(B.d); }
  static __m128i raw(const Blk& B) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(B.scales)); }
  static __m256i scales(const Blk& B) { return _mm256_cvtepu8_epi16(_mm_and_si128(raw(B), _mm_set1_epi8(0x0F))); }
  static __m256i offsets(const Blk& B) {
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw(B), 4), _mm_set1_epi8(0x0F)));
  }
  static float offset_scale(const Blk& B) { return -h2f(B.dmin); }
  template <int kJ>
  static __m256i values(const Blk& B) {
    constexpr int h = kJ / 4, j = kJ % 4;
    return _mm256_and_si256(_mm256_srli_epi16(load256(B.qs + 32 * h), 2 * j), _mm256_set1_epi8(3));
  }
};

template <class Kind>
struct Sub16 {};
template <int kM, class Kind>
inline void run_row(Sub16<Kind>, const uint8_t* row, const Ctx& c, int64_t m0, float* out) {
  using Blk = typename Kind::Blk;
  const auto* wb = reinterpret_cast<const Blk*>(row);
  __m256 acc[kM][2];
  for (int k = 0; k < kM; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
  const int64_t nsb = c.n / 256;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const Blk& B = wb[sb];
    prefetch_ahead(&B, sizeof(B));
    const float d = Kind::d(B);
    alignas(32) int16_t sc[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), Kind::scales(B));
    const __m256i off16 = Kind::offsets(B);
    const __m256 off = _mm256_set1_ps(Kind::offset_scale(B));
    __m256 D[kM];  // lane j: d * dx of (row m0 + k, activation block j of the super-block)
    for (int k = 0; k < kM; ++k) {
      const int64_t ib = (m0 + k) * c.nb + sb * 8;
      const __m256 dx = _mm256_loadu_ps(c.xq->d + ib);
      D[k] = _mm256_mul_ps(_mm256_set1_ps(d), dx);
      const __m256i corr = _mm256_madd_epi16(off16, load256(c.hs + 2 * ib));
      acc[k][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_mul_ps(off, dx), acc[k][1]);
    }
    auto block = [&]<int kJ>() {
      const __m256i u = Kind::template values<kJ>(B);
      const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * kJ + 1]), _mm_set1_epi16(sc[2 * kJ]));
      for (int k = 0; k < kM; ++k) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xblock(c.xq, m0 + k, c.n, sb * 8 + kJ)), scv);
        acc[k][kJ & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), lane<kJ>(D[k]), acc[k][kJ & 1]);
      }
    };
    for_each_block8(block);
  }
  for (int k = 0; k < kM; ++k) out[k] = hsum8(_mm256_add_ps(acc[k][0], acc[k][1]));
}

// ---- the row-range driver ------------------------------------------------------------

template <class Tag>
void matmul_rows_int8(const WeightView& w, const Ctx& c, int64_t M, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t t0 = r0; t0 < r1; t0 += kRowTile) {
    const int64_t t1 = imin(r1, t0 + kRowTile);
    for (int64_t m0 = 0; m0 < M; m0 += kMB) {
      const int64_t mb = imin<int64_t>(kMB, M - m0);
      for (int64_t r = t0; r < t1; ++r) {
        const uint8_t* row = base + r * rb;
        float out[kMB];
        switch (mb) {
          case 4: run_row<4>(Tag{}, row, c, m0, out); break;
          case 3: run_row<3>(Tag{}, row, c, m0, out); break;
          case 2: run_row<2>(Tag{}, row, c, m0, out); break;
          default: run_row<1>(Tag{}, row, c, m0, out); break;
        }
        for (int64_t k = 0; k < mb; ++k) y[(m0 + k) * ldy + r] = out[k];
      }
    }
  }
}

template <class Tag, bool kHalves>
void matmul_rows_avx2_q8(const WeightView& w, const float*, const impl::ActQ8* xq, int64_t M, float* y, int64_t ldy,
                         int64_t r0, int64_t r1) {
  const int64_t n = w.n_in, nb = n / 32;
  Ctx c{xq, n, nb, nullptr};
  if constexpr (kHalves) c.hs = act_half_sums(xq, M, n);
  matmul_rows_int8<Tag>(w, c, M, y, ldy, r0, r1);
}

// Same numbers as impl::ref_quantize_act, bit for bit: the same float expressions, the
// maximum is exact in any order, and VCVTPS2DQ rounds to nearest even as nearbyint does.
void quantize_act_avx2(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + b * 32 + 8 * i);
    __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
    // packs interleave the 128-bit lanes; the permute restores element order.
    const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32), _mm256_permutevar8x32_epi32(p16, order));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    d[b] = db;
    s[b] = _mm_cvtsi128_si32(t);
  }
}

}  // namespace

void impl::register_avx2_int8(KernelTable& t) {
  using tensor::DType;
  t.quantize_act = quantize_act_avx2;
  auto set = [&](DType d, MatmulRowsFn fn) {
    const int id = static_cast<int>(d);
    t.matmul_rows[id] = fn;
    t.act[id] = ActFormat::q8;
    t.row_grain[id] = static_cast<int32_t>(kRowTile);
  };
  set(DType::q3_k, matmul_rows_avx2_q8<Sub16<KQ3>, true>);
  set(DType::q2_k, matmul_rows_avx2_q8<Sub16<KQ2>, true>);
  register_avx2_lanes(t);  // Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS (avx2_lanes.cpp)
}

}  // namespace treespec::kernels
