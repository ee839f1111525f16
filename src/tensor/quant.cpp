#include "tensor/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/assert.h"
#include "tensor/fp16.h"

namespace treespec::tensor {

namespace {

inline float h2f(uint16_t h) { return fp16_to_fp32(h); }

int nearest_int(float x) { return static_cast<int>(std::lround(x)); }

// --- dequantisers ---------------------------------------------------------------------

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
      y[i * 32 + j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    const float dmin = h2f(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c) {  // 64 values per chunk: sub-blocks 2c (low) and 2c+1 (high)
      uint8_t sc, m;
      q4_k_scale_min(2 * c, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(2 * c + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
      q += 32;
      y += 64;
    }
  }
}

void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half) {  // 128 values: ql[64], qh[32], scales[8]
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

// --- quantisers -----------------------------------------------------------------------

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f, max = 0.0f;  // max: the signed value of largest magnitude
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Fits x[n] ~ scale * L - mn with L in [0, nmax], mn >= 0, by trying a few scales and
// refining each by least squares. Returns scale; *mn receives the (non-negative) min.
float fit_scale_min(const float* x, int n, int nmax, float* mn) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) {
    *mn = -lo;
    return 0.0f;
  }
  float best_err = INFINITY, best_scale = (hi - lo) / static_cast<float>(nmax), best_min = lo;
  for (int is = -4; is <= 8; ++is) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / (hi - lo);
    int L[256];
    double sl = 0, sl2 = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      L[i] = std::clamp(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      sl += L[i];
      sl2 += static_cast<double>(L[i]) * L[i];
      sx += x[i];
      sxl += static_cast<double>(x[i]) * L[i];
    }
    // least squares for x ~ s*L + m
    const double det = n * sl2 - sl * sl;
    double s, m;
    if (det > 0) {
      s = (n * sxl - sl * sx) / det;
      m = (sl2 * sx - sl * sxl) / det;
    } else {
      s = 1.0 / iscale;
      m = lo;
    }
    if (m > 0) {  // the format stores x = d*q - min with min >= 0
      m = 0;
      s = sl2 > 0 ? sxl / sl2 : 0;
    }
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * L[i] + m - x[i];
      err += e * e;
    }
    if (err < best_err && s > 0) {
      best_err = static_cast<float>(err);
      best_scale = static_cast<float>(s);
      best_min = static_cast<float>(m);
    }
  }
  *mn = -best_min;
  return best_scale;
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    float scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; ++s) {
      scales[s] = fit_scale_min(x + 32 * s, 32, 15, &mins[s]);
      max_scale = std::max(max_scale, scales[s]);
      max_min = std::max(max_min, mins[s]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    std::memset(b[i].scales, 0, 12);
    for (int j = 0; j < 8; ++j) {
      const auto ls = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
      const auto lm = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
      if (j < 4) {
        b[i].scales[j] = ls;
        b[i].scales[j + 4] = lm;
      } else {
        b[i].scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        b[i].scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        b[i].scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    b[i].d = fp32_to_fp16(max_scale / 63.0f);
    b[i].dmin = fp32_to_fp16(max_min / 63.0f);
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    uint8_t L[256];
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4_k_scale_min(j, b[i].scales, &sc, &m);
      const float ds = d * sc;
      const float dm = dmin * m;
      for (int l = 0; l < 32; ++l) {
        const int q = ds != 0.0f ? nearest_int((x[32 * j + l] + dm) / ds) : 0;
        L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, 15));
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
  }
}

// Symmetric fit x ~ s * L with L in [-nmax, nmax - 1]: tries scales around the one that
// maps the largest magnitude to -nmax and keeps the least-squares best.
float fit_scale_sym(const float* x, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0) return 0.0f;
  float best_err = INFINITY, best = -max / static_cast<float>(nmax);
  for (int is = -9; is <= 9; ++is) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    double sxl = 0, sl2 = 0;
    int L[32];
    for (int i = 0; i < n; ++i) {
      L[i] = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      sxl += static_cast<double>(x[i]) * L[i];
      sl2 += static_cast<double>(L[i]) * L[i];
    }
    if (sl2 <= 0) continue;
    const double s = sxl / sl2;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * L[i] - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best = static_cast<float>(s);
    }
  }
  return best;
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    float scales[16];
    float amax = 0, max = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_scale_sym(x + 16 * s, 16, 32);
      if (std::fabs(scales[s]) > amax) {
        amax = std::fabs(scales[s]);
        max = scales[s];
      }
    }
    if (amax == 0) {
      std::memset(&b[i], 0, sizeof(BlockQ6_K));  // d = 0: every value dequantises to 0
      continue;
    }
    const float iscale = -128.0f / max;
    b[i].d = fp32_to_fp16(1.0f / iscale);
    for (int s = 0; s < 16; ++s) b[i].scales[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[s])));
    const float d = h2f(b[i].d);
    uint8_t L[256];
    for (int s = 0; s < 16; ++s) {
      const float ds = d * static_cast<float>(b[i].scales[s]);
      for (int l = 0; l < 16; ++l) {
        const int q = ds != 0.0f ? nearest_int(x[16 * s + l] / ds) : 0;
        L[16 * s + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = b[i].ql;
    uint8_t* qh = b[i].qh;
    for (int j = 0; j < 256; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
  }
}

void check_n(DType t, int64_t n, const char* what) {
  const int64_t bs = dtype_traits(t).block_size;
  TREESPEC_ASSERT(n >= 0 && n % bs == 0, what);
}

}  // namespace

bool quant_supported(DType t) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_k:
    case DType::q6_k: return true;
    default: return false;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_n(t, n, "dequantize_row: n is not a multiple of the block size");
  switch (t) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::f16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::bf16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::q8_0: deq_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / 32); return;
    case DType::q4_0: deq_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / 32); return;
    case DType::q4_k: deq_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / 256); return;
    case DType::q6_k: deq_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / 256); return;
    default: TREESPEC_ASSERT(false, "dequantize_row: unsupported type");
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_n(t, n, "quantize_row: n is not a multiple of the block size");
  switch (t) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::q8_0: quant_q8_0(src, static_cast<BlockQ8_0*>(dst), n / 32); return;
    case DType::q4_0: quant_q4_0(src, static_cast<BlockQ4_0*>(dst), n / 32); return;
    case DType::q4_k: quant_q4_k(src, static_cast<BlockQ4_K*>(dst), n / 256); return;
    case DType::q6_k: quant_q6_k(src, static_cast<BlockQ6_K*>(dst), n / 256); return;
    default: TREESPEC_ASSERT(false, "quantize_row: unsupported type");
  }
}

}  // namespace treespec::tensor
