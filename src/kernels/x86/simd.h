// Float kernels written once over a small vector-traits layer and compiled separately in
// each ISA translation unit (avx2.cpp with -mavx2 -mfma, avx512.cpp with -mavx512*).
//
// Everything here lives in an anonymous namespace on purpose: each including TU gets its
// own copy compiled with its own flags, and the linker can never merge an AVX-512
// instantiation into the AVX2 table (an ODR merge would crash CPUs without AVX-512).
//
// For the same reason nothing here instantiates a template or inline function with
// external linkage (std::vector, std::min, tensor::fp16_to_fp32...): the linker keeps
// one copy of such a function, and it could be the one compiled with AVX-512 flags.
// Scratch memory comes from impl::thread_scratch (compiled with baseline flags).
//
// Batch invariance (see impl.h): every output value is produced by the same sequence of
// operations whatever M is and wherever the row sits: each (row, output) pair has its
// own accumulators, reduced in a fixed order.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/impl.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

namespace treespec::kernels {
namespace {

template <typename A>
inline A imin(A a, A b) {
  return a < b ? a : b;
}
template <typename A>
inline A imax(A a, A b) {
  return a < b ? b : a;
}
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
// Local copy of tensor::q4_k_scale_min (see the linkage note above).
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}
inline float bf2f(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &b, 4);
  return f;
}

// Calls block.template operator()<j>() for j = 0..7: the activation blocks of a K-quant
// super-block unrolled, so a loader's shifts by j become immediates and its branches on
// j go (Q6_K decoded 1.5x faster than with a runtime loop: docs/kernels.md). Used by
// the VNNI and the AVX2 int8 kernels.
template <class Block>
inline void for_each_block8(Block&& block) {
  [&]<int... J>(std::integer_sequence<int, J...>) { (block.template operator()<J>(), ...); }
  (std::make_integer_sequence<int, 8>{});
}

// ---- vector traits -------------------------------------------------------------------

struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int RT = 4;  // weight rows per float tile
  static constexpr int MB = 2;  // activation rows per register block
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static __m256i tail_mask(int n) {
    alignas(32) static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 8 - n));
  }
  static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float hsum(V v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
  static float hmax(V v) {
    const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
  }
  // out[r] = hsum(a[r]) for the RT = 4 accumulators of a tile, in one add tree.
  static void hsum_rows(const V* a, float* out) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 u = _mm256_hadd_ps(t0, t1);  // [a0 a1 a2 a3 | a0 a1 a2 a3] partial sums
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)));
  }
  static V from_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V from_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static V from_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // exp(x), Cephes-style: 2^n * p(r) with r = x - n ln2; about 1 ulp; 0 below -87.3.
  static V exp(V x) {
    const V hi = set1(88.3762626647949f), lo = set1(-87.3365447504f);
    const V xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const V n = _mm256_round_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500E-4f);
    p = fma(p, r, set1(1.3981999507E-3f));
    p = fma(p, r, set1(8.3334519073E-3f));
    p = fma(p, r, set1(4.1665795894E-2f));
    p = fma(p, r, set1(1.6666665459E-1f));
    p = fma(p, r, set1(5.0000001201E-1f));
    p = fma(p, mul(r, r), add(r, set1(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const V y = mul(p, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(y, zero(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  }
  static V abs(V x) { return _mm256_andnot_ps(set1(-0.0f), x); }
  // |mag| with the sign of s (mag >= 0)
  static V with_sign_of(V mag, V s) { return _mm256_or_ps(mag, _mm256_and_ps(s, set1(-0.0f))); }
  // a < b ? yes : no, per lane
  static V select_lt(V a, V b, V yes, V no) { return _mm256_blendv_ps(no, yes, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
};

#if defined(__AVX512F__)
struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int RT = 8;
  static constexpr int MB = 2;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float hsum(V v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return Avx2::hsum(h);
  }
  static float hmax(V v) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return Avx2::hmax(h);
  }
  // out[r] = hsum(a[r]) for the RT = 8 accumulators of a tile: fold the 256-bit halves,
  // then one add tree for all eight.
  static void hsum_rows(const V* a, float* out) {
    __m256 h[8];
    for (int r = 0; r < 8; ++r) h[r] = _mm256_add_ps(_mm512_castps512_ps256(a[r]), _mm512_extractf32x8_ps(a[r], 1));
    const __m256 t0 = _mm256_hadd_ps(h[0], h[1]), t1 = _mm256_hadd_ps(h[2], h[3]);
    const __m256 t2 = _mm256_hadd_ps(h[4], h[5]), t3 = _mm256_hadd_ps(h[6], h[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  }
  static V from_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V from_bf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V from_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V exp(V x) {
    const V hi = set1(88.3762626647949f), lo = set1(-87.3365447504f);
    const V xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const V n =
        _mm512_roundscale_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500E-4f);
    p = fma(p, r, set1(1.3981999507E-3f));
    p = fma(p, r, set1(8.3334519073E-3f));
    p = fma(p, r, set1(4.1665795894E-2f));
    p = fma(p, r, set1(1.6666665459E-1f));
    p = fma(p, r, set1(5.0000001201E-1f));
    p = fma(p, mul(r, r), add(r, set1(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    const V y = mul(p, _mm512_castsi512_ps(e));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, zero());
  }
  static V abs(V x) { return _mm512_andnot_ps(set1(-0.0f), x); }
  static V with_sign_of(V mag, V s) { return _mm512_or_ps(mag, _mm512_and_ps(s, set1(-0.0f))); }
  static V select_lt(V a, V b, V yes, V no) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), no, yes);
  }
};
#endif

// ---- dequantisation into f32 ---------------------------------------------------------

template <class T, tensor::DType D>
void dequant_row(const void* src, float* dst, int64_t n) {
  using tensor::DType;
  constexpr int W = T::W;
  if constexpr (D == DType::f32) {
    __builtin_memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if constexpr (D == DType::f16 || D == DType::bf16) {
    const auto* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + W <= n; i += W) T::store(dst + i, D == DType::f16 ? T::from_f16(s + i) : T::from_bf16(s + i));
    for (; i < n; ++i) dst[i] = D == DType::f16 ? h2f(s[i]) : bf2f(s[i]);
  } else if constexpr (D == DType::q8_0) {
    const auto* b = static_cast<const tensor::BlockQ8_0*>(src);
    for (int64_t ib = 0; ib < n / 32; ++ib) {
      const auto d = T::set1(h2f(b[ib].d));
      for (int j = 0; j < 32; j += W) T::store(dst + ib * 32 + j, T::mul(d, T::from_i8(b[ib].qs + j)));
    }
  } else if constexpr (D == DType::q4_0) {
    const auto* b = static_cast<const tensor::BlockQ4_0*>(src);
    const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    alignas(16) int8_t q[32];
    static_assert(sizeof(tensor::BlockQ4_0) == 18);
    for (int64_t ib = 0; ib < n / 32; ++ib) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[ib].qs));
      _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm_sub_epi8(_mm_and_si128(raw, m4), eight));
      _mm_store_si128(reinterpret_cast<__m128i*>(q + 16),
                      _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), eight));
      const auto d = T::set1(h2f(b[ib].d));
      for (int j = 0; j < 32; j += W) T::store(dst + ib * 32 + j, T::mul(d, T::from_i8(q + j)));
    }
  } else if constexpr (D == DType::q4_k) {
    // Same expression as the reference (d*sc*q - dmin*m, each product rounded), so exact.
    const auto* b = static_cast<const tensor::BlockQ4_K*>(src);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    alignas(16) int8_t q[32];
    for (int64_t ib = 0; ib < n / 256; ++ib) {
      const float d = h2f(b[ib].d), dmin = h2f(b[ib].dmin);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, mn;
        q4k_scale_min(j, b[ib].scales, &sc, &mn);
        const auto vd = T::set1(d * static_cast<float>(sc)), vm = T::set1(dmin * static_cast<float>(mn));
        const uint8_t* qs = b[ib].qs + 32 * (j / 2);
        for (int h = 0; h < 2; ++h) {
          __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * h));
          if (j & 1) raw = _mm_srli_epi16(raw, 4);
          _mm_store_si128(reinterpret_cast<__m128i*>(q + 16 * h), _mm_and_si128(raw, m4));
        }
        float* out = dst + ib * 256 + 32 * j;
        for (int l = 0; l < 32; l += W) T::store(out + l, T::sub(T::mul(vd, T::from_i8(q + l)), vm));
      }
    }
  } else if constexpr (D == DType::q6_k) {
    const auto* b = static_cast<const tensor::BlockQ6_K*>(src);
    const __m128i m4 = _mm_set1_epi8(0x0F), m3 = _mm_set1_epi8(0x03), c32 = _mm_set1_epi8(32);
    alignas(16) int8_t q[32];
    for (int64_t ib = 0; ib < n / 256; ++ib) {
      const float d = h2f(b[ib].d);
      for (int j = 0; j < 8; ++j) {  // 32 values: half h, quarter k
        const int h = j / 4, k = j % 4;
        for (int p = 0; p < 2; ++p) {
          __m128i ql = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[ib].ql + 64 * h + 32 * (k & 1) + 16 * p));
          __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[ib].qh + 32 * h + 16 * p));
          if (k >> 1) ql = _mm_srli_epi16(ql, 4);
          qh = _mm_and_si128(_mm_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m3);
          const __m128i v = _mm_or_si128(_mm_and_si128(ql, m4), _mm_slli_epi16(qh, 4));
          _mm_store_si128(reinterpret_cast<__m128i*>(q + 16 * p), _mm_sub_epi8(v, c32));
        }
        float* out = dst + ib * 256 + 32 * j;
        for (int l = 0; l < 32; l += W) {
          // Reference: d * sc * q, i.e. (d * sc) * q with one rounding each.
          const auto vd = T::set1(d * static_cast<float>(b[ib].scales[2 * j + l / 16]));
          T::store(out + l, T::mul(vd, T::from_i8(q + l)));
        }
      }
    }
  } else {
    tensor::dequantize_row(D, src, dst, n);
  }
}

// ---- float matmul: RT weight rows x MB activation rows per register block ----------

// Weight vectors of a float tile: f32 rows (or dequantised scratch), or f16 / bf16 rows
// converted in the load (exact conversions, so the same values as dequant_row's).
template <class T, tensor::DType DW>
inline typename T::V load_w(const void* row, int64_t i) {
  if constexpr (DW == tensor::DType::f16) return T::from_f16(static_cast<const uint16_t*>(row) + i);
  else if constexpr (DW == tensor::DType::bf16) return T::from_bf16(static_cast<const uint16_t*>(row) + i);
  else return T::load(static_cast<const float*>(row) + i);
}
template <class T, tensor::DType DW>
inline typename T::V load_w_n(const void* row, int64_t i, int rem) {
  if constexpr (DW == tensor::DType::f16 || DW == tensor::DType::bf16) {
    alignas(64) float tmp[T::W];
    const auto* h = static_cast<const uint16_t*>(row) + i;
    for (int j = 0; j < rem; ++j) tmp[j] = DW == tensor::DType::f16 ? h2f(h[j]) : bf2f(h[j]);
    return T::load_n(tmp, rem);
  } else {
    return T::load_n(static_cast<const float*>(row) + i, rem);
  }
}

// out[m] receives the RT sums of activation row m (RT consecutive floats). DW: how the
// weight rows wr are stored (f32, f16 or bf16).
template <class T, int MBk, tensor::DType DW>
inline void micro_f32(const void* const* wr, const float* x, int64_t n, float* const* out) {
  using V = typename T::V;
  constexpr int RT = T::RT, W = T::W;
  V acc[MBk][RT];
  for (int m = 0; m < MBk; ++m)
    for (int r = 0; r < RT; ++r) acc[m][r] = T::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V xv[MBk];
    for (int m = 0; m < MBk; ++m) xv[m] = T::load(x + m * n + i);
    for (int r = 0; r < RT; ++r) {
      const V wv = load_w<T, DW>(wr[r], i);
      for (int m = 0; m < MBk; ++m) acc[m][r] = T::fma(wv, xv[m], acc[m][r]);
    }
  }
  if (i < n) {
    const int rem = static_cast<int>(n - i);
    V xv[MBk];
    for (int m = 0; m < MBk; ++m) xv[m] = T::load_n(x + m * n + i, rem);
    for (int r = 0; r < RT; ++r) {
      const V wv = load_w_n<T, DW>(wr[r], i, rem);
      for (int m = 0; m < MBk; ++m) acc[m][r] = T::fma(wv, xv[m], acc[m][r]);
    }
  }
  for (int m = 0; m < MBk; ++m) T::hsum_rows(acc[m], out[m]);
}

// f32, f16 and bf16 rows are read in place (f16 / bf16 converted in the load: at M = 1
// dequantising into scratch first cost half the bandwidth); other types are dequantised
// into a scratch tile of RT rows. Same operations either way, so the same results.
template <class T, tensor::DType D>
void matmul_rows_float(const WeightView& w, const float* x, const impl::ActQ8*, int64_t M, float* y, int64_t ldy,
                       int64_t r0, int64_t r1) {
  constexpr int RT = T::RT, MB = T::MB;
  constexpr bool kInPlace = D == tensor::DType::f32 || D == tensor::DType::f16 || D == tensor::DType::bf16;
  constexpr tensor::DType DW = kInPlace ? D : tensor::DType::f32;
  const int64_t n = w.n_in;
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  float* scratch = nullptr;  // [RT, n] dequantised tile
  if constexpr (!kInPlace) scratch = impl::thread_scratch(0, static_cast<size_t>(RT * n));
  for (int64_t t0 = r0; t0 < r1; t0 += RT) {
    const int rt = static_cast<int>(imin<int64_t>(RT, r1 - t0));
    const void* wr[RT];
    for (int r = 0; r < RT; ++r) {
      const int rr = imin(r, rt - 1);  // missing rows repeat the last one; results dropped
      if constexpr (kInPlace) {
        wr[r] = base + (t0 + rr) * rb;
      } else {
        if (r < rt) dequant_row<T, D>(base + (t0 + r) * rb, scratch + r * n, n);
        wr[r] = scratch + rr * n;
      }
    }
    // Full tiles write their sums straight into y; a partial tile goes through tmp.
    alignas(64) float tmp[MB][RT];
    float* out[MB];
    int64_t m = 0;
    for (; m + MB <= M; m += MB) {
      for (int mm = 0; mm < MB; ++mm) out[mm] = rt == RT ? y + (m + mm) * ldy + t0 : tmp[mm];
      micro_f32<T, MB, DW>(wr, x + m * n, n, out);
      if (rt < RT) {
        for (int mm = 0; mm < MB; ++mm)
          for (int r = 0; r < rt; ++r) y[(m + mm) * ldy + t0 + r] = tmp[mm][r];
      }
    }
    for (; m < M; ++m) {
      out[0] = rt == RT ? y + m * ldy + t0 : tmp[0];
      micro_f32<T, 1, DW>(wr, x + m * n, n, out);
      if (rt < RT) {
        for (int r = 0; r < rt; ++r) y[m * ldy + t0 + r] = tmp[0][r];
      }
    }
  }
}

// ---- row kernels -----------------------------------------------------------------------

template <class T>
void rmsnorm_t(const float* x, const float* weight, float* y, int64_t n, float eps) {
  using V = typename T::V;
  constexpr int W = T::W;
  V acc = T::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const V v = T::load(x + i);
    acc = T::fma(v, v, acc);
  }
  if (i < n) {
    const V v = T::load_n(x + i, static_cast<int>(n - i));
    acc = T::fma(v, v, acc);
  }
  float ss = T::hsum(acc);
  ss /= static_cast<float>(n);
  ss += eps;
  const float scale = 1.0f / __builtin_sqrtf(ss);
  const V s = T::set1(scale);
  for (i = 0; i + W <= n; i += W) T::store(y + i, T::mul(T::load(weight + i), T::mul(s, T::load(x + i))));
  for (; i < n; ++i) y[i] = weight[i] * (scale * x[i]);
}

// out = gelu_tanh(gate) * up, as ref_geglu: g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3).
template <class T>
void geglu_t(const float* gate, const float* up, float* out, int64_t n) {
  using V = typename T::V;
  constexpr int W = T::W;
  const V one = T::set1(1.0f), m2c = T::set1(-2.0f * 0.7978845608028654f), k = T::set1(0.044715f);
  auto act = [&](V g) {
    const V u = T::mul(m2c, T::add(g, T::mul(T::mul(k, g), T::mul(g, g))));
    return T::div(g, T::add(one, T::exp(u)));
  };
  int64_t i = 0;
  for (; i + W <= n; i += W) T::store(out + i, T::mul(act(T::load(gate + i)), T::load(up + i)));
  if (i < n) {
    const int rem = static_cast<int>(n - i);
    T::store_n(out + i, T::mul(act(T::load_n(gate + i, rem)), T::load_n(up + i, rem)), rem);
  }
}

template <class T>
void swiglu_t(const float* gate, const float* up, float* out, int64_t n) {
  using V = typename T::V;
  constexpr int W = T::W;
  const V one = T::set1(1.0f), neg = T::set1(-1.0f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const V g = T::load(gate + i);
    const V sig = T::div(one, T::add(one, T::exp(T::mul(g, neg))));
    T::store(out + i, T::mul(T::mul(g, sig), T::load(up + i)));
  }
  if (i < n) {
    const int rem = static_cast<int>(n - i);
    const V g = T::load_n(gate + i, rem);
    const V sig = T::div(one, T::add(one, T::exp(T::mul(g, neg))));
    T::store_n(out + i, T::mul(T::mul(g, sig), T::load_n(up + i, rem)), rem);
  }
}

// tanh(x), Cephes-style: x + x^3 P(x^2) below |x| = 0.625, else
// sign(x) (1 - 2 / (e^2|x| + 1)); about 2 ulp.
template <class T>
typename T::V tanh_v(typename T::V x) {
  using V = typename T::V;
  const V a = T::abs(x);
  const V big = T::sub(T::set1(1.0f), T::div(T::set1(2.0f), T::add(T::exp(T::add(a, a)), T::set1(1.0f))));
  const V s = T::mul(x, x);
  V p = T::set1(-5.70498872745E-3f);
  p = T::fma(p, s, T::set1(2.06390887954E-2f));
  p = T::fma(p, s, T::set1(-5.37397155531E-2f));
  p = T::fma(p, s, T::set1(1.33314422036E-1f));
  p = T::fma(p, s, T::set1(-3.33332819422E-1f));
  const V small = T::fma(T::mul(p, s), x, x);
  return T::select_lt(a, T::set1(0.625f), small, T::with_sign_of(big, x));
}

// x[i] = cap * tanh(x[i] / cap): logit soft-capping (Gemma 2).
template <class T>
void softcap_t(float* x, int64_t n, float cap) {
  constexpr int W = T::W;
  const typename T::V vc = T::set1(cap), vinv = T::set1(1.0f / cap);
  int64_t i = 0;
  for (; i + W <= n; i += W) T::store(x + i, T::mul(vc, tanh_v<T>(T::mul(T::load(x + i), vinv))));
  if (i < n) {
    const int rem = static_cast<int>(n - i);
    T::store_n(x + i, T::mul(vc, tanh_v<T>(T::mul(T::load_n(x + i, rem), vinv))), rem);
  }
}

template <class T>
void softmax_t(float* x, int64_t n) {
  using V = typename T::V;
  constexpr int W = T::W;
  if (n <= 0) return;
  float mx = -INFINITY;
  int64_t i = 0;
  if (n >= W) {
    V m = T::load(x);
    for (i = W; i + W <= n; i += W) m = T::max(m, T::load(x + i));
    mx = T::hmax(m);
  }
  for (; i < n; ++i) mx = imax(mx, x[i]);
  if (mx == -INFINITY) {
    for (i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  const V vm = T::set1(mx);
  V acc = T::zero();
  for (i = 0; i + W <= n; i += W) {
    const V e = T::exp(T::sub(T::load(x + i), vm));
    T::store(x + i, e);
    acc = T::add(acc, e);
  }
  if (i < n) {
    const int rem = static_cast<int>(n - i);
    T::store_n(x + i, T::exp(T::sub(T::load_n(x + i, rem), vm)), rem);
    acc = T::add(acc, T::load_n(x + i, rem));  // reload: padding lanes read as 0
  }
  const V sum = T::set1(T::hsum(acc));
  for (i = 0; i + W <= n; i += W) T::store(x + i, T::div(T::load(x + i), sum));
  if (i < n) {
    const int rem = static_cast<int>(n - i);
    T::store_n(x + i, T::div(T::load_n(x + i, rem), sum), rem);
  }
}

// Registers the float-path kernels of ISA traits T for every weight type.
template <class T>
void register_float_path(impl::KernelTable& t) {
  using tensor::DType;
  auto set = [&](DType d, impl::MatmulRowsFn mm, impl::ToFloatFn tf) {
    t.matmul_rows[static_cast<int>(d)] = mm;
    t.to_float[static_cast<int>(d)] = tf;
    t.act[static_cast<int>(d)] = impl::ActFormat::f32;
    t.row_grain[static_cast<int>(d)] = 16;
  };
  set(DType::f32, matmul_rows_float<T, DType::f32>, dequant_row<T, DType::f32>);
  set(DType::f16, matmul_rows_float<T, DType::f16>, dequant_row<T, DType::f16>);
  set(DType::bf16, matmul_rows_float<T, DType::bf16>, dequant_row<T, DType::bf16>);
  set(DType::q8_0, matmul_rows_float<T, DType::q8_0>, dequant_row<T, DType::q8_0>);
  set(DType::q4_0, matmul_rows_float<T, DType::q4_0>, dequant_row<T, DType::q4_0>);
  set(DType::q4_k, matmul_rows_float<T, DType::q4_k>, dequant_row<T, DType::q4_k>);
  set(DType::q6_k, matmul_rows_float<T, DType::q6_k>, dequant_row<T, DType::q6_k>);
  // Types dequantised by the scalar reference into the same float tiles (no SIMD
  // unpacking yet; the int8 kernels of avx512_vnni override the common ones).
  set(DType::q4_1, matmul_rows_float<T, DType::q4_1>, dequant_row<T, DType::q4_1>);
  set(DType::q5_0, matmul_rows_float<T, DType::q5_0>, dequant_row<T, DType::q5_0>);
  set(DType::q5_1, matmul_rows_float<T, DType::q5_1>, dequant_row<T, DType::q5_1>);
  set(DType::iq4_nl, matmul_rows_float<T, DType::iq4_nl>, dequant_row<T, DType::iq4_nl>);
  set(DType::q2_k, matmul_rows_float<T, DType::q2_k>, dequant_row<T, DType::q2_k>);
  set(DType::q3_k, matmul_rows_float<T, DType::q3_k>, dequant_row<T, DType::q3_k>);
  set(DType::q5_k, matmul_rows_float<T, DType::q5_k>, dequant_row<T, DType::q5_k>);
  set(DType::iq4_xs, matmul_rows_float<T, DType::iq4_xs>, dequant_row<T, DType::iq4_xs>);
  t.rmsnorm = rmsnorm_t<T>;
  t.swiglu = swiglu_t<T>;
  t.geglu = geglu_t<T>;
  t.softmax = softmax_t<T>;
  t.softcap = softcap_t<T>;
}

}  // namespace
}  // namespace treespec::kernels
