// The 32-value block types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL (layouts in quant.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "tensor/quant_internal.h"

namespace treespec::tensor::detail {

namespace {

// The 5-bit values of a Q5_0 / Q5_1 block: q[j] = nibble | (bit << 4), j < 32.
void unpack5(const uint8_t* qs, const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void pack5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

// The block's value of largest magnitude (signed) and its magnitude.
float signed_max(const float* x, int n, float* amax_out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  *amax_out = amax;
  return max;
}

}  // namespace

// Index of the grid value nearest to v (the lower one on a tie): a binary search over
// the midpoints between neighbouring grid values.
int nearest_iq4nl(float v) {
  static const auto mid = [] {
    std::array<float, 15> m{};
    for (int k = 0; k < 15; ++k) m[k] = 0.5f * static_cast<float>(kIq4nlValues[k] + kIq4nlValues[k + 1]);
    return m;
  }();
  int lo = 0, hi = 15;  // answer in [lo, hi]: v > mid[k] for all k < lo, not for k >= hi
  while (lo < hi) {
    const int k = (lo + hi) / 2;
    if (v > mid[static_cast<size_t>(k)]) {
      lo = k + 1;
    } else {
      hi = k;
    }
  }
  return lo;
}

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

void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = d * static_cast<float>(b[i].qs[j] & 0x0f) + m;
      y[i * 32 + j + 16] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
    }
  }
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    int q[32];
    unpack5(b[i].qs, b[i].qh, q);
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = d * static_cast<float>(q[j] - 16);
  }
}

void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    int q[32];
    unpack5(b[i].qs, b[i].qh, q);
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = d * static_cast<float>(q[j]) + m;
  }
}

void deq_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = d * static_cast<float>(kIq4nlValues[b[i].qs[j] & 0x0f]);
      y[i * 32 + j + 16] = d * static_cast<float>(kIq4nlValues[b[i].qs[j] >> 4]);
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
    float amax;
    const float max = signed_max(x, 32, &amax);
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

// Q4_1 / Q5_1: the block's range split into 2^bits - 1 steps from its minimum.
template <int kMaxQ>
void quant_affine(const float* x, uint16_t* d_out, uint16_t* m_out, int* q) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / static_cast<float>(kMaxQ);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = fp32_to_fp16(d);
  *m_out = fp32_to_fp16(lo);
  for (int j = 0; j < 32; ++j) q[j] = std::clamp(static_cast<int>((x[j] - lo) * id + 0.5f), 0, kMaxQ);
}

void quant_q4_1(const float* x, BlockQ4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    int q[32];
    quant_affine<15>(x, &b[i].d, &b[i].m, q);
    for (int j = 0; j < 16; ++j) b[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax;
    const float max = signed_max(x, 32, &amax);
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    pack5(q, b[i].qs, b[i].qh);
  }
}

void quant_q5_1(const float* x, BlockQ5_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    int q[32];
    quant_affine<31>(x, &b[i].d, &b[i].m, q);
    pack5(q, b[i].qs, b[i].qh);
  }
}

float fit_iq4nl(const float* x, int n, uint8_t* L) {
  float amax;
  const float max = signed_max(x, n, &amax);
  if (amax == 0.0f) {
    for (int j = 0; j < n; ++j) L[j] = 8;  // value 1 * d = 0
    return 0.0f;
  }
  // Candidate scales map the largest magnitude to the grid's end (-127) and a little
  // inside it; each is refined by least squares and the best kept.
  float best_d = max / static_cast<float>(kIq4nlValues[0]);
  double best_err = INFINITY;
  uint8_t cand[32];
  for (int is = -3; is <= 3; ++is) {  // 7 candidates (19 gave 0.3% less error, 2.7x the time)
    const float id = (static_cast<float>(kIq4nlValues[0]) + 3.0f * static_cast<float>(is)) / max;
    double sxv = 0, svv = 0;
    for (int j = 0; j < n; ++j) {
      cand[j] = static_cast<uint8_t>(nearest_iq4nl(x[j] * id));
      const double v = kIq4nlValues[cand[j]];
      sxv += x[j] * v;
      svv += v * v;
    }
    if (svv <= 0) continue;
    const double d = sxv / svv;
    double err = 0;
    for (int j = 0; j < n; ++j) {
      const double e = d * kIq4nlValues[cand[j]] - x[j];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_d = static_cast<float>(d);
      std::memcpy(L, cand, static_cast<size_t>(n));
    }
  }
  return best_d;
}

void quant_iq4_nl(const float* x, BlockIQ4_NL* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    uint8_t L[32];
    const float d = fit_iq4nl(x, 32, L);
    b[i].d = fp32_to_fp16(d);
    // Re-pick the indices for the stored (f16) scale.
    const float dq = h2f(b[i].d);
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(nearest_iq4nl(x[j] * id));
    for (int j = 0; j < 16; ++j) b[i].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

}  // namespace treespec::tensor::detail
