// Scalar reference kernels: the oracle every ISA-specific kernel is tested against.
// Plain loops in a fixed summation order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/impl.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

namespace treespec::kernels {

namespace {

using tensor::DType;

template <DType T>
void to_float_t(const void* src, float* dst, int64_t n) {
  tensor::dequantize_row(T, src, dst, n);
}

// Dequantise one weight row into a thread-local buffer, then dot it with every x row in
// index order (the oracle's fixed summation order).
template <DType T>
void matmul_rows_ref(const WeightView& w, const float* x, const impl::ActQ8*, int64_t M, float* y, int64_t ldy,
                     int64_t r0, int64_t r1) {
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(w.n_in));
  const int64_t rb = w.row_bytes();
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; ++r) {
    const float* wr;
    if constexpr (T == DType::f32) {
      wr = reinterpret_cast<const float*>(base + r * rb);
    } else {
      tensor::dequantize_row(T, base + r * rb, row.data(), w.n_in);
      wr = row.data();
    }
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * w.n_in;
      float acc = 0.0f;
      for (int64_t i = 0; i < w.n_in; ++i) acc += wr[i] * xm[i];
      y[m * ldy + r] = acc;
    }
  }
}

}  // namespace

void impl::register_ref(KernelTable& t) {
  auto set = [&](DType d, MatmulRowsFn mm, ToFloatFn tf) {
    t.matmul_rows[static_cast<int>(d)] = mm;
    t.to_float[static_cast<int>(d)] = tf;
    t.act[static_cast<int>(d)] = ActFormat::f32;
    t.row_grain[static_cast<int>(d)] = 16;
  };
  set(DType::f32, matmul_rows_ref<DType::f32>, to_float_t<DType::f32>);
  set(DType::f16, matmul_rows_ref<DType::f16>, to_float_t<DType::f16>);
  set(DType::bf16, matmul_rows_ref<DType::bf16>, to_float_t<DType::bf16>);
  set(DType::q8_0, matmul_rows_ref<DType::q8_0>, to_float_t<DType::q8_0>);
  set(DType::q4_0, matmul_rows_ref<DType::q4_0>, to_float_t<DType::q4_0>);
  set(DType::q4_k, matmul_rows_ref<DType::q4_k>, to_float_t<DType::q4_k>);
  set(DType::q6_k, matmul_rows_ref<DType::q6_k>, to_float_t<DType::q6_k>);
  set(DType::q4_1, matmul_rows_ref<DType::q4_1>, to_float_t<DType::q4_1>);
  set(DType::q5_0, matmul_rows_ref<DType::q5_0>, to_float_t<DType::q5_0>);
  set(DType::q5_1, matmul_rows_ref<DType::q5_1>, to_float_t<DType::q5_1>);
  set(DType::iq4_nl, matmul_rows_ref<DType::iq4_nl>, to_float_t<DType::iq4_nl>);
  set(DType::q2_k, matmul_rows_ref<DType::q2_k>, to_float_t<DType::q2_k>);
  set(DType::q3_k, matmul_rows_ref<DType::q3_k>, to_float_t<DType::q3_k>);
  set(DType::q5_k, matmul_rows_ref<DType::q5_k>, to_float_t<DType::q5_k>);
  set(DType::iq4_xs, matmul_rows_ref<DType::iq4_xs>, to_float_t<DType::iq4_xs>);
  t.quantize_act = ref_quantize_act;
  t.rmsnorm = ref_rmsnorm;
  t.swiglu = ref_swiglu;
  t.geglu = ref_geglu;
  t.softmax = ref_softmax;
  t.softcap = ref_softcap;
  t.attention_rows = ref_attention_rows;
}

// Q8 activation blocks exactly as GGML's quantize_row_q8_0 (d = amax / 127, round to
// nearest, ties away from zero), with the scale kept in f32 rather than rounded to f16.
void impl::ref_quantize_act(const float* x, int64_t n, int8_t* q, float* d, int32_t* s) {
  for (int64_t b = 0; b < n / kActBlock; ++b) {
    const float* xb = x + b * kActBlock;
    float amax = 0.0f;
    for (int j = 0; j < kActBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kActBlock; ++j) {
      const auto v = static_cast<int8_t>(std::nearbyint(xb[j] * id));
      q[b * kActBlock + j] = v;
      sum += v;
    }
    d[b] = db;
    s[b] = sum;
  }
}

void impl::ref_rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss /= static_cast<float>(n);
  ss += eps;
  const float scale = 1.0f / std::sqrt(ss);
  for (int64_t i = 0; i < n; ++i) y[i] = weight[i] * (scale * x[i]);
}

// The angle table is computed once per call (not per head) with the same float
// expressions as before, so every head sees bit-identical cos/sin.
void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const float* inv_freq, bool neox,
          float attn_factor) {
  const int64_t half = n_rot / 2;
  thread_local std::vector<float> cs;  // [half] cos, then [half] sin
  cs.resize(static_cast<size_t>(2 * half));
  for (int64_t i = 0; i < half; ++i) {
    const float theta = static_cast<float>(pos) * inv_freq[i];
    cs[static_cast<size_t>(i)] = std::cos(theta) * attn_factor;
    cs[static_cast<size_t>(half + i)] = std::sin(theta) * attn_factor;
  }
  const float* c = cs.data();
  const float* s = cs.data() + half;
  for (int64_t h = 0; h < n_head; ++h) {
    float* v = x + h * head_dim;
    if (neox) {
      for (int64_t i = 0; i < half; ++i) {
        const float v0 = v[i];
        const float v1 = v[i + half];
        v[i] = v0 * c[i] - v1 * s[i];
        v[i + half] = v0 * s[i] + v1 * c[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float v0 = v[2 * i];
        const float v1 = v[2 * i + 1];
        v[2 * i] = v0 * c[i] - v1 * s[i];
        v[2 * i + 1] = v0 * s[i] + v1 * c[i];
      }
    }
  }
}

void impl::ref_swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * (1.0f / (1.0f + std::exp(-g))) * up[i];
  }
}

// gelu_tanh(g) = g/2 (1 + tanh(u)) = g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3).
void impl::ref_geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kC = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float u = kC * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + std::exp(-2.0f * u)) * up[i];
  }
}

void impl::ref_softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void impl::ref_softmax(float* x, int64_t n) {
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

void impl::ref_attention_rows(const AttentionRows& a) {
  const int64_t hd = a.head_dim;
  std::vector<float> row(static_cast<size_t>(hd));
  // Cell t's keys or values as f32 (exact for every cache type: x = d * q for q8_0).
  auto load = [&](const KvRows& kv, int64_t t) {
    tensor::dequantize_row(kv.type, kv.row(t), row.data(), hd);
    return row.data();
  };
  for (int64_t i = 0; i < a.n_rows; ++i) {
    const int64_t n_vis = a.n_committed + a.n_extra[i];
    for (int64_t h = 0; h < a.n_head; ++h) {
      const float* qh = a.q + i * a.ldq + h * hd;
      float* sc = a.scratch;
      for (int64_t t = 0; t < n_vis; ++t) {
        const int64_t cell = t < a.n_committed ? t : a.extra[i][t - a.n_committed];
        const float* kt = load(a.k, cell);
        float s = 0.0f;
        for (int64_t j = 0; j < hd; ++j) s += qh[j] * kt[j];
        sc[t] = s * a.scale;
        if (a.softcap > 0.0f) ref_softcap(sc + t, 1, a.softcap);
        if (a.window_begin != nullptr && t < a.window_begin[i]) sc[t] = -std::numeric_limits<float>::infinity();
      }
      ref_softmax(sc, n_vis);
      float* oh = a.out + i * a.ldo + h * hd;
      for (int64_t j = 0; j < hd; ++j) oh[j] = 0.0f;
      for (int64_t t = 0; t < n_vis; ++t) {
        const int64_t cell = t < a.n_committed ? t : a.extra[i][t - a.n_committed];
        const float* vt = load(a.v, cell);
        const float w = sc[t];
        for (int64_t j = 0; j < hd; ++j) oh[j] += w * vt[j];
      }
    }
  }
}

}  // namespace treespec::kernels
