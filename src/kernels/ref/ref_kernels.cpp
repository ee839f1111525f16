// Scalar reference kernels: the oracle every ISA-specific kernel is tested against.
// Plain loops in a fixed summation order.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/impl.h"
#include "tensor/fp16.h"

namespace treespec::kernels {

namespace {

using tensor::DType;

void to_float_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void to_float_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = tensor::fp16_to_fp32(s[i]);
}

void to_float_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = tensor::bf16_to_fp32(s[i]);
}

void to_float_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / tensor::kQK8_0; ++i, b += 34) {
    uint16_t dh;
    std::memcpy(&dh, b, 2);
    const float d = tensor::fp16_to_fp32(dh);
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) dst[i * 32 + j] = d * static_cast<float>(q[j]);
  }
}

void to_float_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / tensor::kQK4_0; ++i, b += 18) {
    uint16_t dh;
    std::memcpy(&dh, b, 2);
    const float d = tensor::fp16_to_fp32(dh);
    const uint8_t* q = b + 2;
    for (int j = 0; j < 16; ++j) {
      dst[i * 32 + j] = d * static_cast<float>((q[j] & 0x0f) - 8);
      dst[i * 32 + j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
    }
  }
}

// Generic: dequantise one weight row into a thread-local buffer, then dot with every x row.

void matmul_rows_generic(impl::ToFloatFn to_float, const WeightView& w, const float* x, int64_t M, float* y,
                         int64_t ldy, int64_t r0, int64_t r1) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(w.n_in));
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    to_float(base + r * rb, row.data(), w.n_in);
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * w.n_in;
      float acc = 0.0f;
      for (int64_t i = 0; i < w.n_in; ++i) acc += row[static_cast<size_t>(i)] * xm[i];
      y[m * ldy + r] = acc;
    }
  }
}

void matmul_rows_f32(const WeightView& w, const float* x, int64_t M, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const auto* W = static_cast<const float*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr = W + r * w.n_in;
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * w.n_in;
      float acc = 0.0f;
      for (int64_t i = 0; i < w.n_in; ++i) acc += wr[i] * xm[i];
      y[m * ldy + r] = acc;
    }
  }
}

#define TREESPEC_GENERIC_MATMUL(name, conv)                                                                    \
  void name(const WeightView& w, const float* x, int64_t M, float* y, int64_t ldy, int64_t r0, int64_t r1) { \
    matmul_rows_generic(conv, w, x, M, y, ldy, r0, r1);                                                       \
  }
TREESPEC_GENERIC_MATMUL(matmul_rows_f16, to_float_f16)
TREESPEC_GENERIC_MATMUL(matmul_rows_bf16, to_float_bf16)
TREESPEC_GENERIC_MATMUL(matmul_rows_q8_0, to_float_q8_0)
TREESPEC_GENERIC_MATMUL(matmul_rows_q4_0, to_float_q4_0)
#undef TREESPEC_GENERIC_MATMUL

}  // namespace

void impl::register_ref(KernelTable& t) {
  auto set = [&](DType d, MatmulRowsFn mm, ToFloatFn tf) {
    t.matmul_rows[static_cast<int>(d)] = mm;
    t.to_float[static_cast<int>(d)] = tf;
  };
  set(DType::f32, matmul_rows_f32, to_float_f32);
  set(DType::f16, matmul_rows_f16, to_float_f16);
  set(DType::bf16, matmul_rows_bf16, to_float_bf16);
  set(DType::q8_0, matmul_rows_q8_0, to_float_q8_0);
  set(DType::q4_0, matmul_rows_q4_0, to_float_q4_0);
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss /= static_cast<float>(n);
  ss += eps;
  const float scale = 1.0f / std::sqrt(ss);
  for (int64_t i = 0; i < n; ++i) y[i] = weight[i] * (scale * x[i]);
}

void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const float* inv_freq, bool neox,
          float attn_factor) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float theta = static_cast<float>(pos) * inv_freq[i];
      const float c = std::cos(theta) * attn_factor;
      const float s = std::sin(theta) * attn_factor;
      const int64_t a = neox ? i : 2 * i;
      const int64_t b = neox ? i + half : 2 * i + 1;
      const float v0 = v[a];
      const float v1 = v[b];
      v[a] = v0 * c - v1 * s;
      v[b] = v0 * s + v1 * c;
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  if (mx == -std::numeric_limits<float>::infinity()) {  // nothing visible: uniform zero
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void attention_row(const float* q, const float* k, const float* v, int64_t n_head, int64_t n_head_kv,
                   int64_t head_dim, int64_t n_cells, int64_t n_committed, const int32_t* extra, int64_t n_extra,
                   float scale, float* scratch, float* out) {
  const int64_t group = n_head / n_head_kv;
  const int64_t n_vis = n_committed + n_extra;
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * head_dim;
    const float* kg = k + g * n_cells * head_dim;
    const float* vg = v + g * n_cells * head_dim;
    for (int64_t t = 0; t < n_vis; ++t) {
      const int64_t cell = t < n_committed ? t : extra[t - n_committed];
      const float* kt = kg + cell * head_dim;
      float s = 0.0f;
      for (int64_t i = 0; i < head_dim; ++i) s += qh[i] * kt[i];
      scratch[t] = s * scale;
    }
    softmax(scratch, n_vis);
    float* oh = out + h * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) oh[i] = 0.0f;
    for (int64_t t = 0; t < n_vis; ++t) {
      const int64_t cell = t < n_committed ? t : extra[t - n_committed];
      const float* vt = vg + cell * head_dim;
      const float a = scratch[t];
      for (int64_t i = 0; i < head_dim; ++i) oh[i] += a * vt[i];
    }
  }
}

}  // namespace treespec::kernels
