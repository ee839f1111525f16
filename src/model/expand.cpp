#include "model/expand.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <map>

#include "core/assert.h"
#include "gguf/gguf.h"
#include "model/arch.h"
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
  const float s =
      static_cast<float>((u & 0xffff) + ((u >> 16) & 0xffff) + ((u >> 32) & 0xffff) + (u >> 48)) * (1.0f / 65536.0f);
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

}  // namespace

std::vector<int32_t> expanded_layer_positions(int32_t n_layer_src, int32_t n_layer_new,
                                              const std::function<int(int64_t)>& kind) {
  if (n_layer_src <= 0 || n_layer_new < n_layer_src) {
    throw InvalidArgument(fmt::format("expand: cannot place {} source layers in {} layers", n_layer_src, n_layer_new));
  }
  // Real layer l goes to the middle of the l-th of L0 equal stretches of the new depth.
  std::vector<int32_t> pos;
  for (int64_t l = 0; l < n_layer_src; ++l)
    pos.push_back(static_cast<int32_t>(((2 * l + 1) * n_layer_new) / (2 * int64_t{n_layer_src})));
  if (!kind) return pos;
  // Each real layer moves to the nearest index of its own kind after the previous one
  // from which the later layers still fit (earliest fit decides that; the identity
  // placement always fits, so this never fails).
  auto fits_after = [&](int64_t from, int64_t l0) {  // layers l0.. placeable at indices > from
    for (int64_t l = l0, i = from + 1; l < n_layer_src; ++l, ++i) {
      while (i < n_layer_new && kind(i) != kind(l)) ++i;
      if (i >= n_layer_new) return false;
    }
    return true;
  };
  int64_t prev = -1;
  for (int64_t l = 0; l < n_layer_src; ++l) {
    const int64_t want = pos[static_cast<size_t>(l)];
    int64_t best = -1;
    for (int64_t i = prev + 1; i < n_layer_new; ++i) {
      if (kind(i) != kind(l) || !fits_after(i, l + 1)) continue;
      if (best < 0 || std::llabs(i - want) < std::llabs(best - want)) best = i;
    }
    TREESPEC_ASSERT(best >= 0, "expanded_layer_positions: no placement (n_layer_new >= n_layer_src always has one)");
    pos[static_cast<size_t>(l)] = static_cast<int32_t>(best);
    prev = best;
  }
  return pos;
}

std::vector<int32_t> expanded_layer_positions(const Hparams& src, int32_t n_layer_new) {
  const ArchTraits* arch = find_arch(src.arch);
  if (arch == nullptr || ((src.n_swa == 0 || arch->swa_period <= 1) && arch->nope_period == 0)) {
    return expanded_layer_positions(src.n_layer, n_layer_new);
  }
  const bool window = src.n_swa > 0;
  return expanded_layer_positions(src.n_layer, n_layer_new, [arch, window](int64_t il) {
    return (window && is_swa_layer(*arch, il) ? 1 : 0) + (uses_rope(*arch, il) ? 0 : 2);
  });
}

namespace {

// The expansion of one model (docs/expand.md): the geometry, the scales of the
// construction, and the writers of each tensor group.
class Expander {
 public:
  Expander(const Model& model, const ExpandOptions& o, gguf::GgufWriter& w, ExpandSummary& sum);
  void write_metadata();
  void write_embeddings_and_output();
  void write_stack_input_and_norm();        // layer stacks: enorm, fc, output_norm
  void write_layer(int64_t li, int64_t l);  // l: source layer, or -1 for a pass-through
  void write_rope_factors();

 private:
  using Vec = std::vector<float>;
  int64_t dmap(int64_t i) const;
  AxisMap head_axis(int64_t n_heads_src, int64_t n_heads_new, bool all_live) const;
  Vec filler_gains(int64_t n, const char* kind);  // n gains around the kind's mean
  Vec gain(const Vec* src, const char* kind, float scale);
  void measure_fillers();
  // A source tensor as f32; the source type of a tensor; the type of a new tensor
  // (--type if given, else the source's, with quant_type_for's fallbacks); writes one.
  Vec read(const std::string& name) const;
  DType src_type(const std::string& name) const { return f_.find_tensor(name)->type; }
  DType type_for(const std::string& name, const std::vector<int64_t>& ne, DType src) const;
  void add(const std::string& name, DType type, const std::vector<int64_t>& ne, const Vec& v);
  // dst [in.n_new * out.n_new] for a source block [n_out_src, n_in_src] (docs/expand.md).
  Vec placed(const float* src, int64_t n_in_src, int64_t n_out_src, const AxisMap& in, const AxisMap& out,
             const std::vector<uint8_t>& exact, float scale, const char* fill_kind, DType t);

  const Hparams& hp_;
  const gguf::GgufFile& f_;
  const ExpandOptions& o_;
  std::string prefix_;  // metadata prefix: general.architecture + "." (a layer stack's own)
  const ArchTraits& arch_;
  gguf::GgufWriter& w_;
  ExpandSummary& sum_;
  core::Rng rng_;
  int64_t E0, F0, L0, H0, KV0, hd0, E, F, L, H, KV, hd, r;
  AxisMap ax_e_, ax_q_, ax_kv_, ax_f_rows_, ax_f_in_;
  std::vector<uint8_t> exact_q_, exact_k_, all_exact_e_;
  float norm_scale_ = 1, eps_ = 0;
  float res_scale_ = 1;   // the residual stream is the source's times this (live dims)
  float embd_scale_ = 1;  // token_embd is the source's times this
  float q_fix_ = 1;       // restores the source's query scale
  std::map<std::string, float> fill_std_, gain_mean_;
};

Expander::Expander(const Model& model, const ExpandOptions& o, gguf::GgufWriter& w, ExpandSummary& sum)
    : hp_(model.hparams()),
      f_(model.gguf()),
      o_(o),
      prefix_(model.gguf().get_string("general.architecture") + "."),
      arch_(*find_arch(model.hparams().arch)),
      w_(w),
      sum_(sum),
      rng_(o.seed) {
  const std::string& in = f_.path();
  E0 = hp_.n_embd, F0 = hp_.n_ff, L0 = hp_.n_layer, H0 = hp_.n_head, KV0 = hp_.n_head_kv, hd0 = hp_.head_dim;
  E = o.n_embd, F = o.n_ff, L = hp_.layers_only ? L0 : o.n_layer;  // a layer stack keeps its layers
  hd = o.head_dim > 0 ? o.head_dim : hd0;
  if (E < E0 || F < F0 || L < L0) {
    throw InvalidArgument(
        fmt::format("expand: --dim {} --ffn {} --layers {} must be at least the source's {} / {} / {}", E, F, L, E0, F0,
                    L0));
  }
  if (hd % hd0 != 0)
    throw InvalidArgument(fmt::format("expand: --head-dim {} must be a multiple of the source head_dim {}", hd, hd0));
  r = hd / hd0;
  if (o.n_head <= 0 && E % hd != 0) {
    throw InvalidArgument(fmt::format("expand: --dim {} is not a multiple of head_dim {}; give --heads", E, hd));
  }
  H = o.n_head > 0 ? o.n_head : E / hd;
  const int64_t group = H0 / KV0;
  if (H < H0 || H % group != 0) {
    throw InvalidArgument(
        fmt::format("expand: {} heads must be >= the source's {} and a multiple of its GQA group {}", H, H0, group));
  }
  KV = H / group;
  if (r > 1 && hp_.n_rot != hd0) {
    throw Unsupported(fmt::format("{}: a new head_dim needs full-width RoPE (rope.dimension_count {} != head_dim {})",
                                  in, hp_.n_rot, hd0));
  }
  if (arch_.fused_qkv && H * hd != E) {  // llama.cpp reads Phi-3's attn_qkv as [n_embd, n_embd + 2 n_embd_kv]
    throw InvalidArgument(fmt::format("expand: {} needs heads x head_dim = dim ({} x {} != {})", hp_.arch, H, hd, E));
  }
  // Head axes: Q (H heads, every dim of a real head is exact: its padded dims must stay 0),
  // K/V (KV heads; only mapped dims of real heads are exact, except K under a per-head
  // norm, whose padded dims must be 0 too so the head's RMS is the source's).
  ax_e_ = AxisMap::identity_padded(E0, E);
  ax_q_ = head_axis(H0, H, true);  // wo reads every attention output dim
  ax_kv_ = head_axis(KV0, KV, false);
  ax_f_rows_ = AxisMap::identity_padded(F0, F);
  ax_f_in_ = ax_f_rows_;  // w_down reads new units too (non-zero gated outputs)
  std::fill(ax_f_in_.live.begin(), ax_f_in_.live.end(), 1);
  exact_q_.assign(static_cast<size_t>(H * hd), 0);
  std::fill(exact_q_.begin(), exact_q_.begin() + H0 * hd, 1);
  exact_k_ = ax_kv_.live;
  if (hp_.qk_norm) std::fill(exact_k_.begin(), exact_k_.begin() + KV0 * hd, 1);
  all_exact_e_.assign(static_cast<size_t>(E), 1);

  // Scales (docs/expand.md, "Newer families"): the residual stream is the
  // source's times s with eps' = eps t, s^2 = t E/E0. t = E0/E (s = 1) unless a per-head
  // norm needs eps' = eps / r (t = 1/r) or Gemma's sqrt(n_embd) embedding scale already
  // multiplies the stream by sqrt(E/E0) (t = 1).
  const double growth = static_cast<double>(E) / static_cast<double>(E0);
  const double s2 = hp_.qk_norm ? growth / static_cast<double>(r) : arch_.embd_scale ? growth : 1.0;  // t E/E0
  norm_scale_ = static_cast<float>(std::sqrt(1.0 / growth));
  eps_ = hp_.qk_norm        ? static_cast<float>(hp_.rms_eps / static_cast<double>(r))
         : arch_.embd_scale ? hp_.rms_eps
                            : hp_.rms_eps * static_cast<float>(E0) / static_cast<float>(E);
  res_scale_ = static_cast<float>(std::sqrt(s2));
  embd_scale_ = arch_.embd_scale ? static_cast<float>(std::sqrt(s2 / growth)) : res_scale_;
  // (Granite's attention.scale is a constant the expansion keeps: no change.)
  const double d_new = static_cast<double>(query_scale_dim(hp_.arch, L, E, H, hd));
  const double d_src = static_cast<double>(query_scale_dim(hp_.arch, L0, E0, H0, hd0));
  q_fix_ = arch_.granite_scales ? 1.0f : static_cast<float>(std::sqrt(d_new / d_src));

  sum.n_embd = static_cast<int32_t>(E);
  sum.n_ff = static_cast<int32_t>(F);
  sum.n_layer = static_cast<int32_t>(L);
  sum.n_head = static_cast<int32_t>(H);
  sum.n_head_kv = static_cast<int32_t>(KV);
  sum.head_dim = static_cast<int32_t>(hd);
  measure_fillers();
}

// Where dim i of a source head lands in a new head: RoPE pair p becomes pair r*p, whose
// frequency theta^(-2rp/(r hd0)) equals the source pair's exactly.
int64_t Expander::dmap(int64_t i) const {
  if (r == 1) return i;
  if (hp_.rope_neox) {
    const int64_t half0 = hd0 / 2, half = hd / 2;
    return (i / half0) * half + r * (i % half0);
  }
  return 2 * (r * (i / 2)) + (i % 2);
}

AxisMap Expander::head_axis(int64_t n_heads_src, int64_t n_heads_new, bool all_live) const {
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
}

// Filler scale per tensor kind: the RMS of the source tensors of that kind, so filler
// blocks quantise like real weights; the mean gain of each norm kind.
void Expander::measure_fillers() {
  for (const char* kind : {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                           "attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm",
                           "post_ffw_norm", "attn_q_bias", "attn_k_bias", "attn_v_bias"}) {
    double acc = 0, mean = 0;
    int64_t n = 0;
    for (int64_t l = 0; l < L0; ++l) {
      std::string name = fmt::format("blk.{}.{}.weight", l, kind);
      if (std::string(kind).ends_with("_bias")) name = fmt::format("blk.{}.{}.bias", l, std::string(kind).substr(0, 6));
      if (!f_.find_tensor(name)) continue;
      const auto v = read(name);
      acc += rms(v);
      for (float x : v) mean += x / static_cast<double>(v.size());
      ++n;
    }
    fill_std_[kind] = n ? static_cast<float>(acc / static_cast<double>(n)) : 0.02f;
    gain_mean_[kind] = n ? static_cast<float>(mean / static_cast<double>(n)) : 1.0f;
  }
}

Expander::Vec Expander::read(const std::string& name) const {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) throw FormatError(fmt::format("{}: tensor '{}' is missing", f_.path(), name));
  return tensor_to_f32(f_.path(), name, t->type, t->ne, t->data);
}

DType Expander::type_for(const std::string& name, const std::vector<int64_t>& ne, DType src) const {
  if (ne.size() < 2) return DType::f32;
  return quant_type_for(name, ne, o_.type ? *o_.type : src);
}

void Expander::add(const std::string& name, DType type, const std::vector<int64_t>& ne, const Vec& v) {
  const int64_t row = ne[0];
  const auto bytes = f32_to_tensor(type, v.data(), static_cast<int64_t>(v.size()) / row, row);
  w_.add_tensor(name, type, ne, bytes.data(), bytes.size());
  sum_.n_params += v.size();
  sum_.tensor_bytes += bytes.size();
}

Expander::Vec Expander::filler_gains(int64_t n, const char* kind) {
  Vec g(static_cast<size_t>(n));
  for (auto& x : g) x = gain_mean_[kind] + filler(rng_, 0.1f * std::fabs(gain_mean_[kind]) + 1e-3f);
  return g;
}

// A norm gain of width E: the source's times `scale` on live dims, filler around the
// kind's mean elsewhere (it multiplies zeros).
Expander::Vec Expander::gain(const Vec* src, const char* kind, float scale) {
  Vec g = filler_gains(E, kind);
  if (src) {
    for (int64_t i = 0; i < E0; ++i) g[static_cast<size_t>(i)] = (*src)[static_cast<size_t>(i)] * scale;
  }
  return g;
}

Expander::Vec Expander::placed(const float* src, int64_t n_in_src, int64_t n_out_src, const AxisMap& in,
                               const AxisMap& out, const std::vector<uint8_t>& exact, float scale,
                               const char* fill_kind, DType t) {
  Vec dst(static_cast<size_t>(in.n_new * out.n_new));
  place_matrix(src, n_in_src, n_out_src, in, out, exact, scale, fill_std_[fill_kind],
               tensor::dtype_traits(t).block_size, rng_, dst.data());
  return dst;
}

void Expander::write_metadata() {
  for (const auto& [k, v] : f_.metadata()) {
    if (k != "general.alignment") w_.set(k, v);
  }
  const std::string& a = prefix_;
  w_.set("general.name", gguf::Value::string(hp_.name.empty() ? "expanded" : hp_.name + "-expanded"));
  if (o_.type && file_type_for(*o_.type) >= 0) {  // what llama.cpp tools show as the file's type
    w_.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(file_type_for(*o_.type))));
  }
  w_.set(a + "embedding_length", gguf::Value::u32(static_cast<uint32_t>(E)));
  w_.set(a + "feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(F)));
  w_.set(a + "block_count", gguf::Value::u32(static_cast<uint32_t>(L)));
  w_.set(a + "attention.head_count", gguf::Value::u32(static_cast<uint32_t>(H)));
  w_.set(a + "attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(KV)));
  if (H * hd != E || f_.has(a + "attention.key_length")) {
    w_.set(a + "attention.key_length", gguf::Value::u32(static_cast<uint32_t>(hd)));
    w_.set(a + "attention.value_length", gguf::Value::u32(static_cast<uint32_t>(hd)));
  }
  if (r > 1 || f_.has(a + "rope.dimension_count")) {
    w_.set(a + "rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(hp_.n_rot * r)));
  }
  w_.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(eps_));
  for (const auto& [k, v] : o_.metadata) w_.set(k, v);
}

// Token embedding: every entry outside the source block writes into the residual padding,
// so it is zero. A tied lm_head reads the final norm's output (the source's) through the
// embedding; when the embedding carries a scale it gets its own, unscaled output.weight.
void Expander::write_embeddings_and_output() {
  const int64_t V = hp_.n_vocab;
  const AxisMap rows = AxisMap::identity_padded(V, V);
  const auto emb = read("token_embd.weight");
  {
    AxisMap cols = ax_e_;
    std::fill(cols.live.begin(), cols.live.end(), 1);
    const DType t = type_for("token_embd.weight", {E, V}, src_type("token_embd.weight"));
    add("token_embd.weight", t, {E, V}, placed(emb.data(), E0, V, cols, rows, rows.live, embd_scale_, "token_embd", t));
  }
  const auto norm = read("output_norm.weight");
  gain_mean_["output_norm"] = 0;
  for (float x : norm) gain_mean_["output_norm"] += x / static_cast<float>(norm.size());
  add("output_norm.weight", DType::f32, {E}, gain(&norm, "output_norm", norm_scale_));
  const bool has_output = f_.find_tensor("output.weight") != nullptr;
  if (has_output || embd_scale_ != 1.0f) {
    const std::string src = has_output ? "output.weight" : "token_embd.weight";
    const auto w = has_output ? read(src) : emb;
    fill_std_["output"] = rms(w);
    const DType t = type_for("output.weight", {E, V}, src_type(src));
    add("output.weight", t, {E, V}, placed(w.data(), E0, V, ax_e_, rows, rows.live, 1.0f, "output", t));
  }
}

// A layer stack's input and output (an EAGLE draft layer, docs/eagle.md): its inputs, the
// base model's embedding row and final-normed state, are the source's followed by exact
// zeros in the expanded base (families without a residual or embedding scale; the caller
// checks), so enorm is a pre-norm gain like the others, and fc [2 E0 -> E0] puts the
// embedding half at columns 0.. and the state half at E..; its rows write the stack's
// residual stream (exact). output_norm gives the predicted state, zeros in the padding,
// which the expanded base's output matrix reads as the source's.
void Expander::write_stack_input_and_norm() {
  const auto enorm = read("enorm.weight");
  gain_mean_["enorm"] = 0;
  for (float x : enorm) gain_mean_["enorm"] += x / static_cast<float>(enorm.size());
  add("enorm.weight", DType::f32, {E}, gain(&enorm, "enorm", norm_scale_));
  const auto fc = read("fc.weight");
  fill_std_["fc"] = rms(fc);
  AxisMap in;
  in.n_new = 2 * E;
  in.live.assign(static_cast<size_t>(2 * E), 0);
  for (int64_t half = 0; half < 2; ++half) {
    for (int64_t i = 0; i < E0; ++i) {
      in.src_to_new.push_back(half * E + i);
      in.live[static_cast<size_t>(half * E + i)] = 1;
    }
  }
  const DType t = type_for("fc.weight", {2 * E, E}, src_type("fc.weight"));
  add("fc.weight", t, {2 * E, E}, placed(fc.data(), 2 * E0, E0, in, ax_e_, all_exact_e_, res_scale_, "fc", t));
  const auto norm = read("output_norm.weight");
  gain_mean_["output_norm"] = 0;
  for (float x : norm) gain_mean_["output_norm"] += x / static_cast<float>(norm.size());
  add("output_norm.weight", DType::f32, {E}, gain(&norm, "output_norm", norm_scale_));
}

void Expander::write_layer(int64_t li, int64_t l) {
  const bool real = l >= 0;
  const std::string sp = fmt::format("blk.{}.", real ? l : 0);  // pass-through: layer 0 supplies types
  const std::string p = fmt::format("blk.{}.", li);
  const float s = res_scale_;
  // A matrix from source rows [row0, row0 + n_out_src) of `skind` (a fused tensor's part).
  auto part = [&](const std::string& skind, const char* fill_kind, int64_t row0, const AxisMap& in_ax,
                  const AxisMap& out_ax, const std::vector<uint8_t>& exact, float scale, bool zero_if_passthrough,
                  DType t) {
    if (!real) {
      Vec dst(static_cast<size_t>(in_ax.n_new * out_ax.n_new), 0.0f);
      if (!zero_if_passthrough) {  // else: a pass-through layer's output projection is zero: it adds nothing
        for (auto& x : dst) x = filler(rng_, fill_std_[fill_kind]);
      }
      return dst;
    }
    const std::string sname = sp + skind + ".weight";
    const auto src = read(sname);
    const int64_t n_in_src = f_.find_tensor(sname)->ne[0];
    const int64_t n_out_src = static_cast<int64_t>(out_ax.src_to_new.size());
    return placed(src.data() + row0 * n_in_src, n_in_src, n_out_src, in_ax, out_ax, exact, scale, fill_kind, t);
  };
  auto type_of = [&](const char* kind, int64_t n_in, int64_t n_out) {
    return type_for(p + kind + ".weight", {n_in, n_out}, src_type(sp + kind + ".weight"));
  };
  auto mat = [&](const char* kind, const AxisMap& in_ax, const AxisMap& out_ax, const std::vector<uint8_t>& exact,
                 float scale, bool zero_if_passthrough) {
    const DType t = type_of(kind, in_ax.n_new, out_ax.n_new);
    add(p + kind + ".weight", t, {in_ax.n_new, out_ax.n_new},
        part(kind, kind, 0, in_ax, out_ax, exact, scale, zero_if_passthrough, t));
  };
  // Fused matrices (Phi-3): each part placed on its own axes, rows concatenated.
  struct Part {
    const AxisMap* out;
    const std::vector<uint8_t>* exact;
    float scale;
  };
  auto fused = [&](const char* kind, const AxisMap& in_ax, std::initializer_list<Part> parts) {
    int64_t n_out = 0;
    for (const Part& q : parts) n_out += q.out->n_new;
    const DType t = type_of(kind, in_ax.n_new, n_out);
    Vec all;
    int64_t row0 = 0;
    for (const Part& q : parts) {
      const Vec d = part(kind, kind, row0, in_ax, *q.out, *q.exact, q.scale, false, t);
      all.insert(all.end(), d.begin(), d.end());
      row0 += static_cast<int64_t>(q.out->src_to_new.size());
    }
    add(p + kind + ".weight", t, {in_ax.n_new, n_out}, all);
  };
  auto bias = [&](const char* kind, const AxisMap& ax, const std::vector<uint8_t>& exact, float scale) {
    const std::string sname = sp + kind + ".bias";
    if (!f_.find_tensor(sname)) return;
    const std::string fk = std::string(kind) + "_bias";
    Vec dst(static_cast<size_t>(ax.n_new));
    if (real) {
      const AxisMap one_in{1, {0}, {1}};
      const auto src = read(sname);
      dst = placed(src.data(), 1, static_cast<int64_t>(src.size()), one_in, ax, exact, scale, fk.c_str(), DType::f32);
    } else {
      for (auto& x : dst) x = filler(rng_, fill_std_[fk]);
    }
    add(p + kind + ".bias", DType::f32, {ax.n_new}, dst);
  };
  auto norm = [&](const char* kind, float scale) {
    const auto src = real ? read(sp + kind + ".weight") : Vec();
    add(p + std::string(kind) + ".weight", DType::f32, {E}, gain(real ? &src : nullptr, kind, scale));
  };
  // Per-head norm gains [hd]: mapped dims from the source, times `scale`.
  auto head_norm = [&](const char* kind, float scale) {
    Vec g = filler_gains(hd, kind);
    if (real) {
      const auto src = read(sp + kind + ".weight");
      for (int64_t i = 0; i < hd0; ++i) g[static_cast<size_t>(dmap(i))] = src[static_cast<size_t>(i)] * scale;
    }
    add(p + std::string(kind) + ".weight", DType::f32, {hd}, g);
  };

  norm("attn_norm", norm_scale_);
  // Queries: scaled by q_fix in the weights, or (under a per-head norm, which would undo
  // that) in the norm's gain, with 1/sqrt(r) for the RMS over r times the dims.
  const float inv_sqrt_r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(r)));
  const float wq_scale = hp_.qk_norm ? 1.0f : q_fix_;
  if (f_.find_tensor(sp + "attn_qkv.weight")) {
    fused("attn_qkv", ax_e_,
          {{&ax_q_, &exact_q_, wq_scale}, {&ax_kv_, &exact_k_, 1.0f}, {&ax_kv_, &ax_kv_.live, 1.0f}});
  } else {
    mat("attn_q", ax_e_, ax_q_, exact_q_, wq_scale, false);
    mat("attn_k", ax_e_, ax_kv_, exact_k_, 1.0f, false);
    mat("attn_v", ax_e_, ax_kv_, ax_kv_.live, 1.0f, false);
  }
  bias("attn_q", ax_q_, exact_q_, wq_scale);
  bias("attn_k", ax_kv_, exact_k_, 1.0f);
  bias("attn_v", ax_kv_, ax_kv_.live, 1.0f);
  if (hp_.qk_norm) {
    head_norm("attn_q_norm", q_fix_ * inv_sqrt_r);
    head_norm("attn_k_norm", inv_sqrt_r);
  }
  // Writers of the residual carry its scale s; a post-norm sees the source's RMS that way
  // and its gain gets s sqrt(E0/E) (docs/expand.md).
  mat("attn_output", ax_q_, ax_e_, all_exact_e_, s, true);
  if (hp_.post_norms) norm("post_attention_norm", s * norm_scale_);
  norm("ffn_norm", norm_scale_);
  if (arch_.fused_gate_up && !f_.find_tensor(sp + "ffn_gate.weight")) {
    fused("ffn_up", ax_e_, {{&ax_f_rows_, &ax_f_rows_.live, 1.0f}, {&ax_f_rows_, &ax_f_rows_.live, 1.0f}});
  } else {
    mat("ffn_gate", ax_e_, ax_f_rows_, ax_f_rows_.live, 1.0f, false);
    mat("ffn_up", ax_e_, ax_f_rows_, ax_f_rows_.live, 1.0f, false);
  }
  mat("ffn_down", ax_f_in_, ax_e_, all_exact_e_, s, true);
  if (hp_.post_norms) norm("post_ffw_norm", s * norm_scale_);
}

// Per-pair RoPE factors (Llama 3's rope_freqs, LongRoPE's short/long): pair p moves to
// pair r p (as dmap); the new pairs in between get 1 (they rotate padded dims).
void Expander::write_rope_factors() {
  for (const char* name : {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (!f_.find_tensor(name)) continue;
    const auto src = read(name);
    Vec dst(static_cast<size_t>(hp_.n_rot * r / 2), 1.0f);
    for (size_t i = 0; i < src.size(); ++i) dst[i * static_cast<size_t>(r)] = src[i];
    add(name, DType::f32, {static_cast<int64_t>(dst.size())}, dst);
  }
}

}  // namespace

ExpandSummary expand_gguf(const std::string& in, const std::string& out, const ExpandOptions& o) {
  std::shared_ptr<const gguf::GgufFile> file(gguf::GgufFile::open(in));
  const bool stack = file->get_string("general.architecture", "") == kLayerStackArch;
  const auto model = stack ? Model::layer_stack_from_gguf(file) : Model::from_gguf(file);
  const Hparams& hp = model->hparams();
  if (stack && (find_arch(hp.arch)->embd_scale || hp.qk_norm || hp.post_norms)) {
    throw Unsupported(
        fmt::format("{}: widening a layer stack of family '{}' is not supported (llama layers only)", in, hp.arch));
  }
  gguf::GgufWriter w;
  ExpandSummary sum;
  Expander x(*model, o, w, sum);
  x.write_metadata();
  const int32_t n_layer = stack ? hp.n_layer : o.n_layer;
  if (stack) {
    x.write_stack_input_and_norm();
    for (int32_t l = 0; l < n_layer; ++l) sum.real_layer_pos.push_back(l);
  } else {
    x.write_embeddings_and_output();
    sum.real_layer_pos = expanded_layer_positions(hp, o.n_layer);
  }
  std::vector<int64_t> src_of(static_cast<size_t>(n_layer), -1);
  for (int64_t l = 0; l < hp.n_layer; ++l) src_of[static_cast<size_t>(sum.real_layer_pos[static_cast<size_t>(l)])] = l;
  for (int64_t li = 0; li < n_layer; ++li) x.write_layer(li, src_of[static_cast<size_t>(li)]);
  x.write_rope_factors();
  w.write(out);
  return sum;
}

}  // namespace treespec::model
