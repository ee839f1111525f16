// Causal attention of the EAGLE layer for training: forward with the probabilities kept,
// and its backward. One task per (sequence, KV head) so the K/V gradients of a KV head
// (shared by its query heads) are summed by one task in a fixed order.
#include <algorithm>
#include <cmath>

#include "train/eagle_backprop.h"

namespace treespec::train::eagle_detail {

namespace {
int64_t seq_end(const EagleBatch& b, size_t si) { return si + 1 < b.seq_start.size() ? b.seq_start[si + 1] : b.M; }
float scale_of(const EagleShape& s) {
  return s.attn_scale > 0.0f ? s.attn_scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
}
}  // namespace

void attention_forward(const EagleShape& s, const EagleBatch& b, const float* q, const float* k, const float* v,
                       float* ao, EagleScratch& sc, core::ThreadPool& pool) {
  const int64_t D = s.head_dim, nq = s.n_q(), nkv = s.n_kv(), H = s.n_head, G = s.n_head / s.n_head_kv;
  const size_t n_seq = b.seq_start.size();
  sc.prob_off.assign(n_seq * static_cast<size_t>(H) + 1, 0);
  for (size_t si = 0; si < n_seq; ++si) {
    const int64_t T = seq_end(b, si) - b.seq_start[si];
    for (int64_t h = 0; h < H; ++h) {
      const size_t i = si * static_cast<size_t>(H) + static_cast<size_t>(h);
      sc.prob_off[i + 1] = sc.prob_off[i] + T * T;
    }
  }
  sc.probs.assign(static_cast<size_t>(sc.prob_off.back()), 0.0f);
  const float scale = scale_of(s);
  pool.parallel_for(static_cast<int64_t>(n_seq) * H, 1, [&](int64_t tb, int64_t te, int) {
    for (int64_t task = tb; task < te; ++task) {
      const auto si = static_cast<size_t>(task / H);
      const int64_t h = task % H, kh = h / G;
      const int64_t a = b.seq_start[si], T = seq_end(b, si) - a;
      float* P = sc.probs.data() + sc.prob_off[static_cast<size_t>(task)];
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = q + (a + i) * nq + h * D;
        float* pr = P + i * T;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = k + (a + j) * nkv + kh * D;
          float d = 0.0f;
          for (int64_t c = 0; c < D; ++c) d += qi[c] * kj[c];
          pr[j] = d * scale;
          mx = std::max(mx, pr[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          pr[j] = std::exp(pr[j] - mx);
          sum += pr[j];
        }
        const auto inv = static_cast<float>(1.0 / sum);
        float* o = ao + (a + i) * nq + h * D;
        std::fill(o, o + D, 0.0f);
        for (int64_t j = 0; j <= i; ++j) {
          pr[j] *= inv;
          const float* vj = v + (a + j) * nkv + kh * D;
          for (int64_t c = 0; c < D; ++c) o[c] += pr[j] * vj[c];
        }
      }
    }
  });
}

void attention_backward(const EagleShape& s, const EagleBatch& b, const float* q, const float* k, const float* v,
                        const float* dao, float* dq, float* dk, float* dv, const EagleScratch& sc,
                        core::ThreadPool& pool) {
  const int64_t D = s.head_dim, nq = s.n_q(), nkv = s.n_kv(), H = s.n_head, HK = s.n_head_kv, G = H / HK;
  const size_t n_seq = b.seq_start.size();
  const float scale = scale_of(s);
  pool.parallel_for(static_cast<int64_t>(n_seq) * HK, 1, [&](int64_t tb, int64_t te, int) {
    std::vector<float> ds;
    for (int64_t task = tb; task < te; ++task) {
      const auto si = static_cast<size_t>(task / HK);
      const int64_t kh = task % HK;
      const int64_t a = b.seq_start[si], T = seq_end(b, si) - a;
      for (int64_t i = 0; i < T; ++i) {
        std::fill(dk + (a + i) * nkv + kh * D, dk + (a + i) * nkv + (kh + 1) * D, 0.0f);
        std::fill(dv + (a + i) * nkv + kh * D, dv + (a + i) * nkv + (kh + 1) * D, 0.0f);
      }
      ds.resize(static_cast<size_t>(T));
      for (int64_t h = kh * G; h < (kh + 1) * G; ++h) {
        const float* P = sc.probs.data() + sc.prob_off[si * static_cast<size_t>(H) + static_cast<size_t>(h)];
        for (int64_t i = 0; i < T; ++i) {
          const float* pr = P + i * T;
          const float* go = dao + (a + i) * nq + h * D;
          // dP_ij = dO_i . v_j ; dS_ij = P_ij (dP_ij - sum_l P_il dP_il)
          double dot = 0.0;
          for (int64_t j = 0; j <= i; ++j) {
            const float* vj = v + (a + j) * nkv + kh * D;
            float d = 0.0f;
            for (int64_t c = 0; c < D; ++c) d += go[c] * vj[c];
            ds[static_cast<size_t>(j)] = d;
            dot += static_cast<double>(pr[j]) * d;
          }
          const float* qi = q + (a + i) * nq + h * D;
          float* gq = dq + (a + i) * nq + h * D;
          std::fill(gq, gq + D, 0.0f);
          for (int64_t j = 0; j <= i; ++j) {
            const float dsj = pr[j] * (ds[static_cast<size_t>(j)] - static_cast<float>(dot)) * scale;
            const float* kj = k + (a + j) * nkv + kh * D;
            float* gk = dk + (a + j) * nkv + kh * D;
            float* gv = dv + (a + j) * nkv + kh * D;
            for (int64_t c = 0; c < D; ++c) {
              gq[c] += dsj * kj[c];
              gk[c] += dsj * qi[c];
              gv[c] += pr[j] * go[c];
            }
          }
        }
      }
    }
  });
}

}  // namespace treespec::train::eagle_detail
