// Attention over a paged KV cache (kernels.h attention_rows), written once over the
// vector traits of simd.h and compiled in each ISA translation unit (avx2.cpp,
// avx512.cpp); the same anonymous-namespace rule as simd.h applies.
//
// head_dim a multiple of 8 (every real model; stories260K has 8): scores for 8 cells at
// a time, one 8-wide accumulator chain per (query, cell) over the head dims, then one
// horizontal add tree for the 8 cells; the value sum keeps each query's output in
// registers with two chains per 8 dims (even / odd cells). Every query's arithmetic is
// fixed by head_dim alone, never by how many rows or heads share the call (batch
// invariance). Other head dims: scalar loops.
//
// The query heads of a GQA group (the heads sharing one KV head) are computed together
// two at a time: each K or V row is widened to f32 once for both (kv_load8: F16C, a
// shift for bf16, d * q for q8_0), which halves the conversions; the operations of each
// query are those it would get alone. A decode step is the case this is for: one row,
// the whole prefix streamed from DRAM, where the widening used to be half the work.
//
// Streaming: inside a sequence's block of the pool, a KV head's 16 cells are 4 KiB, and
// consecutive blocks of one sequence are far apart in memory, so the hardware
// prefetchers restart every 16 cells. The first query of a call prefetches the rows
// kAttnAhead cells ahead (into L2) as it goes.
#pragma once

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kernels/x86/simd.h"

namespace treespec::kernels {
namespace {

// Values i..i+7 (i a multiple of 8) of one KV row as f32 (exact: q8_0 is d * q).
template <tensor::DType D>
inline __m256 kv_load8(const uint8_t* row, int64_t i) {
  using tensor::DType;
  if constexpr (D == DType::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (D == DType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  } else if constexpr (D == DType::bf16) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  } else {
    static_assert(D == DType::q8_0);
    const auto* b = reinterpret_cast<const tensor::BlockQ8_0*>(row) + i / tensor::kQK8_0;
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + i % tensor::kQK8_0));
    return _mm256_mul_ps(_mm256_set1_ps(h2f(b->d)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
}

// Value j of one KV row as f32 (the scalar paths).
template <tensor::DType D>
inline float kv_load1(const uint8_t* row, int64_t j) {
  using tensor::DType;
  if constexpr (D == DType::f32) {
    return reinterpret_cast<const float*>(row)[j];
  } else if constexpr (D == DType::f16) {
    return h2f(reinterpret_cast<const uint16_t*>(row)[j]);
  } else if constexpr (D == DType::bf16) {
    return bf2f(reinterpret_cast<const uint16_t*>(row)[j]);
  } else {
    static_assert(D == DType::q8_0);
    const auto* b = reinterpret_cast<const tensor::BlockQ8_0*>(row) + j / tensor::kQK8_0;
    return h2f(b->d) * static_cast<float>(b->qs[j % tensor::kQK8_0]);
  }
}

// Bytes of one KV row of head_dim values in the cache's type.
inline int64_t kv_row_bytes(tensor::DType t, int64_t hd) {
  switch (t) {
    case tensor::DType::f16:
    case tensor::DType::bf16: return 2 * hd;
    case tensor::DType::q8_0: return hd / tensor::kQK8_0 * static_cast<int64_t>(sizeof(tensor::BlockQ8_0));
    default: return 4 * hd;
  }
}

constexpr int64_t kAttnAhead = 64;  // cells: 16 KiB of f16 rows of 128 dims

inline void prefetch_row(const uint8_t* row, int64_t bytes) {
  for (int64_t l = 0; l < bytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(row + l), _MM_HINT_T1);
}

// r[j] = sum of the 8 lanes of a[j] (fixed order).
inline __m256 reduce8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// out[h][j] = scale * dot(q[h], k8[j]) for 8 key rows and kH (1 or 2) queries.
template <tensor::DType D, int kH>
inline void scores8(const float* const* q, const uint8_t* const* k8, int64_t hd, float scale, float* const* out) {
  __m256 acc[kH][8];
  for (int h = 0; h < kH; ++h)
    for (int j = 0; j < 8; ++j) acc[h][j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < hd; i += 8) {
    __m256 qv[kH];
    for (int h = 0; h < kH; ++h) qv[h] = _mm256_loadu_ps(q[h] + i);
    for (int j = 0; j < 8; ++j) {
      const __m256 kv = kv_load8<D>(k8[j], i);
      for (int h = 0; h < kH; ++h) acc[h][j] = _mm256_fmadd_ps(qv[h], kv, acc[h][j]);
    }
  }
  for (int h = 0; h < kH; ++h) _mm256_storeu_ps(out[h], _mm256_mul_ps(reduce8(acc[h]), _mm256_set1_ps(scale)));
}

// Scores of cells cell(0..n-1) for kH queries, 8 cells at a time (a short last group
// repeats its last cell; the extra results are dropped, so every cell gets the same
// operations). With ahead != null, ahead(t) is the row kAttnAhead cells past cell t, or
// null, to prefetch.
template <tensor::DType D, int kH, typename CellFn, typename AheadFn>
inline void scores_list(const float* const* q, const KvRows& k, int64_t hd, float scale, int64_t n, CellFn cell,
                        const AheadFn& ahead, float* const* s) {
  alignas(32) float tmp[kH][8];
  const int64_t rb = kv_row_bytes(k.type, hd);
  for (int64_t t0 = 0; t0 < n; t0 += 8) {
    const uint8_t* k8[8];
    for (int j = 0; j < 8; ++j) k8[j] = k.row(cell(imin<int64_t>(t0 + j, n - 1)));
    if constexpr (!std::is_same_v<AheadFn, std::nullptr_t>) {
      for (int j = 0; j < 8; ++j)
        if (const uint8_t* p = ahead(t0 + j)) prefetch_row(p, rb);
    }
    float* out[kH];
    const bool full = t0 + 8 <= n;
    for (int h = 0; h < kH; ++h) out[h] = full ? s[h] + t0 : tmp[h];
    scores8<D, kH>(q, k8, hd, scale, out);
    if (!full) {
      for (int h = 0; h < kH; ++h)
        for (int64_t j = 0; j < n - t0; ++j) s[h][t0 + j] = tmp[h][j];
    }
  }
}

// Scalar score of one cell (head sizes that are not a multiple of 8).
template <tensor::DType D>
inline float score1(const float* q, const uint8_t* krow, int64_t hd, float scale) {
  float d = 0.0f;
  for (int64_t i = 0; i < hd; ++i) d += q[i] * kv_load1<D>(krow, i);
  return d * scale;
}

// o[h][0..hd) += sum_t w[h][t] * v[cell(t)] for kH (1 or 2) queries, dims in blocks of
// 64 / kH kept in registers: two accumulator chains per 8 dims (even / odd t), added at
// the end of each call. Per output lane the operations do not depend on kH.
template <tensor::DType D, int kH, typename CellFn, typename AheadFn>
inline void values_list(const float* const* w, const KvRows& v, int64_t hd, int64_t n, CellFn cell,
                        const AheadFn& ahead, float* const* o) {
  constexpr int64_t kDims = 64 / kH;
  const int64_t rb = kv_row_bytes(v.type, hd);
  for (int64_t d0 = 0; d0 < hd; d0 += kDims) {
    const int nv = static_cast<int>(imin<int64_t>(kDims, hd - d0) / 8);
    __m256 e[kH][kDims / 8], f[kH][kDims / 8];
    for (int h = 0; h < kH; ++h) {
      for (int i = 0; i < nv; ++i) {
        e[h][i] = _mm256_loadu_ps(o[h] + d0 + 8 * i);
        f[h][i] = _mm256_setzero_ps();
      }
    }
    int64_t t = 0;
    for (; t + 2 <= n; t += 2) {
      const uint8_t* v0 = v.row(cell(t));
      const uint8_t* v1 = v.row(cell(t + 1));
      if constexpr (!std::is_same_v<AheadFn, std::nullptr_t>) {
        if (d0 == 0) {
          if (const uint8_t* p = ahead(t)) prefetch_row(p, rb);
          if (const uint8_t* p = ahead(t + 1)) prefetch_row(p, rb);
        }
      }
      __m256 w0[kH], w1[kH];
      for (int h = 0; h < kH; ++h) {
        w0[h] = _mm256_set1_ps(w[h][t]);
        w1[h] = _mm256_set1_ps(w[h][t + 1]);
      }
      for (int i = 0; i < nv; ++i) {
        const __m256 a = kv_load8<D>(v0, d0 + 8 * i), b = kv_load8<D>(v1, d0 + 8 * i);
        for (int h = 0; h < kH; ++h) {
          e[h][i] = _mm256_fmadd_ps(w0[h], a, e[h][i]);
          f[h][i] = _mm256_fmadd_ps(w1[h], b, f[h][i]);
        }
      }
    }
    if (t < n) {
      const uint8_t* v0 = v.row(cell(t));
      for (int i = 0; i < nv; ++i) {
        const __m256 a = kv_load8<D>(v0, d0 + 8 * i);
        for (int h = 0; h < kH; ++h) e[h][i] = _mm256_fmadd_ps(_mm256_set1_ps(w[h][t]), a, e[h][i]);
      }
    }
    for (int h = 0; h < kH; ++h)
      for (int i = 0; i < nv; ++i) _mm256_storeu_ps(o[h] + d0 + 8 * i, _mm256_add_ps(e[h][i], f[h][i]));
  }
}

// Committed cells in chunks of kAttnChunk: a chunk's K/V rows stay in L1/L2 while every
// query of the call uses them.
constexpr int64_t kAttnChunk = 128;

// Calls fn.template operator()<kH>(h0) for the query heads of a GQA group in pairs, the
// last one alone when n_head is odd.
template <class Fn>
inline void for_head_pairs(int64_t n_head, Fn&& fn) {
  int64_t h = 0;
  for (; h + 2 <= n_head; h += 2) fn.template operator()<2>(h);
  if (h < n_head) fn.template operator()<1>(h);
}

// Scores and softmax of every (row, head) query into scratch rows of `stride` floats;
// zeroes the outputs.
template <class T, tensor::DType DK>
void attention_scores(const AttentionRows& a, int64_t stride) {
  const int64_t hd = a.head_dim;
  auto qptr = [&](int64_t i, int64_t h) { return a.q + i * a.ldq + h * hd; };
  auto srow = [&](int64_t i, int64_t h) { return a.scratch + (i * a.n_head + h) * stride; };
  const int64_t rb = kv_row_bytes(a.k.type, hd);
  auto begin = [&](int64_t i) { return a.window_begin ? a.window_begin[i] : int64_t{0}; };
  if (hd % 8 != 0) {
    for (int64_t i = 0; i < a.n_rows; ++i) {
      for (int64_t h = 0; h < a.n_head; ++h) {
        float* s = srow(i, h);
        for (int64_t t = imin(begin(i), a.n_committed); t < a.n_committed; ++t) {
          s[t] = score1<DK>(qptr(i, h), a.k.row(t), hd, a.scale);
        }
        for (int32_t e = 0; e < a.n_extra[i]; ++e)
          s[a.n_committed + e] = score1<DK>(qptr(i, h), a.k.row(a.extra[i][e]), hd, a.scale);
      }
    }
  } else {
    for (int64_t c0 = 0; c0 < a.n_committed; c0 += kAttnChunk) {
      const int64_t c1 = imin(a.n_committed, c0 + kAttnChunk);
      auto cell = [&](int64_t t) { return c0 + t; };
      auto ahead = [&](int64_t t) -> const uint8_t* {
        const int64_t c = c0 + t + kAttnAhead;
        return c < a.n_committed ? a.k.row(c) : nullptr;
      };
      if (c0 == 0) {  // the first rows nobody prefetched
        for (int64_t c = 0; c < imin(a.n_committed, kAttnAhead); ++c) prefetch_row(a.k.row(c), rb);
      }
      for (int64_t i = 0; i < a.n_rows; ++i) {
        if (c1 <= begin(i)) continue;  // outside the row's window: masked below
        for_head_pairs(a.n_head, [&]<int kH>(int64_t h0) {
          const float* q[kH];
          float* s[kH];
          for (int h = 0; h < kH; ++h) {
            q[h] = qptr(i, h0 + h);
            s[h] = srow(i, h0 + h) + c0;
          }
          if (i == 0 && h0 == 0) {
            scores_list<DK, kH>(q, a.k, hd, a.scale, c1 - c0, cell, ahead, s);
          } else {
            scores_list<DK, kH>(q, a.k, hd, a.scale, c1 - c0, cell, nullptr, s);
          }
        });
      }
    }
    for (int64_t i = 0; i < a.n_rows; ++i) {
      const int32_t* ex = a.extra[i];
      for_head_pairs(a.n_head, [&]<int kH>(int64_t h0) {
        const float* q[kH];
        float* s[kH];
        for (int h = 0; h < kH; ++h) {
          q[h] = qptr(i, h0 + h);
          s[h] = srow(i, h0 + h) + a.n_committed;
        }
        scores_list<DK, kH>(
            q, a.k, hd, a.scale, a.n_extra[i], [&](int64_t t) { return static_cast<int64_t>(ex[t]); }, nullptr, s);
      });
    }
  }
  for (int64_t i = 0; i < a.n_rows; ++i) {
    const int64_t n_vis = a.n_committed + a.n_extra[i];
    for (int64_t h = 0; h < a.n_head; ++h) {
      float* s = srow(i, h);
      if (a.softcap > 0.0f) softcap_t<T>(s + begin(i), n_vis - imin(begin(i), n_vis), a.softcap);
      for (int64_t t = 0; t < imin(begin(i), n_vis); ++t) s[t] = -INFINITY;
      softmax_t<T>(s, n_vis);
      float* o = a.out + i * a.ldo + h * hd;
      for (int64_t j = 0; j < hd; ++j) o[j] = 0.0f;
    }
  }
}

// Value sum over the visible cells in *logical* order (committed cells, then the row's
// tree cells), in chunks at fixed multiples of kAttnChunk of that order. A row at depth
// d over n committed cells and a one-row step over n + d committed cells see the same
// list of (weight, value) pairs, so the chunk and chain boundaries, and hence the bits,
// must depend on the logical index alone, never on where the committed part ends (that
// split is what differs between a tree row and the plain step).
template <tensor::DType DV>
void attention_values(const AttentionRows& a, int64_t stride) {
  const int64_t hd = a.head_dim;
  const int64_t rb = kv_row_bytes(a.v.type, hd);
  const int64_t nc = a.n_committed;
  for (int64_t c = 0; c < imin(nc, kAttnAhead); ++c) prefetch_row(a.v.row(c), rb);
  for (int64_t c0 = 0; c0 < stride; c0 += kAttnChunk) {
    for (int64_t i = 0; i < a.n_rows; ++i) {
      const int64_t n_vis = nc + a.n_extra[i];
      if (c0 >= n_vis) continue;
      // All weights 0 (before the row's window): adding them changes no bit.
      if (a.window_begin != nullptr && c0 + kAttnChunk <= a.window_begin[i]) continue;
      const int64_t c1 = imin(n_vis, c0 + kAttnChunk);
      const int32_t* ex = a.extra[i];
      auto cell = [&](int64_t t) {
        const int64_t l = c0 + t;
        return l < nc ? l : static_cast<int64_t>(ex[l - nc]);
      };
      if (hd % 8 != 0) {
        for (int64_t h = 0; h < a.n_head; ++h) {
          const float* s = a.scratch + (i * a.n_head + h) * stride;
          float* o = a.out + i * a.ldo + h * hd;
          for (int64_t t = 0; t < c1 - c0; ++t) {
            const uint8_t* vr = a.v.row(cell(t));
            for (int64_t j = 0; j < hd; ++j) o[j] += s[c0 + t] * kv_load1<DV>(vr, j);
          }
        }
        continue;
      }
      auto ahead = [&](int64_t t) -> const uint8_t* {
        const int64_t c = c0 + t + kAttnAhead;
        return c < nc ? a.v.row(c) : nullptr;
      };
      for_head_pairs(a.n_head, [&]<int kH>(int64_t h0) {
        const float* w[kH];
        float* o[kH];
        for (int h = 0; h < kH; ++h) {
          w[h] = a.scratch + (i * a.n_head + h0 + h) * stride + c0;
          o[h] = a.out + i * a.ldo + (h0 + h) * hd;
        }
        if (i == 0 && h0 == 0) {
          values_list<DV, kH>(w, a.v, hd, c1 - c0, cell, ahead, o);
        } else {
          values_list<DV, kH>(w, a.v, hd, c1 - c0, cell, nullptr, o);
        }
      });
    }
  }
}

template <class T>
void attention_rows_t(const AttentionRows& a) {
  using tensor::DType;
  int64_t max_extra = 0;
  for (int64_t i = 0; i < a.n_rows; ++i) max_extra = imax<int64_t>(max_extra, a.n_extra[i]);
  const int64_t stride = a.n_committed + max_extra;
  switch (a.k.type) {
    case DType::f16: attention_scores<T, DType::f16>(a, stride); break;
    case DType::bf16: attention_scores<T, DType::bf16>(a, stride); break;
    case DType::q8_0: attention_scores<T, DType::q8_0>(a, stride); break;
    default: attention_scores<T, DType::f32>(a, stride); break;
  }
  switch (a.v.type) {
    case DType::f16: attention_values<DType::f16>(a, stride); break;
    case DType::bf16: attention_values<DType::bf16>(a, stride); break;
    case DType::q8_0: attention_values<DType::q8_0>(a, stride); break;
    default: attention_values<DType::f32>(a, stride); break;
  }
}

template <class T>
void register_attention(impl::KernelTable& t) {
  t.attention_rows = attention_rows_t<T>;
}

}  // namespace
}  // namespace treespec::kernels
