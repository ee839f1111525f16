// An independent float64 reference forward for the supported GGUF families,
// the oracle for the architecture tests. It shares no code with src/kernels or
// src/model: it reads the metadata keys and tensors itself (through the GGUF reader
// only), and has its own RMSNorm, RoPE (both conventions), GQA attention under an
// explicit visibility mask, SwiGLU and output head, written plainly in double.
//
// What it encodes, from llama.cpp's llama / qwen2 graphs and convert_hf_to_gguf.py:
//   head size = <arch>.attention.key_length, else n_embd / n_head;
//   rotated dims = <arch>.rope.dimension_count, else the head size;
//   pair i rotates by pos * freq_scale * theta^(-2i/n_rot) / rope_freqs[i]
//     (freq_scale = 1 / rope.scaling.factor for linear scaling; rope_freqs.weight = 1s if absent);
//   llama rotates (x[2i], x[2i+1]) (its Q/K were permuted by the converter), qwen2 rotates
//     (x[i], x[i + n_rot/2]) (GGML NeoX mode);
//   qwen2 adds Q/K/V biases; the output head is token_embd.weight when output.weight is absent.
// And from llama.cpp's qwen3 / gemma2 / gemma3 / phi3 graphs:
//   qwen3, gemma3: per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm) before RoPE;
//   gemma2, gemma3: embeddings x sqrt(n_embd); GELU (tanh form) gate; RMSNorm of the
//     attention and FFN outputs (post_attention_norm / post_ffw_norm) before each residual
//     add; attention logits cap * tanh(s / cap) (attn_logit_softcapping), final logits
//     likewise (final_logit_softcapping); sliding window on even layers (gemma2) or on 5 of
//     every 6 (gemma3, whose local layers use RoPE base 10000 without scaling): a query at
//     position p sees keys at positions > p - sliding_window;
//   phi3: attn_qkv = [Q; K; V] rows, ffn_up = [gate; up] rows; sliding window on every layer;
//     LongRoPE: rope_factors_long when the engine's context per sequence exceeds
//     rope.scaling.original_context_length (else context_length), else rope_factors_short,
//     in place of rope_freqs; cos and sin multiplied by rope.scaling.attn_factor;
//   qwen2, qwen3, gemma*, phi3 rotate halves (NeoX);
//   smollm3: as llama, but layers with (il + 1) % 4 == 0 have no RoPE;
//   ernie4_5 (ERNIE 4.5 dense): as llama;
//   granite: as llama, embeddings x embedding_scale, block outputs x residual_scale before
//     each residual add, scores x attention.scale (not 1/sqrt(head size)), logits / logit_scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/fp16.h"

namespace treespec::test {

// Deliberately wrong variants, so tests can show they would notice a wrong convention.
struct ReferenceOptions {
  bool flip_rope_convention = false;
  bool ignore_rope_freqs = false;
  bool ignore_longrope = false;  // neither LongRoPE's factors nor its attention factor
  // The context per sequence of the engine under test (LongRoPE picks its factors by it).
  int n_ctx = 0;
};

class ReferenceModel {
 public:
  using Vec = std::vector<double>;
  using Options = ReferenceOptions;

  explicit ReferenceModel(const gguf::GgufFile& f, Options opt = Options()) : opt_(opt) {
    arch_ = f.get_string("general.architecture");
    const std::string a = arch_ + ".";
    n_embd_ = static_cast<int>(f.get_int(a + "embedding_length"));
    n_layer_ = static_cast<int>(f.get_int(a + "block_count"));
    n_head_ = static_cast<int>(f.get_int(a + "attention.head_count"));
    n_head_kv_ = static_cast<int>(f.get_int(a + "attention.head_count_kv", n_head_));
    n_ff_ = static_cast<int>(f.get_int(a + "feed_forward_length"));
    head_dim_ = static_cast<int>(f.get_int(a + "attention.key_length", n_embd_ / n_head_));
    n_rot_ = static_cast<int>(f.get_int(a + "rope.dimension_count", head_dim_));
    eps_ = f.get_float(a + "attention.layer_norm_rms_epsilon");
    theta_ = f.get_float(a + "rope.freq_base", 10000.0);
    if (f.get_string(a + "rope.scaling.type", "none") == "linear")
      freq_scale_ = 1.0 / f.get_float(a + "rope.scaling.factor");
    const bool gemma = arch_ == "gemma2" || arch_ == "gemma3";
    neox_ = (arch_ != "llama" && arch_ != "smollm3" && arch_ != "ernie4_5" && arch_ != "granite") !=
            opt_.flip_rope_convention;
    gemma_ = gemma;
    if (gemma) emb_scale_ = std::sqrt(static_cast<double>(n_embd_));
    attn_softcap_ = f.get_float(a + "attn_logit_softcapping", 0.0);
    final_softcap_ = f.get_float(a + "final_logit_softcapping", 0.0);
    n_swa_ = static_cast<int>(f.get_int(a + "attention.sliding_window", 0));
    q_scale_ = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    if ((arch_ == "gemma2" && n_layer_ == 46) || (arch_ == "gemma3" && n_layer_ == 62)) {
      q_scale_ = 1.0 / std::sqrt(static_cast<double>(n_embd_ / n_head_));
    }

    if (arch_ == "granite") {
      emb_scale_ = f.get_float(a + "embedding_scale");
      res_scale_ = f.get_float(a + "residual_scale");
      q_scale_ = f.get_float(a + "attention.scale");
      logit_div_ = f.get_float(a + "logit_scale");
    }

    const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
    n_vocab_ = static_cast<int>(emb->ne[1]);
    tok_embd_ = read(f, "token_embd.weight");
    output_ = f.find_tensor("output.weight") ? read(f, "output.weight") : tok_embd_;
    output_norm_ = read(f, "output_norm.weight");
    rope_factor_.assign(static_cast<size_t>(n_rot_ / 2), 1.0);
    if (f.find_tensor("rope_freqs.weight") && !opt_.ignore_rope_freqs) {
      rope_factor_ = read(f, "rope_freqs.weight");
    } else if (f.find_tensor("rope_factors_short.weight") && !opt_.ignore_longrope) {
      const int64_t orig = f.get_int(a + "rope.scaling.original_context_length", f.get_int(a + "context_length"));
      rope_factor_ = read(f, opt_.n_ctx > orig ? "rope_factors_long.weight" : "rope_factors_short.weight");
    }
    if (!opt_.ignore_longrope) rope_mscale_ = f.get_float(a + "rope.scaling.attn_factor", 1.0);
    for (int il = 0; il < n_layer_; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      Layer L;
      L.attn_norm = read(f, p + "attn_norm.weight");
      if (f.find_tensor(p + "attn_qkv.weight")) {
        const Vec qkv = read(f, p + "attn_qkv.weight");
        const size_t nq = static_cast<size_t>(n_head_) * head_dim_ * n_embd_;
        const size_t nk = static_cast<size_t>(n_head_kv_) * head_dim_ * n_embd_;
        L.wq.assign(qkv.begin(), qkv.begin() + static_cast<long>(nq));
        L.wk.assign(qkv.begin() + static_cast<long>(nq), qkv.begin() + static_cast<long>(nq + nk));
        L.wv.assign(qkv.begin() + static_cast<long>(nq + nk), qkv.end());
      } else {
        L.wq = read(f, p + "attn_q.weight");
        L.wk = read(f, p + "attn_k.weight");
        L.wv = read(f, p + "attn_v.weight");
      }
      if (arch_ == "qwen3" || arch_ == "gemma3") {
        L.q_norm = read(f, p + "attn_q_norm.weight");
        L.k_norm = read(f, p + "attn_k_norm.weight");
      }
      if (gemma) {
        L.post_attn = read(f, p + "post_attention_norm.weight");
        L.post_ffn = read(f, p + "post_ffw_norm.weight");
      }
      L.local =
          n_swa_ > 0 && (arch_ == "phi3" || (arch_ == "gemma2" && il % 2 == 0) || (arch_ == "gemma3" && il % 6 < 5));
      L.nope = arch_ == "smollm3" && (il + 1) % 4 == 0;
      if (f.find_tensor(p + "attn_q.bias")) {
        L.bq = read(f, p + "attn_q.bias");
        L.bk = read(f, p + "attn_k.bias");
        L.bv = read(f, p + "attn_v.bias");
      }
      L.wo = read(f, p + "attn_output.weight");
      L.ffn_norm = read(f, p + "ffn_norm.weight");
      if (f.find_tensor(p + "ffn_gate.weight")) {
        L.gate = read(f, p + "ffn_gate.weight");
        L.up = read(f, p + "ffn_up.weight");
      } else {  // phi3: [gate; up]
        const Vec gu = read(f, p + "ffn_up.weight");
        const auto half = static_cast<long>(gu.size() / 2);
        L.gate.assign(gu.begin(), gu.begin() + half);
        L.up.assign(gu.begin() + half, gu.end());
      }
      L.down = read(f, p + "ffn_down.weight");
      layers_.push_back(std::move(L));
    }
  }

  int n_vocab() const { return n_vocab_; }

  // Logits [n][n_vocab] of rows (token, position) where row i attends to the rows j
  // with visible[i][j] (its causal prefix or tree ancestors, itself included).
  std::vector<Vec> forward(const std::vector<int>& tokens, const std::vector<int>& pos,
                           const std::vector<std::vector<bool>>& visible) const {
    const size_t n = tokens.size();
    const int nq = n_head_ * head_dim_, nkv = n_head_kv_ * head_dim_;
    std::vector<Vec> x(n);
    for (size_t i = 0; i < n; ++i) {
      x[i].assign(tok_embd_.begin() + static_cast<long>(tokens[i]) * n_embd_,
                  tok_embd_.begin() + static_cast<long>(tokens[i] + 1) * n_embd_);
      for (double& e : x[i]) e *= emb_scale_;
    }
    for (const Layer& L : layers_) {
      std::vector<Vec> q(n), k(n), v(n);
      const double theta = L.local && arch_ == "gemma3" ? 10000.0 : theta_;
      const double fscale = L.local && arch_ == "gemma3" ? 1.0 : freq_scale_;
      for (size_t i = 0; i < n; ++i) {
        const Vec h = rmsnorm(x[i], L.attn_norm);
        q[i] = matvec(L.wq, h, nq, L.bq);
        k[i] = matvec(L.wk, h, nkv, L.bk);
        v[i] = matvec(L.wv, h, nkv, L.bv);
        if (!L.q_norm.empty()) {
          head_norm(q[i], n_head_, L.q_norm);
          head_norm(k[i], n_head_kv_, L.k_norm);
        }
        if (!L.nope) {
          rope(q[i], n_head_, pos[i], theta, fscale);
          rope(k[i], n_head_kv_, pos[i], theta, fscale);
        }
      }
      const int group = n_head_ / n_head_kv_;
      for (size_t i = 0; i < n; ++i) {
        Vec att(static_cast<size_t>(nq), 0.0);
        for (int h = 0; h < n_head_; ++h) {
          const int g = h / group;
          std::vector<double> s;
          std::vector<size_t> js;
          double mx = -1e300;
          for (size_t j = 0; j < n; ++j) {
            if (!visible[i][j]) continue;
            if (L.local && pos[i] - pos[j] >= n_swa_) continue;
            double d = 0;
            for (int e = 0; e < head_dim_; ++e) d += q[i][h * head_dim_ + e] * k[j][g * head_dim_ + e];
            d *= q_scale_;
            if (attn_softcap_ > 0) d = attn_softcap_ * std::tanh(d / attn_softcap_);
            s.push_back(d);
            js.push_back(j);
            mx = std::max(mx, d);
          }
          double z = 0;
          for (double& d : s) z += (d = std::exp(d - mx));
          for (size_t t = 0; t < js.size(); ++t) {
            for (int e = 0; e < head_dim_; ++e) att[h * head_dim_ + e] += s[t] / z * v[js[t]][g * head_dim_ + e];
          }
        }
        Vec o = matvec(L.wo, att, n_embd_, {});
        if (!L.post_attn.empty()) o = rmsnorm(o, L.post_attn);
        for (int e = 0; e < n_embd_; ++e) x[i][e] += res_scale_ * o[e];
      }
      for (size_t i = 0; i < n; ++i) {
        const Vec h = rmsnorm(x[i], L.ffn_norm);
        const Vec g = matvec(L.gate, h, n_ff_, {});
        const Vec u = matvec(L.up, h, n_ff_, {});
        Vec a(static_cast<size_t>(n_ff_));
        for (int e = 0; e < n_ff_; ++e) {
          const double ge = g[e];
          const double act = gemma_
                                 ? 0.5 * ge * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (ge + 0.044715 * ge * ge * ge)))
                                 : ge / (1.0 + std::exp(-ge));
          a[e] = act * u[e];
        }
        Vec d = matvec(L.down, a, n_embd_, {});
        if (!L.post_ffn.empty()) d = rmsnorm(d, L.post_ffn);
        for (int e = 0; e < n_embd_; ++e) x[i][e] += res_scale_ * d[e];
      }
    }
    std::vector<Vec> logits(n);
    for (size_t i = 0; i < n; ++i) {
      logits[i] = matvec(output_, rmsnorm(x[i], output_norm_), n_vocab_, {});
      if (final_softcap_ > 0) {
        for (double& l : logits[i]) l = final_softcap_ * std::tanh(l / final_softcap_);
      }
      for (double& l : logits[i]) l /= logit_div_;
    }
    return logits;
  }

  // Plain causal run of tokens at positions 0..n-1.
  std::vector<Vec> causal(const std::vector<int>& tokens) const {
    const size_t n = tokens.size();
    std::vector<int> pos(n);
    std::vector<std::vector<bool>> vis(n, std::vector<bool>(n, false));
    for (size_t i = 0; i < n; ++i) {
      pos[i] = static_cast<int>(i);
      for (size_t j = 0; j <= i; ++j) vis[i][j] = true;
    }
    return forward(tokens, pos, vis);
  }

 private:
  struct Layer {
    Vec attn_norm, ffn_norm, bq, bk, bv;
    Vec q_norm, k_norm, post_attn, post_ffn;  // empty when the family has none
    Vec wq, wk, wv, wo, gate, up, down;       // [n_out][n_in], row-major
    bool local = false;                       // sliding-window layer
    bool nope = false;                        // no RoPE (SmolLM3)
  };

  // RMSNorm of each head_dim slice with the same weights.
  void head_norm(Vec& x, int n_heads, const Vec& w) const {
    for (int h = 0; h < n_heads; ++h) {
      const Vec part(x.begin() + static_cast<long>(h) * head_dim_, x.begin() + static_cast<long>(h + 1) * head_dim_);
      const Vec y = rmsnorm(part, w);
      std::copy(y.begin(), y.end(), x.begin() + static_cast<long>(h) * head_dim_);
    }
  }

  // Any f32 / f16 / bf16 tensor as doubles in GGUF order (ne[0] contiguous).
  static Vec read(const gguf::GgufFile& f, const std::string& name) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (!t) throw std::runtime_error("reference: missing tensor " + name);
    const auto n = static_cast<size_t>(t->n_elements());
    Vec out(n);
    for (size_t i = 0; i < n; ++i) {
      if (t->type == tensor::DType::f32) {
        float v;
        std::memcpy(&v, t->data + 4 * i, 4);
        out[i] = v;
      } else if (t->type == tensor::DType::f16 || t->type == tensor::DType::bf16) {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        out[i] = t->type == tensor::DType::f16 ? tensor::fp16_to_fp32(h) : tensor::bf16_to_fp32(h);
      } else {
        throw std::runtime_error("reference: tensor " + name + " is not f32/f16/bf16");
      }
    }
    return out;
  }

  Vec rmsnorm(const Vec& x, const Vec& w) const {
    double ss = 0;
    for (double e : x) ss += e * e;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps_);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
    return y;
  }

  static Vec matvec(const Vec& w, const Vec& x, int n_out, const Vec& bias) {
    const size_t n_in = x.size();
    Vec y(static_cast<size_t>(n_out));
    for (int o = 0; o < n_out; ++o) {
      double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(o)];
      for (size_t i = 0; i < n_in; ++i) s += w[static_cast<size_t>(o) * n_in + i] * x[i];
      y[static_cast<size_t>(o)] = s;
    }
    return y;
  }

  void rope(Vec& x, int n_heads, int p, double theta, double freq_scale) const {
    const int half = n_rot_ / 2;
    for (int h = 0; h < n_heads; ++h) {
      double* v = x.data() + static_cast<size_t>(h) * head_dim_;
      for (int i = 0; i < half; ++i) {
        const double freq = freq_scale * std::pow(theta, -2.0 * i / n_rot_) / rope_factor_[static_cast<size_t>(i)];
        const double c = std::cos(p * freq) * rope_mscale_, s = std::sin(p * freq) * rope_mscale_;
        const int a = neox_ ? i : 2 * i;
        const int b = neox_ ? i + half : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }

  Options opt_;
  std::string arch_;
  int n_vocab_ = 0, n_embd_ = 0, n_layer_ = 0, n_head_ = 0, n_head_kv_ = 0, n_ff_ = 0, head_dim_ = 0, n_rot_ = 0;
  double eps_ = 1e-5, theta_ = 10000.0, freq_scale_ = 1.0;
  double emb_scale_ = 1.0, attn_softcap_ = 0.0, final_softcap_ = 0.0, q_scale_ = 1.0;
  double res_scale_ = 1.0, logit_div_ = 1.0;
  int n_swa_ = 0;
  bool neox_ = false, gemma_ = false;
  Vec tok_embd_, output_, output_norm_, rope_factor_;
  double rope_mscale_ = 1.0;
  std::vector<Layer> layers_;
};

}  // namespace treespec::test
