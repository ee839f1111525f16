#include "train/eagle_backprop.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace treespec::train {

EagleTensors EagleTensors::zeros(const EagleShape& s) {
  const auto E = static_cast<size_t>(s.E), Q = static_cast<size_t>(s.n_q()), KV = static_cast<size_t>(s.n_kv()),
             F = static_cast<size_t>(s.n_ff);
  EagleTensors t;
  t.enorm.assign(E, 0.0f);
  t.fc.assign(E * 2 * E, 0.0f);
  t.attn_norm.assign(E, 0.0f);
  t.wq.assign(Q * E, 0.0f);
  t.wk.assign(KV * E, 0.0f);
  t.wv.assign(KV * E, 0.0f);
  t.wo.assign(E * Q, 0.0f);
  t.ffn_norm.assign(E, 0.0f);
  t.w_gate.assign(F * E, 0.0f);
  t.w_up.assign(F * E, 0.0f);
  t.w_down.assign(E * F, 0.0f);
  t.out_norm.assign(E, 0.0f);
  return t;
}

std::vector<std::vector<float>*> EagleTensors::all() {
  return {&enorm, &fc, &attn_norm, &wq, &wk, &wv, &wo, &ffn_norm, &w_gate, &w_up, &w_down, &out_norm};
}

std::vector<const std::vector<float>*> EagleTensors::all() const {
  return {&enorm, &fc, &attn_norm, &wq, &wk, &wv, &wo, &ffn_norm, &w_gate, &w_up, &w_down, &out_norm};
}

EagleTensors EagleTensors::like(float value) const {
  EagleTensors t;
  const auto src = all();
  const auto dst = t.all();
  for (size_t i = 0; i < src.size(); ++i) dst[i]->assign(src[i]->size(), value);
  return t;
}

size_t EagleTensors::n_params() const {
  size_t n = 0;
  for (const auto* v : all()) n += v->size();
  return n;
}

// The helpers live in eagle_detail: the module compiles as unity TUs, so file-local names
// must not clash with the other trainers'.
namespace eagle_detail {
namespace {

// y[M, N] = x[M, K] W^T with W [N, K] (the kernels' f32 matmul: each output is one task's
// dot product, so the same bits whatever the thread count).
void mm(const float* W, int64_t K, int64_t N, const float* x, int64_t M, float* y, core::ThreadPool& pool) {
  kernels::matmul(kernels::WeightView{W, tensor::DType::f32, K, N}, x, M, y, &pool);
}

// out[C, R] = a[R, C]^T, in 32 x 32 blocks; a task owns a band of output rows.
void transpose(const float* a, int64_t R, int64_t C, float* out, core::ThreadPool& pool) {
  constexpr int64_t kB = 32;
  pool.parallel_for((C + kB - 1) / kB, 2, [&](int64_t b, int64_t e, int) {
    for (int64_t c0 = b * kB; c0 < std::min(C, e * kB); c0 += kB) {
      const int64_t c1 = std::min(C, c0 + kB);
      for (int64_t r0 = 0; r0 < R; r0 += kB) {
        const int64_t r1 = std::min(R, r0 + kB);
        for (int64_t c = c0; c < c1; ++c) {
          for (int64_t r = r0; r < r1; ++r) out[c * R + r] = a[r * C + c];
        }
      }
    }
  });
}

// y[i] += x[i] for i < n.
void add_into(float* y, const float* x, int64_t n, core::ThreadPool& pool) {
  pool.parallel_for(n, 8192, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

// dX[M, K] = dY[M, N] W[N, K] (overwritten; `acc`: added to dX instead): the matmul of dY
// by the transposed weight.
void mm_dx(const float* W, int64_t K, int64_t N, const float* dY, int64_t M, float* dX, bool acc,
           std::vector<float>& wt, std::vector<float>& tmp, core::ThreadPool& pool) {
  wt.resize(static_cast<size_t>(K * N));
  transpose(W, N, K, wt.data(), pool);  // [K, N]
  if (!acc) {
    mm(wt.data(), N, K, dY, M, dX, pool);
    return;
  }
  tmp.resize(static_cast<size_t>(M * K));
  mm(wt.data(), N, K, dY, M, tmp.data(), pool);
  add_into(dX, tmp.data(), M * K, pool);
}

// dW[N, K] = dY[M, N]^T X[M, K] (overwritten): the matmul of dY^T [N, M] by X^T [K, M].
void mm_dw(const float* dY, int64_t N, const float* X, int64_t K, int64_t M, float* dW, std::vector<float>& t1,
           std::vector<float>& t2, core::ThreadPool& pool) {
  t1.resize(static_cast<size_t>(N * M));
  t2.resize(static_cast<size_t>(K * M));
  transpose(dY, M, N, t1.data(), pool);         // [N, M]
  transpose(X, M, K, t2.data(), pool);          // [K, M]
  mm(t2.data(), M, K, t1.data(), N, dW, pool);  // [N, K]: sum_m dY[m, n] X[m, k]
}

// Row-wise RMSNorm: y = x * r * g (row stride ldy) with r = 1 / sqrt(mean(x^2) + eps),
// kept per row.
void norm_fwd(const float* x, const float* g, int64_t M, int64_t E, float eps, float* y, int64_t ldy, float* r,
              core::ThreadPool& pool) {
  pool.parallel_for(M, 8, [&](int64_t b, int64_t e, int) {
    for (int64_t m = b; m < e; ++m) {
      const float* xm = x + m * E;
      double ss = 0.0;
      for (int64_t i = 0; i < E; ++i) ss += static_cast<double>(xm[i]) * xm[i];
      r[m] = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(E) + eps));
      for (int64_t i = 0; i < E; ++i) y[m * ldy + i] = g[i] * (r[m] * xm[i]);
    }
  });
}

// From dy: dx (added into dx; skipped when null) and dg (overwritten).
void norm_bwd(const float* x, const float* g, const float* r, const float* dy, int64_t M, int64_t E, float* dx,
              float* dg, core::ThreadPool& pool) {
  if (dx != nullptr) {
    pool.parallel_for(M, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t m = b; m < e; ++m) {
        const float* xm = x + m * E;
        const float* d = dy + m * E;
        double s = 0.0;
        for (int64_t i = 0; i < E; ++i) s += static_cast<double>(d[i]) * g[i] * xm[i];
        const double rm = r[m];
        const double c = rm * rm * rm * s / static_cast<double>(E);
        for (int64_t i = 0; i < E; ++i) dx[m * E + i] += static_cast<float>(rm * d[i] * g[i] - c * xm[i]);
      }
    });
  }
  pool.parallel_for(E, 16, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      double s = 0.0;
      for (int64_t m = 0; m < M; ++m) s += static_cast<double>(dy[m * E + i]) * x[m * E + i] * r[m];
      dg[i] = static_cast<float>(s);
    }
  });
}

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// RoPE of the q and k rows at their positions in their sequences with the kernels' rope
// (Model's), sign -1: the inverse rotation (the backward of RoPE).
void rope_rows(const EagleShape& s, const EagleBatch& b, float* q, float* k, int sign, const float* inv_freq,
               core::ThreadPool& pool) {
  if (s.n_rot == 0) return;
  const auto n_seq = static_cast<int64_t>(b.seq_start.size());
  pool.parallel_for(n_seq, 1, [&](int64_t tb, int64_t te, int) {
    for (int64_t si = tb; si < te; ++si) {
      const int64_t a = b.seq_start[static_cast<size_t>(si)];
      const int64_t e = si + 1 < n_seq ? b.seq_start[static_cast<size_t>(si) + 1] : b.M;
      for (int64_t r = a; r < e; ++r) {
        const auto pos = static_cast<int32_t>(sign * (r - a));
        kernels::rope(q + r * s.n_q(), s.n_head, s.head_dim, s.n_rot, pos, inv_freq, s.rope_neox);
        kernels::rope(k + r * s.n_kv(), s.n_head_kv, s.head_dim, s.n_rot, pos, inv_freq, s.rope_neox);
      }
    }
  });
}

void check_inputs(const EagleTensors& p, const EagleShape& s, const EagleBatch& b, bool need_targets) {
  TREESPEC_ASSERT(s.E > 0 && s.n_head > 0 && s.n_head_kv > 0 && s.n_head % s.n_head_kv == 0 && s.head_dim > 0 &&
                      s.n_ff > 0 && s.V > 0,
                  "eagle: bad shape");
  TREESPEC_ASSERT(s.n_rot >= 0 && s.n_rot % 2 == 0 && s.n_rot <= s.head_dim, "eagle: bad RoPE dims");
  const auto E = static_cast<size_t>(s.E), Q = static_cast<size_t>(s.n_q()), KV = static_cast<size_t>(s.n_kv()),
             F = static_cast<size_t>(s.n_ff);
  const size_t want[] = {E, E * 2 * E, E, Q * E, KV * E, KV * E, E * Q, E, F * E, F * E, E * F, E};
  const auto have = p.all();
  for (size_t i = 0; i < have.size(); ++i) TREESPEC_ASSERT(have[i]->size() == want[i], "eagle: tensor size");
  TREESPEC_ASSERT(b.M > 0 && b.emb != nullptr && b.feat != nullptr, "eagle: batch needs rows");
  TREESPEC_ASSERT(!b.seq_start.empty() && b.seq_start[0] == 0, "eagle: first sequence must start at row 0");
  for (size_t i = 1; i < b.seq_start.size(); ++i) {
    TREESPEC_ASSERT(b.seq_start[i] > b.seq_start[i - 1], "eagle: seq_start must increase");
  }
  TREESPEC_ASSERT(b.seq_start.back() < b.M, "eagle: a sequence starts past the last row");
  if (!need_targets) return;
  TREESPEC_ASSERT(b.target != nullptr, "eagle: training needs token targets");
  TREESPEC_ASSERT(b.feat_weight == 0.0f || b.feat_target != nullptr, "eagle: feature loss needs feat_target");
  TREESPEC_ASSERT(b.soft.ids == nullptr || b.soft.weight <= 0.0f || (b.soft.p != nullptr && b.soft.n_top > 0),
                  "eagle: soft targets need ids, p and n_top");
}

// The whole forward, keeping what the backward pass needs in sc.
void forward_all(const EagleTensors& p, const EagleShape& s, const float* lm_head, const EagleBatch& b,
                 EagleScratch& sc, bool want_logits, core::ThreadPool& pool) {
  const int64_t M = b.M, E = s.E, Q = s.n_q(), KV = s.n_kv(), F = s.n_ff;
  auto grow = [](std::vector<float>& v, int64_t rows, int64_t cols) { v.resize(static_cast<size_t>(rows * cols)); };
  grow(sc.cat, M, 2 * E);
  for (auto* v : {&sc.x0, &sc.n1, &sc.h, &sc.n2, &sc.x2, &sc.y}) grow(*v, M, E);
  grow(sc.q, M, Q);
  grow(sc.ao, M, Q);
  grow(sc.k, M, KV);
  grow(sc.v, M, KV);
  for (auto* v : {&sc.g, &sc.u, &sc.a}) grow(*v, M, F);
  for (auto* v : {&sc.r_e, &sc.r1, &sc.r2, &sc.r3}) grow(*v, M, 1);
  sc.inv_freq.resize(static_cast<size_t>(s.n_rot / 2));
  for (int32_t i = 0; i < s.n_rot / 2; ++i) {  // as model::Model::bind_rope
    sc.inv_freq[static_cast<size_t>(i)] =
        s.rope_freq_scale / std::pow(s.rope_theta, static_cast<float>(2 * i) / static_cast<float>(s.n_rot));
  }
  // cat = [rmsnorm(emb) * enorm ; feat] (Model::stack_input); x0 = fc cat.
  norm_fwd(b.emb, p.enorm.data(), M, E, s.rms_eps, sc.cat.data(), 2 * E, sc.r_e.data(), pool);
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(sc.cat.data() + m * 2 * E + E, b.feat + m * E, static_cast<size_t>(E) * sizeof(float));
  }
  mm(p.fc.data(), 2 * E, E, sc.cat.data(), M, sc.x0.data(), pool);
  // Attention.
  norm_fwd(sc.x0.data(), p.attn_norm.data(), M, E, s.rms_eps, sc.n1.data(), E, sc.r1.data(), pool);
  {
    const kernels::WeightView wq{p.wq.data(), tensor::DType::f32, E, Q}, wk{p.wk.data(), tensor::DType::f32, E, KV},
        wv{p.wv.data(), tensor::DType::f32, E, KV};
    const kernels::WeightView* ws[3] = {&wq, &wk, &wv};
    float* ys[3] = {sc.q.data(), sc.k.data(), sc.v.data()};
    kernels::matmul_multi(ws, ys, 3, sc.n1.data(), M, &pool);
  }
  rope_rows(s, b, sc.q.data(), sc.k.data(), 1, sc.inv_freq.data(), pool);
  attention_forward(s, b, sc.q.data(), sc.k.data(), sc.v.data(), sc.ao.data(), sc, pool);
  mm(p.wo.data(), Q, E, sc.ao.data(), M, sc.h.data(), pool);
  add_into(sc.h.data(), sc.x0.data(), M * E, pool);
  // FFN: a = silu(g) * u as the kernels' swiglu computes it.
  norm_fwd(sc.h.data(), p.ffn_norm.data(), M, E, s.rms_eps, sc.n2.data(), E, sc.r2.data(), pool);
  {
    const kernels::WeightView wg{p.w_gate.data(), tensor::DType::f32, E, F},
        wu{p.w_up.data(), tensor::DType::f32, E, F};
    const kernels::WeightView* ws[2] = {&wg, &wu};
    float* ys[2] = {sc.g.data(), sc.u.data()};
    kernels::matmul_multi(ws, ys, 2, sc.n2.data(), M, &pool);
  }
  pool.parallel_for(M * F, 4096, [&](int64_t b0, int64_t e0, int) {
    for (auto i = static_cast<size_t>(b0); i < static_cast<size_t>(e0); ++i) {
      sc.a[i] = sc.g[i] * sigmoid(sc.g[i]) * sc.u[i];
    }
  });
  mm(p.w_down.data(), F, E, sc.a.data(), M, sc.x2.data(), pool);
  add_into(sc.x2.data(), sc.h.data(), M * E, pool);
  norm_fwd(sc.x2.data(), p.out_norm.data(), M, E, s.rms_eps, sc.y.data(), E, sc.r3.data(), pool);
  if (want_logits) {
    grow(sc.logits, M, s.V);
    mm(lm_head, E, s.V, sc.y.data(), M, sc.logits.data(), pool);
  }
}

// Per-row loss parts into sc.row_feat / row_tok, dL/dy of the feature loss into sc.d1 and
// dL/dlogits in place of sc.logits (0 on rows without target). Returns the mean loss.
double loss_and_grads(const EagleShape& s, const EagleBatch& b, EagleScratch& sc, double* feat_loss, double* tok_loss,
                      core::ThreadPool& pool) {
  const int64_t M = b.M, E = s.E, V = s.V;
  int64_t n_valid = 0;
  for (int64_t m = 0; m < M; ++m) n_valid += b.target[m] >= 0 ? 1 : 0;
  const double inv = n_valid > 0 ? 1.0 / static_cast<double>(n_valid) : 0.0;
  sc.row_feat.assign(static_cast<size_t>(M), 0.0);
  sc.row_tok.assign(static_cast<size_t>(M), 0.0);
  sc.d1.assign(static_cast<size_t>(M * E), 0.0f);
  const bool soft = b.soft.ids != nullptr && b.soft.weight > 0.0f;
  const double kl = soft ? b.soft.weight : 0.0;
  const int32_t nt = soft ? b.soft.n_top : 0;
  pool.parallel_for(M, 4, [&](int64_t rb, int64_t re, int) {
    for (int64_t m = rb; m < re; ++m) {
      float* lg = sc.logits.data() + m * V;
      const int32_t tgt = b.target[m];
      if (tgt < 0) {
        std::fill(lg, lg + V, 0.0f);
        continue;
      }
      TREESPEC_ASSERT(tgt < V, "eagle: token target out of range");
      if (b.feat_weight != 0.0f) {
        const double w = b.feat_weight * inv / static_cast<double>(E);
        double f = 0.0;
        for (int64_t i = 0; i < E; ++i) {
          const double d = static_cast<double>(sc.y[static_cast<size_t>(m * E + i)]) - b.feat_target[m * E + i];
          const double ad = std::fabs(d);
          f += ad < 1.0 ? 0.5 * d * d : ad - 0.5;
          sc.d1[static_cast<size_t>(m * E + i)] = static_cast<float>(w * std::clamp(d, -1.0, 1.0));
        }
        sc.row_feat[static_cast<size_t>(m)] = f / static_cast<double>(E);
      }
      // CE = sum_v t_v (lse - z_v) = tw * log(sum exp(z - mx)) + sum_v t_v (mx - z_v), tw = sum_v t_v.
      float mx = lg[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, lg[v]);
      double tw = 1.0 - kl, ce = (1.0 - kl) * (static_cast<double>(mx) - lg[tgt]);
      for (int32_t j = 0; j < nt; ++j) {
        const double pj = kl * b.soft.p[m * nt + j];
        tw += pj;
        ce += pj * (static_cast<double>(mx) - lg[b.soft.ids[m * nt + j]]);
      }
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        lg[v] = std::exp(lg[v] - mx);
        sum += lg[v];
      }
      sc.row_tok[static_cast<size_t>(m)] = ce + tw * std::log(sum);
      // dCE/dz_v = tw softmax_v - t_v, times tok_weight / n_valid.
      const double w = b.tok_weight * inv;
      const auto scale = static_cast<float>(w * tw / sum);
      for (int64_t v = 0; v < V; ++v) lg[v] *= scale;
      lg[tgt] -= static_cast<float>(w * (1.0 - kl));
      for (int32_t j = 0; j < nt; ++j) lg[b.soft.ids[m * nt + j]] -= static_cast<float>(w * kl * b.soft.p[m * nt + j]);
    }
  });
  double f = 0.0, t = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    f += sc.row_feat[static_cast<size_t>(m)];
    t += sc.row_tok[static_cast<size_t>(m)];
  }
  f *= inv;
  t *= inv;
  if (feat_loss) *feat_loss = f;
  if (tok_loss) *tok_loss = t;
  return b.feat_weight * f + b.tok_weight * t;
}

// FFN, x2 = h + w_down (silu(w_gate n2) * (w_up n2)): on entry sc.d2 = dL/dx2, on return
// sc.d2 = dL/dh (the residual plus the FFN's path through ffn_norm).
void ffn_backward(const EagleTensors& p, const EagleShape& s, int64_t M, EagleScratch& sc, EagleTensors& grad,
                  core::ThreadPool& pool) {
  const int64_t E = s.E, F = s.n_ff;
  float* dx2 = sc.d2.data();
  mm_dw(dx2, E, sc.a.data(), F, M, grad.w_down.data(), sc.t1, sc.t2, pool);
  sc.d3.resize(static_cast<size_t>(M * F));
  sc.d4.resize(static_cast<size_t>(M * F));
  float* du = sc.d3.data();  // dL/da first, then dL/du
  float* dg = sc.d4.data();
  mm_dx(p.w_down.data(), F, E, dx2, M, du, false, sc.t1, sc.t2, pool);
  pool.parallel_for(M * F, 4096, [&](int64_t b0, int64_t e0, int) {
    for (auto i = static_cast<size_t>(b0); i < static_cast<size_t>(e0); ++i) {
      const float z = sc.g[i], sg = sigmoid(z), da = du[i];
      dg[i] = da * sc.u[i] * sg * (1.0f + z * (1.0f - sg));
      du[i] = da * z * sg;
    }
  });
  mm_dw(dg, F, sc.n2.data(), E, M, grad.w_gate.data(), sc.t1, sc.t2, pool);
  mm_dw(du, F, sc.n2.data(), E, M, grad.w_up.data(), sc.t1, sc.t2, pool);
  sc.d1.resize(static_cast<size_t>(M * E));
  float* dn2 = sc.d1.data();
  mm_dx(p.w_gate.data(), E, F, dg, M, dn2, false, sc.t1, sc.t2, pool);
  mm_dx(p.w_up.data(), E, F, du, M, dn2, true, sc.t1, sc.t2, pool);
  norm_bwd(sc.h.data(), p.ffn_norm.data(), sc.r2.data(), dn2, M, E, dx2, grad.ffn_norm.data(), pool);
}

// Attention, h = x0 + wo attn(RoPE(wq n1), RoPE(wk n1), wv n1): on entry sc.d2 = dL/dh, on
// return sc.d2 = dL/dx0.
void attention_block_backward(const EagleTensors& p, const EagleShape& s, const EagleBatch& b, EagleScratch& sc,
                              EagleTensors& grad, core::ThreadPool& pool) {
  const int64_t M = b.M, E = s.E, Q = s.n_q(), KV = s.n_kv();
  float* dh = sc.d2.data();
  mm_dw(dh, E, sc.ao.data(), Q, M, grad.wo.data(), sc.t1, sc.t2, pool);
  sc.d3.resize(static_cast<size_t>(M * Q));
  mm_dx(p.wo.data(), Q, E, dh, M, sc.d3.data(), false, sc.t1, sc.t2, pool);
  sc.dq.resize(static_cast<size_t>(M * Q));
  sc.dk.resize(static_cast<size_t>(M * KV));
  sc.dv.resize(static_cast<size_t>(M * KV));
  attention_backward(s, b, sc.q.data(), sc.k.data(), sc.v.data(), sc.d3.data(), sc.dq.data(), sc.dk.data(),
                     sc.dv.data(), sc, pool);
  rope_rows(s, b, sc.dq.data(), sc.dk.data(), -1, sc.inv_freq.data(), pool);
  mm_dw(sc.dq.data(), Q, sc.n1.data(), E, M, grad.wq.data(), sc.t1, sc.t2, pool);
  mm_dw(sc.dk.data(), KV, sc.n1.data(), E, M, grad.wk.data(), sc.t1, sc.t2, pool);
  mm_dw(sc.dv.data(), KV, sc.n1.data(), E, M, grad.wv.data(), sc.t1, sc.t2, pool);
  sc.d4.resize(static_cast<size_t>(M * E));
  float* dn1 = sc.d4.data();
  mm_dx(p.wq.data(), E, Q, sc.dq.data(), M, dn1, false, sc.t1, sc.t2, pool);
  mm_dx(p.wk.data(), E, KV, sc.dk.data(), M, dn1, true, sc.t1, sc.t2, pool);
  mm_dx(p.wv.data(), E, KV, sc.dv.data(), M, dn1, true, sc.t1, sc.t2, pool);
  norm_bwd(sc.x0.data(), p.attn_norm.data(), sc.r1.data(), dn1, M, E, dh, grad.attn_norm.data(), pool);
}

// Input, x0 = fc [rmsnorm(emb) * enorm ; feat], from sc.d2 = dL/dx0: fc's and enorm's
// gradients (the embedding and the features are inputs, not trained).
void input_backward(const EagleTensors& p, const EagleShape& s, const EagleBatch& b, EagleScratch& sc,
                    EagleTensors& grad, core::ThreadPool& pool) {
  const int64_t M = b.M, E = s.E;
  const float* dx0 = sc.d2.data();
  mm_dw(dx0, E, sc.cat.data(), 2 * E, M, grad.fc.data(), sc.t1, sc.t2, pool);
  // de = dx0 fc[:, :E]: the first E rows of fc^T [2E, E] as a weight [E, E].
  sc.t1.resize(static_cast<size_t>(2 * E * E));
  transpose(p.fc.data(), E, 2 * E, sc.t1.data(), pool);
  sc.d4.resize(static_cast<size_t>(M * E));
  mm(sc.t1.data(), E, E, dx0, M, sc.d4.data(), pool);
  norm_bwd(b.emb, p.enorm.data(), sc.r_e.data(), sc.d4.data(), M, E, nullptr, grad.enorm.data(), pool);
}

}  // namespace
}  // namespace eagle_detail

void eagle_forward(const EagleTensors& p, const EagleShape& s, const float* lm_head, const EagleBatch& b, float* y,
                   float* logits, EagleScratch& sc, core::ThreadPool& pool) {
  eagle_detail::check_inputs(p, s, b, false);
  TREESPEC_ASSERT(logits == nullptr || lm_head != nullptr, "eagle_forward: logits need the LM head");
  eagle_detail::forward_all(p, s, lm_head, b, sc, logits != nullptr, pool);
  std::memcpy(y, sc.y.data(), static_cast<size_t>(b.M * s.E) * sizeof(float));
  if (logits) std::memcpy(logits, sc.logits.data(), static_cast<size_t>(b.M * s.V) * sizeof(float));
}

double eagle_forward_backward(const EagleTensors& p, const EagleShape& s, const float* lm_head, const EagleBatch& b,
                              EagleTensors& grad, EagleScratch& sc, core::ThreadPool& pool, double* feat_loss,
                              double* tok_loss) {
  using namespace eagle_detail;
  check_inputs(p, s, b, true);
  TREESPEC_ASSERT(lm_head != nullptr, "eagle_forward_backward: needs the LM head");
  {
    const auto pv = p.all();
    const auto gv = grad.all();
    for (size_t i = 0; i < pv.size(); ++i) gv[i]->resize(pv[i]->size());
  }
  forward_all(p, s, lm_head, b, sc, true, pool);
  const double loss = loss_and_grads(s, b, sc, feat_loss, tok_loss, pool);
  const int64_t M = b.M, E = s.E;
  // logits = lm_head y: dy (feature part, in sc.d1) += dlogits lm_head.
  if (b.tok_weight != 0.0f) mm_dx(lm_head, E, s.V, sc.logits.data(), M, sc.d1.data(), true, sc.t1, sc.t2, pool);
  // y = rmsnorm(x2) * out_norm
  sc.d2.assign(static_cast<size_t>(M * E), 0.0f);
  norm_bwd(sc.x2.data(), p.out_norm.data(), sc.r3.data(), sc.d1.data(), M, E, sc.d2.data(), grad.out_norm.data(), pool);
  ffn_backward(p, s, M, sc, grad, pool);
  attention_block_backward(p, s, b, sc, grad, pool);
  input_backward(p, s, b, sc, grad, pool);
  return loss;
}

void eagle_adam_update(EagleTensors& p, const EagleTensors& g, EagleAdam& st, float lr, int64_t t,
                       core::ThreadPool& pool) {
  auto pv = p.all();
  const auto gv = g.all();
  auto mv = st.m.all();
  auto vv = st.v.all();
  for (size_t i = 0; i < pv.size(); ++i) adam_step(*pv[i], *gv[i], *mv[i], *vv[i], lr, t, pool);
}

}  // namespace treespec::train
