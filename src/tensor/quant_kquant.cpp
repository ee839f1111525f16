// The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS: super-blocks of 256 values
// (layouts in quant.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant_internal.h"

namespace treespec::tensor::detail {

// --- dequantisers ---------------------------------------------------------------------

void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const uint8_t sc = b[i].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      const int q = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    const float d = h2f(b[i].d);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const float dl = d * static_cast<float>(q3_k_scale(e / 16, b[i].scales) - 32);
      const int lo = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
      const int hi = (b[i].hmask[l] >> (4 * h + j)) & 1;
      y[e] = dl * static_cast<float>(lo - (hi ? 0 : 4));
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

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int j = 0; j < 8; ++j) {  // sub-block j: nibbles of qs[32 (j / 2) ..], bit j of qh
      uint8_t sc, m;
      q4_k_scale_min(j, b[i].scales, &sc, &m);
      const float dl = d * sc, ml = dmin * m;
      const uint8_t* q = b[i].qs + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((j & 1) ? q[l] >> 4 : q[l] & 0xF) | (((b[i].qh[l] >> j) & 1) << 4);
        y[32 * j + l] = dl * static_cast<float>(v) - ml;
      }
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

void deq_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 256) {
    const float d = h2f(b[i].d);
    for (int s = 0; s < 8; ++s) {
      const int ls = ((b[i].scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b[i].scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* q = b[i].qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[32 * s + j] = dl * static_cast<float>(kIq4nlValues[q[j] & 0xF]);
        y[32 * s + j + 16] = dl * static_cast<float>(kIq4nlValues[q[j] >> 4]);
      }
    }
  }
}

// --- quantisers -----------------------------------------------------------------------

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

// Q4_K / Q5_K: 8 sub-blocks of 32 fitted as x ~ sc * L - m, L in [0, kMaxQ]; the
// scales and mins quantised to 6 bits against the super-block's largest (d, dmin).
// Writes d, dmin, the 12 packed scale bytes and the values L[256].
template <int kMaxQ>
void quant_k_affine32(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* L) {
  float sub_scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    sub_scales[s] = fit_scale_min(x + 32 * s, 32, kMaxQ, &mins[s]);
    max_scale = std::max(max_scale, sub_scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const auto ls = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * sub_scales[j])));
    const auto lm = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = fp32_to_fp16(max_scale / 63.0f);
  *dmin_out = fp32_to_fp16(max_min / 63.0f);
  const float d = h2f(*d_out), dmin = h2f(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4_k_scale_min(j, scales, &sc, &m);
    const float ds = d * sc;
    const float dm = dmin * m;
    for (int l = 0; l < 32; ++l) {
      const int q = ds != 0.0f ? nearest_int((x[32 * j + l] + dm) / ds) : 0;
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, kMaxQ));
    }
  }
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    uint8_t L[256];
    quant_k_affine32<15>(x, &b[i].d, &b[i].dmin, b[i].scales, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    uint8_t L[256];
    quant_k_affine32<31>(x, &b[i].d, &b[i].dmin, b[i].scales, L);
    std::memset(b[i].qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        b[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quant_q2_k(const float* x, BlockQ2_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    float sub_scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      sub_scales[s] = fit_scale_min(x + 16 * s, 16, 3, &mins[s]);
      max_scale = std::max(max_scale, sub_scales[s]);
      max_min = std::max(max_min, mins[s]);
    }
    b[i].d = fp32_to_fp16(max_scale / 15.0f);
    b[i].dmin = fp32_to_fp16(max_min / 15.0f);
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int s = 0; s < 16; ++s) {
      const int ls = d > 0 ? std::clamp(nearest_int(sub_scales[s] / d), 0, 15) : 0;
      const int lm = dmin > 0 ? std::clamp(nearest_int(mins[s] / dmin), 0, 15) : 0;
      b[i].scales[s] = static_cast<uint8_t>(ls | (lm << 4));
    }
    std::memset(b[i].qs, 0, 64);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const uint8_t sc = b[i].scales[e / 16];
      const float ds = d * static_cast<float>(sc & 0xF), dm = dmin * static_cast<float>(sc >> 4);
      const int q = ds != 0.0f ? std::clamp(nearest_int((x[e] + dm) / ds), 0, 3) : 0;
      b[i].qs[32 * h + l] |= static_cast<uint8_t>(q << (2 * j));
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

void quant_q3_k(const float* x, BlockQ3_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    std::memset(&b[i], 0, sizeof(BlockQ3_K));
    float sub_scales[16];
    float amax = 0, max = 0;
    for (int s = 0; s < 16; ++s) {
      sub_scales[s] = fit_scale_sym(x + 16 * s, 16, 4);
      if (std::fabs(sub_scales[s]) > amax) {
        amax = std::fabs(sub_scales[s]);
        max = sub_scales[s];
      }
    }
    const float iscale = amax > 0 ? -32.0f / max : 0.0f;
    b[i].d = fp32_to_fp16(amax > 0 ? 1.0f / iscale : 0.0f);
    for (int s = 0; s < 16; ++s) {
      const int stored = std::clamp(nearest_int(iscale * sub_scales[s]), -32, 31) + 32;
      const int lo = stored & 15, hi = stored >> 4;
      if (s < 8) {
        b[i].scales[s] |= static_cast<uint8_t>(lo);
      } else {
        b[i].scales[s - 8] |= static_cast<uint8_t>(lo << 4);
      }
      b[i].scales[8 + (s & 3)] |= static_cast<uint8_t>(hi << (2 * (s >> 2)));
    }
    const float d = h2f(b[i].d);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const float ds = d * static_cast<float>(q3_k_scale(e / 16, b[i].scales) - 32);
      const int q = (ds != 0.0f ? std::clamp(nearest_int(x[e] / ds), -4, 3) : 0) + 4;
      b[i].qs[32 * h + l] |= static_cast<uint8_t>((q & 3) << (2 * j));
      b[i].hmask[l] |= static_cast<uint8_t>((q >> 2) << (4 * h + j));
    }
  }
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

void quant_iq4_xs(const float* x, BlockIQ4_XS* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    std::memset(&b[i], 0, sizeof(BlockIQ4_XS));
    float sub_scales[8];
    float amax = 0, max = 0;
    uint8_t L[32];
    for (int s = 0; s < 8; ++s) {
      sub_scales[s] = fit_iq4nl(x + 32 * s, 32, L);
      if (std::fabs(sub_scales[s]) > amax) {
        amax = std::fabs(sub_scales[s]);
        max = sub_scales[s];
      }
    }
    b[i].d = fp32_to_fp16(amax > 0 ? max / -32.0f : 0.0f);
    const float d = h2f(b[i].d);
    for (int s = 0; s < 8; ++s) {
      const int ls = (d != 0.0f ? std::clamp(nearest_int(sub_scales[s] / d), -32, 31) : 0) + 32;
      b[i].scales_l[s / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (s % 2)));
      b[i].scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * s));
      const float dl = d * static_cast<float>(ls - 32);
      const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(nearest_iq4nl(x[32 * s + j] * id));
      for (int j = 0; j < 16; ++j) b[i].qs[16 * s + j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
  }
}

}  // namespace treespec::tensor::detail
