#include "train/medusa_backprop.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/assert.h"
#include "drafters/medusa/medusa_heads.h"
#include "kernels/kernels.h"

namespace treespec::train {

using drafters::block_silu;

namespace {
float silu_grad(float z) {
  const float s = 1.0f / (1.0f + std::exp(-z));
  return s * (1.0f + z * (1.0f - s));
}
}  // namespace

int32_t default_head_blocks(int32_t n_embd, bool own_output) {
  return own_output ? 1 : std::clamp(512 / std::max(n_embd, 1), 1, 4);
}

HeadTensors HeadTensors::like(float value) const {
  HeadTensors t;
  for (const auto& x : w) t.w.emplace_back(x.size(), value);
  for (const auto& x : b) t.b.emplace_back(x.size(), value);
  t.out_frozen = out_frozen;
  if (!out_frozen) t.out.assign(out.size(), value);
  return t;
}

size_t HeadTensors::n_params() const {
  size_t n = out_frozen ? 0 : out.size();
  for (const auto& x : w) n += x.size();
  for (const auto& x : b) n += x.size();
  return n;
}

namespace {

// Sizes the scratch for M rows and runs the head: x_{r+1} = x_r + block_silu(W_r x_r + b_r);
// sb.logits = Wout x_R. Keeps every x_r and z_r for the backward pass.
void head_forward(const HeadTensors& params, int32_t E, int32_t V, const float* h, int64_t M, HeadScratch& sb,
                  core::ThreadPool& pool) {
  const auto R = static_cast<int32_t>(params.w.size());
  const size_t ME = static_cast<size_t>(M) * static_cast<size_t>(E);
  sb.x.resize(static_cast<size_t>(R) + 1);
  sb.z.resize(static_cast<size_t>(R));
  for (auto& v : sb.x) v.resize(ME);
  for (auto& v : sb.z) v.resize(ME);
  sb.logits.resize(static_cast<size_t>(M) * static_cast<size_t>(V));
  sb.dx.assign(ME, 0.0f);
  sb.dz.resize(ME);
  sb.row_loss.assign(static_cast<size_t>(M), 0.0);

  std::memcpy(sb.x[0].data(), h, ME * sizeof(float));
  for (int32_t r = 0; r < R; ++r) {
    const kernels::WeightView W{params.w[static_cast<size_t>(r)].data(), tensor::DType::f32, E, E};
    float* z = sb.z[static_cast<size_t>(r)].data();
    kernels::matmul(W, sb.x[static_cast<size_t>(r)].data(), M, z, &pool);
    const float* b = params.b[static_cast<size_t>(r)].data();
    const float* xi = sb.x[static_cast<size_t>(r)].data();
    float* xo = sb.x[static_cast<size_t>(r) + 1].data();
    for (size_t i = 0; i < ME; ++i) {
      z[i] += b[i % static_cast<size_t>(E)];
      xo[i] = xi[i] + block_silu(z[i]);
    }
  }
  const float* xr = sb.x[static_cast<size_t>(R)].data();
  const kernels::WeightView Wout{params.out.data(), tensor::DType::f32, E, V};
  kernels::matmul(Wout, xr, M, sb.logits.data(), &pool);
}

// Per-row loss into sb.row_loss and G = dL/dlogits = (softmax - target) / n_valid, in place
// of sb.logits, one row per task. Returns n_valid (rows with a target).
int64_t head_loss_and_logit_grad(int32_t V, int64_t M, const int32_t* target, const SoftTargets& soft, HeadScratch& sb,
                                 core::ThreadPool& pool) {
  int64_t n_valid = 0;
  for (int64_t m = 0; m < M; ++m) n_valid += target[m] >= 0 ? 1 : 0;
  const float inv_n = n_valid ? 1.0f / static_cast<float>(n_valid) : 0.0f;
  const float hard = 1.0f - soft.weight;
  pool.parallel_for(M, 4, [&](int64_t b, int64_t e, int) {
    for (int64_t m = b; m < e; ++m) {
      float* lg = sb.logits.data() + m * V;
      if (target[m] < 0) {
        std::fill(lg, lg + V, 0.0f);
        continue;
      }
      float mx = lg[0];
      for (int32_t v = 1; v < V; ++v) mx = std::max(mx, lg[v]);
      double sum = 0.0;
      for (int32_t v = 0; v < V; ++v) {
        lg[v] = std::exp(lg[v] - mx);
        sum += lg[v];
      }
      const auto inv = static_cast<float>(1.0 / sum);
      for (int32_t v = 0; v < V; ++v) lg[v] *= inv;
      double loss = 0.0;
      if (hard > 0.0f) loss -= hard * std::log(std::max(lg[target[m]], 1e-30f));
      if (soft.weight > 0.0f) {
        for (int32_t j = 0; j < soft.n_top; ++j) {
          loss -=
              soft.weight * soft.p[m * soft.n_top + j] * std::log(std::max(lg[soft.ids[m * soft.n_top + j]], 1e-30f));
        }
      }
      sb.row_loss[static_cast<size_t>(m)] = loss;
      if (hard > 0.0f) lg[target[m]] -= hard;
      if (soft.weight > 0.0f) {
        for (int32_t j = 0; j < soft.n_top; ++j)
          lg[soft.ids[m * soft.n_top + j]] -= soft.weight * soft.p[m * soft.n_top + j];
      }
      for (int32_t v = 0; v < V; ++v) lg[v] *= inv_n;
    }
  });
  return n_valid;
}

// From G = sb.logits: grad.out (unless frozen) and, when there are blocks, sb.dx = dL/dx_R.
void head_output_backward(const HeadTensors& params, int32_t E, int32_t V, int64_t M, HeadTensors& grad,
                          HeadScratch& sb, core::ThreadPool& pool) {
  const auto R = static_cast<int32_t>(params.w.size());
  const float* G = sb.logits.data();  // [M, V]
  const float* xr = sb.x[static_cast<size_t>(R)].data();
  // dWout[v, :] = sum_m G[m, v] x_R[m, :]   (a task owns a block of vocab rows)
  if (!params.out_frozen) {
    pool.parallel_for(V, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t v = b; v < e; ++v) {
        float* gw = grad.out.data() + v * E;
        std::fill(gw, gw + E, 0.0f);
        for (int64_t m = 0; m < M; ++m) {
          const float g = G[m * V + v];
          if (g == 0.0f) continue;
          const float* x = xr + m * E;
          for (int32_t i = 0; i < E; ++i) gw[i] += g * x[i];
        }
      }
    });
  }
  // dx_R[m, :] = sum_v G[m, v] Wout[v, :]   (only needed when there are blocks)
  if (R > 0) {
    const float* W = params.out.data();
    pool.parallel_for(M, 4, [&](int64_t b, int64_t e, int) {
      for (int64_t m = b; m < e; ++m) {
        float* dx = sb.dx.data() + m * E;
        const float* g = G + m * V;
        for (int32_t v = 0; v < V; ++v) {
          if (g[v] == 0.0f) continue;
          const float* w = W + static_cast<int64_t>(v) * E;
          for (int32_t i = 0; i < E; ++i) dx[i] += g[v] * w[i];
        }
      }
    });
  }
}

// Blocks, last to first: dz = dx * silu'(z); dW = dz^T x; db = sum_m dz; dx += dz W.
void head_blocks_backward(const HeadTensors& params, int32_t E, int64_t M, HeadTensors& grad, HeadScratch& sb,
                          core::ThreadPool& pool) {
  const auto R = static_cast<int32_t>(params.w.size());
  const size_t ME = static_cast<size_t>(M) * static_cast<size_t>(E);
  for (int32_t r = R - 1; r >= 0; --r) {
    const float* z = sb.z[static_cast<size_t>(r)].data();
    const float* x = sb.x[static_cast<size_t>(r)].data();
    for (size_t i = 0; i < ME; ++i) sb.dz[i] = sb.dx[i] * silu_grad(z[i]);
    float* gW = grad.w[static_cast<size_t>(r)].data();
    float* gB = grad.b[static_cast<size_t>(r)].data();
    const float* dz = sb.dz.data();
    pool.parallel_for(E, 4, [&](int64_t b, int64_t e, int) {
      for (int64_t o = b; o < e; ++o) {
        float* gw = gW + o * E;
        std::fill(gw, gw + E, 0.0f);
        double gb = 0.0;
        for (int64_t m = 0; m < M; ++m) {
          const float d = dz[m * E + o];
          gb += d;
          if (d == 0.0f) continue;
          const float* xm = x + m * E;
          for (int32_t i = 0; i < E; ++i) gw[i] += d * xm[i];
        }
        gB[o] = static_cast<float>(gb);
      }
    });
    if (r > 0) {  // the residual path already carries dx; add the block's contribution
      const float* W = params.w[static_cast<size_t>(r)].data();
      pool.parallel_for(M, 4, [&](int64_t b, int64_t e, int) {
        for (int64_t m = b; m < e; ++m) {
          float* dx = sb.dx.data() + m * E;
          const float* d = dz + m * E;
          for (int32_t o = 0; o < E; ++o) {
            if (d[o] == 0.0f) continue;
            const float* w = W + static_cast<int64_t>(o) * E;
            for (int32_t i = 0; i < E; ++i) dx[i] += d[o] * w[i];
          }
        }
      });
    }
  }
}

}  // namespace

double head_forward_backward(const HeadTensors& params, int32_t E, int32_t V, const float* h, int64_t M,
                             const int32_t* target, const SoftTargets& soft, HeadTensors& grad, HeadScratch& sb,
                             core::ThreadPool& pool) {
  TREESPEC_ASSERT(params.b.size() == params.w.size() && grad.w.size() == params.w.size() &&
                      grad.b.size() == params.b.size() &&
                      params.out.size() == static_cast<size_t>(V) * static_cast<size_t>(E) &&
                      grad.out.size() == (params.out_frozen ? 0 : params.out.size()),
                  "head_forward_backward: parameter and gradient shapes");
  head_forward(params, E, V, h, M, sb, pool);
  const int64_t n_valid = head_loss_and_logit_grad(V, M, target, soft, sb, pool);
  head_output_backward(params, E, V, M, grad, sb, pool);
  head_blocks_backward(params, E, M, grad, sb, pool);
  double loss = 0.0;
  for (int64_t m = 0; m < M; ++m) loss += sb.row_loss[static_cast<size_t>(m)];
  return n_valid ? loss / static_cast<double>(n_valid) : 0.0;
}

void adam_step(std::vector<float>& w, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
               float lr, int64_t t, core::ThreadPool& pool) {
  constexpr float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const float c1 = 1.0f - std::pow(b1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(b2, static_cast<float>(t));
  pool.parallel_for(static_cast<int64_t>(w.size()), 4096, [&](int64_t b, int64_t e, int) {
    for (auto i = static_cast<size_t>(b); i < static_cast<size_t>(e); ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
  });
}

void adam_update(HeadTensors& p, const HeadTensors& g, AdamState& st, float lr, int64_t t, core::ThreadPool& pool) {
  for (size_t r = 0; r < p.w.size(); ++r) {
    adam_step(p.w[r], g.w[r], st.m.w[r], st.v.w[r], lr, t, pool);
    adam_step(p.b[r], g.b[r], st.m.b[r], st.v.b[r], lr, t, pool);
  }
  if (!p.out_frozen) adam_step(p.out, g.out, st.m.out, st.v.out, lr, t, pool);
}

}  // namespace treespec::train
