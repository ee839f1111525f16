#include "model/expand.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/quantize.h"
#include "tensor/quant.h"
#include "treespec/status.h"

namespace treespec::model {

using tensor::DType;

AxisMap AxisMap::identity_padded(int64_t n_src, int64_t n_new) {
  AxisMap a;
  a.n_new = n_new;
  a.src_to_new.resize(static_cast<size_t>(n_src));
  a.live.assign(static_cast<size_t>(n_new), 0);
  for (int64_t i = 0; i < n_src; ++i) {
    a.src_to_new[static_cast<size_t>(i)] = i;
    a.live[static_cast<size_t>(i)] = 1;
  }
  return a;
}

float filler(core::Rng& rng, float std) {
  // Sum of four 16-bit uniforms: mean 2, variance 4/12; scaled to unit variance.
  const uint64_t u = rng.next_u64();
  const float s = static_cast<float>((u & 0xffff) + ((u >> 16) & 0xffff) + ((u >> 32) & 0xffff) + (u >> 48)) *
                  (1.0f / 65536.0f);
  return (s - 2.0f) * 1.7320508f * std;
}

void place_matrix(const float* src, int64_t n_in_src, int64_t n_out_src, const AxisMap& in, const AxisMap& out,
                  const std::vector<uint8_t>& row_exact, float scale, float filler_std, int64_t block, core::Rng& rng,
                  float* dst) {
  const int64_t N = in.n_new;
  // Columns that must be zero in exact rows: live ones, and any in a block with a live one
  // (filler there would change the block's quantisation scale of the real values).
  std::vector<uint8_t> zero_col(static_cast<size_t>(N), 0);
  for (int64_t b0 = 0; b0 < N; b0 += block) {
    const int64_t b1 = std::min(N, b0 + block);
    bool any = false;
    for (int64_t i = b0; i < b1; ++i) any |= in.live[static_cast<size_t>(i)] != 0;
    if (any) std::fill(zero_col.begin() + b0, zero_col.begin() + b1, 1);
  }
  for (int64_t o = 0; o < out.n_new; ++o) {
    float* d = dst + o * N;
    if (row_exact[static_cast<size_t>(o)]) {
      for (int64_t i = 0; i < N; ++i) d[i] = zero_col[static_cast<size_t>(i)] ? 0.0f : filler(rng, filler_std);
    } else {
      for (int64_t i = 0; i < N; ++i) d[i] = filler(rng, filler_std);
    }
  }
  for (int64_t o = 0; o < n_out_src; ++o) {
    float* d = dst + out.src_to_new[static_cast<size_t>(o)] * N;
    for (int64_t i = 0; i < n_in_src; ++i) d[in.src_to_new[static_cast<size_t>(i)]] = scale * src[o * n_in_src + i];
  }
}

namespace {

float rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0.0f : static_cast<float>(std::sqrt(s / static_cast<double>(v.size())));
}

struct Ctx {
  const gguf::GgufFile* f = nullptr;
  const ExpandOptions* opts = nullptr;
  gguf::GgufWriter* w = nullptr;
  core::Rng* rng = nullptr;
  ExpandSummary* sum = nullptr;

  std::vector<float> read(const std::string& name) const {
    const gguf::TensorInfo* t = f->find_tensor(name);
    if (!t) throw FormatError(fmt::format("{}: tensor '{}' is missing", f->path(), name));
    return tensor_to_f32(f->path(), name, t->type, t->ne, t->data);
  }
  DType src_type(const std::string& name) const { return f->find_tensor(name)->type; }

  // Type of a new tensor: --type if given, else the source tensor's (with fallbacks).
  DType type_for(const std::string& name, const std::vector<int64_t>& ne, DType src) const {
    if (ne.size() < 2) return DType::f32;
    return quant_type_for(name, ne, opts->type ? *opts->type : src);
  }

  void add(const std::string& name, DType type, const std::vector<int64_t>& ne, const std::vector<float>& v) {
    const int64_t row = ne[0];
    const auto bytes = f32_to_tensor(type, v.data(), static_cast<int64_t>(v.size()) / row, row);
    w->add_tensor(name, type, ne, bytes.data(), bytes.size());
    sum->n_params += v.size();
    sum->tensor_bytes += bytes.size();
  }
};

}  // namespace

std::vector<int32_t> expanded_layer_positions(int32_t n_layer_src, int32_t n_layer_new) {
  if (n_layer_src <= 0 || n_layer_new < n_layer_src) {
    throw InvalidArgument(fmt::format("expand: cannot place {} source layers in {} layers", n_layer_src, n_layer_new));
  }
  // Real layer l goes to the middle of the l-th of L0 equal stretches of the new depth.
  std::vector<int32_t> pos;
  for (int64_t l = 0; l < n_layer_src; ++l) pos.push_back(static_cast<int32_t>(((2 * l + 1) * n_layer_new) / (2 * int64_t{n_layer_src})));
  return pos;
}

ExpandSummary expand_gguf(const std::string& in, const std::string& out, const ExpandOptions& o) {
  const auto model = Model::load(in);
  const Hparams& hp = model->hparams();
  const gguf::GgufFile& f = model->gguf();
  if (hp.arch != "llama" && hp.arch != "qwen2") {
    throw Unsupported(fmt::format("{}: expand supports the llama and qwen2 architectures, not '{}'", in, hp.arch));
  }

  const int64_t E0 = hp.n_embd, F0 = hp.n_ff, L0 = hp.n_layer, H0 = hp.n_head, KV0 = hp.n_head_kv, hd0 = hp.head_dim;
  const int64_t E = o.n_embd, F = o.n_ff, L = o.n_layer;
  const int64_t hd = o.head_dim > 0 ? o.head_dim : hd0;
  if (E < E0 || F < F0 || L < L0) {
    throw InvalidArgument(fmt::format("expand: --dim {} --ffn {} --layers {} must be at least the source's {} / {} / {}", E,
                                      F, L, E0, F0, L0));
  }
  if (hd % hd0 != 0) throw InvalidArgument(fmt::format("expand: --head-dim {} must be a multiple of the source head_dim {}", hd, hd0));
  const int64_t r = hd / hd0;
  if (o.n_head <= 0 && E % hd != 0) {
    throw InvalidArgument(fmt::format("expand: --dim {} is not a multiple of head_dim {}; give --heads", E, hd));
  }
  const int64_t H = o.n_head > 0 ? o.n_head : E / hd;
  const int64_t group = H0 / KV0;
  if (H < H0 || H % group != 0) {
    throw InvalidArgument(fmt::format("expand: {} heads must be >= the source's {} and a multiple of its GQA group {}", H, H0, group));
  }
  const int64_t KV = H / group;
  if (r > 1 && hp.n_rot != hd0) {
    throw Unsupported(fmt::format("{}: a new head_dim needs full-width RoPE (rope.dimension_count {} != head_dim {})", in,
                                  hp.n_rot, hd0));
  }
  const int64_t n_rot = hp.n_rot * r;

  // Where dim i of a source head lands in a new head: RoPE pair p becomes pair r*p, whose
  // frequency theta^(-2rp/(r hd0)) equals the source pair's exactly.
  auto dmap = [&](int64_t i) -> int64_t {
    if (r == 1) return i;
    if (hp.rope_neox) {
      const int64_t half0 = hd0 / 2, half = hd / 2;
      return (i / half0) * half + r * (i % half0);
    }
    return 2 * (r * (i / 2)) + (i % 2);
  };
  // Head axes: Q (H heads, every dim of a real head is exact: its padded dims must stay 0),
  // K/V (KV heads; only mapped dims of real heads are exact).
  auto head_axis = [&](int64_t n_heads_src, int64_t n_heads_new, bool all_live) {
    AxisMap a;
    a.n_new = n_heads_new * hd;
    a.live.assign(static_cast<size_t>(a.n_new), all_live ? 1 : 0);
    for (int64_t h = 0; h < n_heads_src; ++h) {
      for (int64_t i = 0; i < hd0; ++i) {
        a.src_to_new.push_back(h * hd + dmap(i));
        a.live[static_cast<size_t>(h * hd + dmap(i))] = 1;
      }
    }
    return a;
  };
  const AxisMap ax_e = AxisMap::identity_padded(E0, E);
  const AxisMap ax_q = head_axis(H0, H, true);   // wo reads every attention output dim
  const AxisMap ax_kv = head_axis(KV0, KV, false);
  const AxisMap ax_f_rows = AxisMap::identity_padded(F0, F);
  AxisMap ax_f_in = ax_f_rows;  // w_down reads new units too (non-zero swiglu outputs)
  std::fill(ax_f_in.live.begin(), ax_f_in.live.end(), 1);
  std::vector<uint8_t> exact_q(static_cast<size_t>(H * hd), 0);
  for (int64_t i = 0; i < H0 * hd; ++i) exact_q[static_cast<size_t>(i)] = 1;
  const std::vector<uint8_t>& exact_kv = ax_kv.live;  // mapped dims of real KV heads
  const std::vector<uint8_t> all_exact_e(static_cast<size_t>(E), 1);
  const std::vector<uint8_t>& exact_f = ax_f_rows.live;

  const float norm_scale = static_cast<float>(std::sqrt(static_cast<double>(E0) / static_cast<double>(E)));
  const float eps = hp.rms_eps * static_cast<float>(E0) / static_cast<float>(E);
  const float q_scale = static_cast<float>(std::sqrt(static_cast<double>(r)));

  gguf::GgufWriter w;
  for (const auto& [k, v] : f.metadata()) {
    if (k != "general.alignment") w.set(k, v);
  }
  const std::string a = hp.arch + ".";
  w.set("general.name", gguf::Value::string(hp.name.empty() ? "expanded" : hp.name + "-expanded"));
  if (o.type && file_type_for(*o.type) >= 0) {  // what llama.cpp tools show as the file's type
    w.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(file_type_for(*o.type))));
  }
  w.set(a + "embedding_length", gguf::Value::u32(static_cast<uint32_t>(E)));
  w.set(a + "feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(F)));
  w.set(a + "block_count", gguf::Value::u32(static_cast<uint32_t>(L)));
  w.set(a + "attention.head_count", gguf::Value::u32(static_cast<uint32_t>(H)));
  w.set(a + "attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(KV)));
  if (H * hd != E || f.has(a + "attention.key_length")) {
    w.set(a + "attention.key_length", gguf::Value::u32(static_cast<uint32_t>(hd)));
    w.set(a + "attention.value_length", gguf::Value::u32(static_cast<uint32_t>(hd)));
  }
  if (r > 1 || f.has(a + "rope.dimension_count")) w.set(a + "rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(n_rot)));
  w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(eps));

  core::Rng rng(o.seed);
  ExpandSummary sum;
  sum.n_embd = static_cast<int32_t>(E);
  sum.n_ff = static_cast<int32_t>(F);
  sum.n_layer = static_cast<int32_t>(L);
  sum.n_head = static_cast<int32_t>(H);
  sum.n_head_kv = static_cast<int32_t>(KV);
  sum.head_dim = static_cast<int32_t>(hd);
  Ctx c{&f, &o, &w, &rng, &sum};
  auto block_of = [](DType t) { return tensor::dtype_traits(t).block_size; };

  // Filler scale per tensor kind: the RMS of the source tensors of that kind, so filler
  // blocks quantise like real weights.
  std::map<std::string, float> fill_std;
  std::map<std::string, float> gain_mean;
  for (const char* kind : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm",
                           "ffn_norm", "attn_q_bias", "attn_k_bias", "attn_v_bias"}) {
    double acc = 0, mean = 0;
    int64_t n = 0;
    for (int64_t l = 0; l < L0; ++l) {
      std::string name = fmt::format("blk.{}.{}.weight", l, kind);
      if (std::string(kind).ends_with("_bias")) name = fmt::format("blk.{}.{}.bias", l, std::string(kind).substr(0, 6));
      if (!f.find_tensor(name)) continue;
      const auto v = c.read(name);
      acc += rms(v);
      for (float x : v) mean += x / static_cast<double>(v.size());
      ++n;
    }
    fill_std[kind] = n ? static_cast<float>(acc / static_cast<double>(n)) : 0.02f;
    gain_mean[kind] = n ? static_cast<float>(mean / static_cast<double>(n)) : 1.0f;
  }
  auto gain = [&](const std::vector<float>* src, const char* kind) {  // [E]
    std::vector<float> g(static_cast<size_t>(E));
    for (int64_t i = 0; i < E; ++i) g[static_cast<size_t>(i)] = gain_mean[kind] + filler(rng, 0.1f * std::fabs(gain_mean[kind]) + 1e-3f);
    if (src) {
      for (int64_t i = 0; i < E0; ++i) g[static_cast<size_t>(i)] = (*src)[static_cast<size_t>(i)] * norm_scale;
    }
    return g;
  };

  // Token embedding: every entry outside the source block writes into the residual
  // padding, so it is zero (this also makes a tied lm_head exact).
  {
    const std::string name = "token_embd.weight";
    const auto src = c.read(name);
    const int64_t V = hp.n_vocab;
    AxisMap cols = ax_e;
    std::fill(cols.live.begin(), cols.live.end(), 1);
    const AxisMap rows = AxisMap::identity_padded(V, V);
    std::vector<float> dst(static_cast<size_t>(V * E));
    const DType t = c.type_for(name, {E, V}, c.src_type(name));
    place_matrix(src.data(), E0, V, cols, rows, rows.live, 1.0f, 0.0f, block_of(t), rng, dst.data());
    c.add(name, t, {E, V}, dst);
  }
  {
    const auto src = c.read("output_norm.weight");
    gain_mean["output_norm"] = 0;
    for (float x : src) gain_mean["output_norm"] += x / static_cast<float>(src.size());
    c.add("output_norm.weight", DType::f32, {E}, gain(&src, "output_norm"));
  }
  if (f.find_tensor("output.weight")) {
    const std::string name = "output.weight";
    const auto src = c.read(name);
    const int64_t V = hp.n_vocab;
    const AxisMap rows = AxisMap::identity_padded(V, V);
    std::vector<float> dst(static_cast<size_t>(V * E));
    const DType t = c.type_for(name, {E, V}, c.src_type(name));
    place_matrix(src.data(), E0, V, ax_e, rows, rows.live, 1.0f, rms(src), block_of(t), rng, dst.data());
    c.add(name, t, {E, V}, dst);
  }

  std::vector<int64_t> src_of(static_cast<size_t>(L), -1);
  sum.real_layer_pos = expanded_layer_positions(static_cast<int32_t>(L0), static_cast<int32_t>(L));
  for (int64_t l = 0; l < L0; ++l) src_of[static_cast<size_t>(sum.real_layer_pos[static_cast<size_t>(l)])] = l;

  const AxisMap one_in{1, {0}, {1}};
  for (int64_t li = 0; li < L; ++li) {
    const int64_t l = src_of[static_cast<size_t>(li)];
    const bool real = l >= 0;
    const std::string sp = fmt::format("blk.{}.", real ? l : 0);  // pass-through: layer 0 supplies types
    const std::string p = fmt::format("blk.{}.", li);
    auto mat = [&](const char* kind, const AxisMap& in_ax, const AxisMap& out_ax, const std::vector<uint8_t>& exact,
                   float scale, bool zero_if_passthrough) {
      const std::string sname = sp + kind + ".weight";
      const std::vector<int64_t> ne = {in_ax.n_new, out_ax.n_new};
      const DType t = c.type_for(p + kind + ".weight", ne, c.src_type(sname));
      std::vector<float> dst(static_cast<size_t>(in_ax.n_new * out_ax.n_new));
      if (real) {
        const auto src = c.read(sname);
        const int64_t n_in_src = f.find_tensor(sname)->ne[0];
        place_matrix(src.data(), n_in_src, static_cast<int64_t>(src.size()) / n_in_src, in_ax, out_ax, exact, scale,
                     fill_std[kind], block_of(t), rng, dst.data());
      } else if (!zero_if_passthrough) {
        for (auto& x : dst) x = filler(rng, fill_std[kind]);
      }  // else: a pass-through layer's output projection is zero: it adds nothing
      c.add(p + kind + ".weight", t, ne, dst);
    };
    auto bias = [&](const char* kind, const AxisMap& ax, const std::vector<uint8_t>& exact, float scale) {
      const std::string sname = sp + kind + ".bias";
      if (!f.find_tensor(sname)) return;
      std::vector<float> dst(static_cast<size_t>(ax.n_new));
      const std::string fk = std::string(kind) + "_bias";
      if (real) {
        const auto src = c.read(sname);
        place_matrix(src.data(), 1, static_cast<int64_t>(src.size()), one_in, ax, exact, scale, fill_std[fk], 1, rng,
                     dst.data());
      } else {
        for (auto& x : dst) x = filler(rng, fill_std[fk]);
      }
      c.add(p + kind + ".bias", DType::f32, {ax.n_new}, dst);
    };
    {
      const auto src = real ? c.read(sp + "attn_norm.weight") : std::vector<float>();
      c.add(p + "attn_norm.weight", DType::f32, {E}, gain(real ? &src : nullptr, "attn_norm"));
    }
    mat("attn_q", ax_e, ax_q, exact_q, q_scale, false);
    mat("attn_k", ax_e, ax_kv, exact_kv, 1.0f, false);
    mat("attn_v", ax_e, ax_kv, exact_kv, 1.0f, false);
    bias("attn_q", ax_q, exact_q, q_scale);
    bias("attn_k", ax_kv, exact_kv, 1.0f);
    bias("attn_v", ax_kv, exact_kv, 1.0f);
    mat("attn_output", ax_q, ax_e, all_exact_e, 1.0f, true);
    {
      const auto src = real ? c.read(sp + "ffn_norm.weight") : std::vector<float>();
      c.add(p + "ffn_norm.weight", DType::f32, {E}, gain(real ? &src : nullptr, "ffn_norm"));
    }
    mat("ffn_gate", ax_e, ax_f_rows, exact_f, 1.0f, false);
    mat("ffn_up", ax_e, ax_f_rows, exact_f, 1.0f, false);
    mat("ffn_down", ax_f_in, ax_e, all_exact_e, 1.0f, true);
  }
  if (f.find_tensor("rope_freqs.weight")) {
    if (r > 1) throw Unsupported(fmt::format("{}: rope_freqs with a new head_dim is not supported", in));
    c.add("rope_freqs.weight", DType::f32, {hp.n_rot / 2}, c.read("rope_freqs.weight"));
  }
  w.write(out);
  return sum;
}

}  // namespace treespec::model
