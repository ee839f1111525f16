#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "core/assert.h"
#include "gguf/gguf.h"
#include "model/arch.h"

namespace treespec::model {

namespace {

using tensor::DType;

// Tensors outside the layer namespace that a model may carry without the forward
// reading them (e.g. a drafter's heads); anything else unread is an unsupported variant.
bool unread_tensor_is_unsupported(const std::string& name) {
  return name.rfind("blk.", 0) == 0 || name == "output.bias" || name == "output_norm.bias" ||
         name == "token_embd_norm.weight" || name == "token_embd_norm.bias";
}

int32_t positive_int(const gguf::GgufFile& f, const std::string& key, int64_t max = int64_t{1} << 24) {
  const int64_t v = f.get_int(key);
  if (v <= 0 || v > max) {
    throw FormatError(fmt::format("{}: metadata key '{}' = {} is out of range (1..{})", f.path(), key, v, max));
  }
  return static_cast<int32_t>(v);
}

}  // namespace

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
  return from_gguf(std::shared_ptr<const gguf::GgufFile>(gguf::GgufFile::open(path)));
}

std::unique_ptr<Model> Model::from_gguf(std::shared_ptr<const gguf::GgufFile> file) {
  return make(std::move(file), false);
}

std::unique_ptr<Model> Model::load_layer_stack(const std::string& path) {
  return make(std::shared_ptr<const gguf::GgufFile>(gguf::GgufFile::open(path)), true);
}

std::unique_ptr<Model> Model::layer_stack_from_gguf(std::shared_ptr<const gguf::GgufFile> file) {
  return make(std::move(file), true);
}

std::unique_ptr<Model> Model::make(std::shared_ptr<const gguf::GgufFile> file, bool layer_stack) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  m->bind(layer_stack);
  m->repack();
  return m;
}

void Model::read_hparams(const ArchTraits& arch, const std::string& a) {
  const auto& f = *file_;
  const std::string& path = f.path();
  hp_.rope_neox = arch.rope_neox;
  hp_.qk_norm = arch.qk_norm;
  hp_.post_norms = arch.post_norms;
  hp_.act = arch.act;
  hp_.name = f.get_string("general.name", "");
  hp_.n_embd = positive_int(f, a + "embedding_length");
  hp_.n_layer = positive_int(f, a + "block_count", 4096);
  hp_.n_head = positive_int(f, a + "attention.head_count", 4096);
  hp_.n_head_kv =
      f.has(a + "attention.head_count_kv") ? positive_int(f, a + "attention.head_count_kv", 4096) : hp_.n_head;
  hp_.n_ff = positive_int(f, a + "feed_forward_length");
  hp_.n_ctx_train = f.has(a + "context_length") ? positive_int(f, a + "context_length", int64_t{1} << 30) : 2048;
  if (f.has(a + "expert_count") && f.get_int(a + "expert_count") > 0) {
    throw Unsupported(fmt::format("{}: {}expert_count = {}: mixture-of-experts models are not supported", path, a,
                                  f.get_int(a + "expert_count")));
  }
  if (hp_.n_embd % hp_.n_head != 0 && !f.has(a + "attention.key_length")) {
    throw FormatError(
        fmt::format("{}: {}embedding_length {} is not a multiple of head_count {}", path, a, hp_.n_embd, hp_.n_head));
  }
  hp_.head_dim =
      f.has(a + "attention.key_length") ? positive_int(f, a + "attention.key_length", 4096) : hp_.n_embd / hp_.n_head;
  // The KV cache and attention use one head size for K and V.
  if (f.has(a + "attention.value_length")) {
    const int32_t v_len = positive_int(f, a + "attention.value_length", 4096);
    if (v_len != hp_.head_dim) {
      throw Unsupported(fmt::format("{}: {}attention.value_length {} differs from the key head size {}", path, a, v_len,
                                    hp_.head_dim));
    }
  }
  if (hp_.n_head % hp_.n_head_kv != 0) {
    throw FormatError(
        fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", path, hp_.n_head, hp_.n_head_kv));
  }
  hp_.n_rot = f.has(a + "rope.dimension_count") ? positive_int(f, a + "rope.dimension_count", 4096) : hp_.head_dim;
  if (hp_.n_rot > hp_.head_dim || hp_.n_rot % 2 != 0) {
    throw FormatError(
        fmt::format("{}: rope.dimension_count {} must be even and <= head dim {}", path, hp_.n_rot, hp_.head_dim));
  }
  hp_.rms_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  hp_.rope_theta = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
  if (!(hp_.rms_eps > 0.0f) || !(hp_.rope_theta > 0.0f)) {
    throw FormatError(
        fmt::format("{}: rms epsilon {} and rope.freq_base {} must be positive", path, hp_.rms_eps, hp_.rope_theta));
  }
  const std::string scaling = f.get_string(a + "rope.scaling.type", "none");
  if (scaling == "linear") {
    const double factor = f.get_float(a + "rope.scaling.factor", 1.0);
    if (!(factor > 0.0)) throw FormatError(fmt::format("{}: {}rope.scaling.factor must be positive", path, a));
    hp_.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && !scaling.empty() && scaling != "longrope") {
    // Llama 3's scaling arrives as the rope_freqs.weight tensor (below), not as a type;
    // LongRoPE as rope_factors_long/short (bind_rope), with or without the type.
    throw Unsupported(fmt::format("{}: {}rope.scaling.type '{}' is not supported (supported: none, linear, longrope)",
                                  path, a, scaling));
  } else if (f.has(a + "rope.scale_linear")) {
    const double factor = f.get_float(a + "rope.scale_linear");
    if (!(factor > 0.0)) throw FormatError(fmt::format("{}: {}rope.scale_linear must be positive", path, a));
    hp_.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  hp_.rope_attn_factor = static_cast<float>(f.get_float(a + "rope.scaling.attn_factor", 1.0));
  if (!(hp_.rope_attn_factor > 0.0f) || !std::isfinite(hp_.rope_attn_factor)) {
    throw FormatError(fmt::format("{}: {}rope.scaling.attn_factor {} must be positive", path, a, hp_.rope_attn_factor));
  }
  hp_.n_ctx_orig = f.has(a + "rope.scaling.original_context_length")
                       ? positive_int(f, a + "rope.scaling.original_context_length", int64_t{1} << 30)
                       : hp_.n_ctx_train;
  hp_.longrope = scaling == "longrope" || f.find_tensor("rope_factors_long.weight") != nullptr ||
                 f.find_tensor("rope_factors_short.weight") != nullptr;

  // Gemma: embeddings scaled by sqrt(n_embd); soft-capping; query scale by model size.
  if (arch.embd_scale) hp_.embd_scale = std::sqrt(static_cast<float>(hp_.n_embd));
  auto non_negative = [&](const std::string& key) {
    const double v = f.get_float(key, 0.0);
    if (!(v >= 0.0)) throw FormatError(fmt::format("{}: metadata key '{}' = {} must be >= 0", path, key, v));
    return static_cast<float>(v);
  };
  hp_.attn_softcap = non_negative(a + "attn_logit_softcapping");
  hp_.final_softcap = non_negative(a + "final_logit_softcapping");
  hp_.attn_scale =
      1.0f /
      std::sqrt(static_cast<float>(query_scale_dim(hp_.arch, hp_.n_layer, hp_.n_embd, hp_.n_head, hp_.head_dim)));
  if (arch.swa_period > 0 && f.has(a + "attention.sliding_window")) {
    hp_.n_swa = positive_int(f, a + "attention.sliding_window", int64_t{1} << 30);
  }
  if (hp_.arch == "gemma3") hp_.rope_theta_swa = 10000.0f;  // llama.cpp: fixed base, scale 1
  if (arch.granite_scales) {                                // required keys, as llama.cpp reads them
    auto positive = [&](const std::string& key) {
      if (!f.has(key)) throw FormatError(fmt::format("{}: metadata key '{}' is missing", path, key));
      const double v = f.get_float(key);
      if (!(v > 0.0) || !std::isfinite(v))
        throw FormatError(fmt::format("{}: metadata key '{}' = {} must be positive", path, key, v));
      return static_cast<float>(v);
    };
    hp_.embd_scale = positive(a + "embedding_scale");
    hp_.residual_scale = positive(a + "residual_scale");
    hp_.attn_scale = positive(a + "attention.scale");
    hp_.logit_scale = positive(a + "logit_scale");
  }
}

// Binds tensors by name with their shapes checked, and remembers which were read (an unread
// tensor in the layer namespace is an unsupported variant).
class TensorBinder {
 public:
  explicit TensorBinder(const gguf::GgufFile& f) : f_(f) {}
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  const gguf::TensorInfo* tensor(const std::string& name, const std::vector<int64_t>& ne) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) throw FormatError(fmt::format("{}: tensor '{}' is missing", f_.path(), name));
    read_.insert(name);
    if (t->ne != ne) {
      auto dims = [](const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); };
      throw FormatError(
          fmt::format("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, dims(t->ne), dims(ne)));
    }
    if (!kernels::dtype_supported(t->type)) {
      throw Unsupported(fmt::format("{}: tensor '{}' has type {}, which treespec does not support yet", f_.path(), name,
                                    tensor::dtype_name(t->type)));
    }
    return t;
  }
  kernels::WeightView matrix(const std::string& name, int64_t n_in, int64_t n_out) {
    const gguf::TensorInfo* t = tensor(name, {n_in, n_out});
    return kernels::WeightView{t->data, t->type, n_in, n_out};
  }
  // Rows [r0, r0 + n) of a matrix as a matrix of its own (a fused tensor's part).
  static kernels::WeightView rows_of(const kernels::WeightView& w, int64_t r0, int64_t n) {
    kernels::WeightView part = w;
    part.data = static_cast<const uint8_t*>(w.data) + r0 * w.row_bytes();
    part.n_out = n;
    return part;
  }
  std::vector<float> vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo* t = tensor(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    kernels::to_float(t->type, t->data, out.data(), n);
    return out;
  }
  // A tensor in the layer namespace that the forward does not read (an output projection
  // bias, MoE experts, QK norms in a family without them, ...) means a variant we would
  // compute wrongly.
  void check_all_read(const std::string& arch) const {
    for (const auto& t : f_.tensors()) {
      if (unread_tensor_is_unsupported(t.name) && read_.count(t.name) == 0) {
        throw Unsupported(
            fmt::format("{}: tensor '{}' is not part of the supported {} layout (an unsupported variant of "
                        "the architecture)",
                        f_.path(), t.name, arch));
      }
    }
  }

 private:
  const gguf::GgufFile& f_;
  std::unordered_set<std::string> read_;
};

void Model::bind(bool layer_stack) {
  const auto& f = *file_;
  const std::string& path = f.path();
  hp_.arch = f.get_string("general.architecture");
  if ((hp_.arch == kLayerStackArch) != layer_stack) {
    throw InvalidArgument(
        layer_stack ? fmt::format("{}: not an EAGLE draft layer file (general.architecture is '{}', expected '{}')",
                                  path, hp_.arch, kLayerStackArch)
                    : fmt::format("{}: an EAGLE draft layer file (general.architecture '{}'), not a model: pass it "
                                  "with --eagle next to the model it was trained for",
                                  path, hp_.arch));
  }
  // A layer stack (an EAGLE draft layer): decoder layers of the family named by
  // <arch>.base_architecture, hyperparameters under its own prefix, no embedding or output.
  std::string a = hp_.arch + ".";
  if (hp_.arch == kLayerStackArch) {
    hp_.layers_only = true;
    if (!f.has(a + "base_architecture"))
      throw FormatError(fmt::format("{}: metadata key '{}base_architecture' is missing", path, a));
    hp_.arch = f.get_string(a + "base_architecture");
  }
  const ArchTraits* arch = find_arch(hp_.arch);
  if (arch == nullptr) {
    throw Unsupported(
        fmt::format("{}: architecture '{}' is not supported (supported: {})", path, hp_.arch, supported_archs()));
  }
  read_hparams(*arch, a);

  TensorBinder b(f);
  if (hp_.layers_only) {
    hp_.n_vocab = positive_int(f, a + "vocab_size");
    stack_fc_ = b.matrix("fc.weight", 2 * static_cast<int64_t>(hp_.n_embd), hp_.n_embd);
    stack_enorm_ = b.vector("enorm.weight", hp_.n_embd);
  } else {
    bind_embeddings(b, a);
  }
  output_norm_ = b.vector("output_norm.weight", hp_.n_embd);
  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int32_t il = 0; il < hp_.n_layer; ++il) bind_layer(b, *arch, il);
  bind_rope(b);
  b.check_all_read(hp_.arch);
}

void Model::bind_embeddings(TensorBinder& b, const std::string& a) {
  const auto& f = *file_;
  const std::string& path = f.path();
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) throw FormatError(fmt::format("{}: tensor 'token_embd.weight' is missing", path));
  if (emb->ne.size() != 2 || emb->ne[0] != hp_.n_embd) {
    throw FormatError(fmt::format("{}: tensor 'token_embd.weight' must be [{}, n_vocab]", path, hp_.n_embd));
  }
  hp_.n_vocab = static_cast<int32_t>(emb->ne[1]);
  if (f.has(a + "vocab_size") && f.get_int(a + "vocab_size") != hp_.n_vocab) {
    throw FormatError(fmt::format("{}: {}vocab_size = {} but tensor 'token_embd.weight' has {} rows", path, a,
                                  f.get_int(a + "vocab_size"), hp_.n_vocab));
  }
  tok_embd_ = b.matrix("token_embd.weight", hp_.n_embd, hp_.n_vocab);
  if (b.has("output.weight")) {
    output_ = b.matrix("output.weight", hp_.n_embd, hp_.n_vocab);
  } else {
    output_ = tok_embd_;
    hp_.tied_output = true;
  }
}

void Model::bind_layer(TensorBinder& b, const ArchTraits& arch, int32_t il) {
  const std::string p = fmt::format("blk.{}.", il);
  const int64_t n_q = hp_.n_embd_q();
  const int64_t n_kv = hp_.n_embd_kv();
  LayerWeights& L = layers_[static_cast<size_t>(il)];
  L.attn_norm = b.vector(p + "attn_norm.weight", hp_.n_embd);
  if (arch.fused_qkv && b.has(p + "attn_qkv.weight")) {
    const kernels::WeightView qkv = b.matrix(p + "attn_qkv.weight", hp_.n_embd, n_q + 2 * n_kv);
    L.wq = TensorBinder::rows_of(qkv, 0, n_q);
    L.wk = TensorBinder::rows_of(qkv, n_q, n_kv);
    L.wv = TensorBinder::rows_of(qkv, n_q + n_kv, n_kv);
  } else {
    L.wq = b.matrix(p + "attn_q.weight", hp_.n_embd, n_q);
    L.wk = b.matrix(p + "attn_k.weight", hp_.n_embd, n_kv);
    L.wv = b.matrix(p + "attn_v.weight", hp_.n_embd, n_kv);
  }
  L.wo = b.matrix(p + "attn_output.weight", n_q, hp_.n_embd);
  // QKV biases: required by qwen2, optional for llama, and then in every layer (the
  // forward adds them to all layers or none).
  const bool bias = arch.qkv_bias == BiasRule::required ||
                    (arch.qkv_bias == BiasRule::optional &&
                     (b.has(p + "attn_q.bias") || b.has(p + "attn_k.bias") || b.has(p + "attn_v.bias")));
  if (il == 0) hp_.has_qkv_bias = bias;
  if (bias != hp_.has_qkv_bias) {
    throw FormatError(fmt::format("{}: layer {} {} QKV bias tensors but layer 0 {}", file_->path(), il,
                                  bias ? "has" : "lacks", hp_.has_qkv_bias ? "has them" : "does not"));
  }
  if (bias) {
    L.bq = b.vector(p + "attn_q.bias", n_q);
    L.bk = b.vector(p + "attn_k.bias", n_kv);
    L.bv = b.vector(p + "attn_v.bias", n_kv);
  }
  if (hp_.qk_norm) {
    L.q_norm = b.vector(p + "attn_q_norm.weight", hp_.head_dim);
    L.k_norm = b.vector(p + "attn_k_norm.weight", hp_.head_dim);
  }
  if (hp_.post_norms) {
    L.attn_post_norm = b.vector(p + "post_attention_norm.weight", hp_.n_embd);
    L.ffn_post_norm = b.vector(p + "post_ffw_norm.weight", hp_.n_embd);
  }
  L.ffn_norm = b.vector(p + "ffn_norm.weight", hp_.n_embd);
  if (arch.fused_gate_up && !b.has(p + "ffn_gate.weight")) {
    const kernels::WeightView gate_up = b.matrix(p + "ffn_up.weight", hp_.n_embd, 2 * int64_t{hp_.n_ff});
    L.w_gate = TensorBinder::rows_of(gate_up, 0, hp_.n_ff);
    L.w_up = TensorBinder::rows_of(gate_up, hp_.n_ff, hp_.n_ff);
  } else {
    L.w_gate = b.matrix(p + "ffn_gate.weight", hp_.n_embd, hp_.n_ff);
    L.w_up = b.matrix(p + "ffn_up.weight", hp_.n_embd, hp_.n_ff);
  }
  L.w_down = b.matrix(p + "ffn_down.weight", hp_.n_ff, hp_.n_embd);
  L.swa = hp_.n_swa > 0 && is_swa_layer(arch, il);
  L.rope = uses_rope(arch, il);
}

// RoPE frequencies, computed in float exactly as llama2.c does for the default case.
// Per-pair factors divide them: Llama 3's rope_freqs.weight, or LongRoPE's
// rope_factors_short / rope_factors_long (two tables; attention() picks one per KV cache).
// As in llama.cpp, rope_freqs wins when a file has both kinds.
void Model::bind_rope(TensorBinder& b) {
  const int32_t half = hp_.n_rot / 2;
  auto table = [&](float theta, float freq_scale) {
    std::vector<float> t(static_cast<size_t>(half));
    for (int32_t i = 0; i < half; ++i) {
      t[static_cast<size_t>(i)] =
          freq_scale / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hp_.n_rot));
    }
    return t;
  };
  // Divides t by the factors in tensor `name` (shape and type checked by the binder); false
  // when the file has no such tensor.
  auto divide_by = [&](const char* name, std::vector<float>& t) {
    if (!b.has(name)) return false;
    const std::vector<float> factors = b.vector(name, half);
    for (int32_t i = 0; i < half; ++i) {
      if (!(factors[static_cast<size_t>(i)] > 0.0f)) {
        throw FormatError(fmt::format("{}: tensor '{}' has a non-positive factor at {}", file_->path(), name, i));
      }
      t[static_cast<size_t>(i)] /= factors[static_cast<size_t>(i)];
    }
    return true;
  };
  inv_freq_ = table(hp_.rope_theta, hp_.rope_freq_scale);
  if (hp_.rope_theta_swa > 0.0f) inv_freq_swa_ = table(hp_.rope_theta_swa, 1.0f);
  inv_freq_long_.clear();
  if (divide_by("rope_freqs.weight", inv_freq_) || !hp_.longrope) {
    hp_.longrope = false;
    return;
  }
  inv_freq_long_ = inv_freq_;
  if (!divide_by("rope_factors_short.weight", inv_freq_) || !divide_by("rope_factors_long.weight", inv_freq_long_)) {
    throw FormatError(fmt::format("{}: LongRoPE needs both 'rope_factors_long.weight' and 'rope_factors_short.weight'",
                                  file_->path()));
  }
}

// Every matmul weight gets a copy in the tile layout of the best ISA's kernel, if it has
// one for the type (docs/kernels.md, "Packed weights"); the GGUF bytes stay mapped for
// get_row and anything else that reads them. TREESPEC_REPACK=0 turns this off (the
// kernels then read the GGUF layout; results are bit-identical either way).
void Model::repack() {
  const char* env = std::getenv("TREESPEC_REPACK");
  if (env != nullptr && std::string(env) == "0") return;
  auto pack = [&](kernels::WeightView& w) {
    const int64_t n = kernels::packed_bytes(w);
    if (n <= 0) return;
    core::AlignedBuffer<uint8_t> buf(static_cast<size_t>(n), "repacked weights");
    kernels::pack_weights(w, buf.data());
    w.packed = buf.data();
    // The kernels read the copy now: the mapped rows need not stay resident (get_row and
    // other readers of `data` fault them back in from the file).
    file_->release_pages(w.data, static_cast<size_t>(w.row_bytes() * w.n_out));
    packed_bytes_ += static_cast<uint64_t>(n);
    packed_.push_back(std::move(buf));
  };
  for (auto& L : layers_) {
    for (kernels::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) pack(*w);
  }
  if (hp_.layers_only) pack(stack_fc_);
  if (!hp_.layers_only) pack(output_);  // the embedding lookup (get_row) keeps reading the GGUF rows
}

uint64_t Model::weight_bytes() const {
  auto wb = [](const kernels::WeightView& w) {
    return static_cast<uint64_t>(w.row_bytes()) * static_cast<uint64_t>(w.n_out);
  };
  uint64_t total = wb(output_) + wb(stack_fc_);  // the embedding is only read one row per token
  for (const auto& L : layers_) {
    total += wb(L.wq) + wb(L.wk) + wb(L.wv) + wb(L.wo) + wb(L.w_gate) + wb(L.w_up) + wb(L.w_down);
    total += (L.attn_norm.size() + L.ffn_norm.size()) * sizeof(float);
  }
  return total;
}

uint64_t Model::n_params() const {
  auto np = [](const kernels::WeightView& w) { return static_cast<uint64_t>(w.n_in) * static_cast<uint64_t>(w.n_out); };
  uint64_t total =
      np(tok_embd_) + (hp_.tied_output ? 0 : np(output_)) + output_norm_.size() + np(stack_fc_) + stack_enorm_.size();
  for (const auto& L : layers_) {
    total += np(L.wq) + np(L.wk) + np(L.wv) + np(L.wo) + np(L.w_gate) + np(L.w_up) + np(L.w_down);
    total += L.attn_norm.size() + L.ffn_norm.size() + L.bq.size() + L.bk.size() + L.bv.size();
    total += L.q_norm.size() + L.k_norm.size() + L.attn_post_norm.size() + L.ffn_post_norm.size();
  }
  return total;
}

kv::KvShape Model::kv_shape(int32_t n_seq, int32_t n_cells) const {
  return kv::KvShape{hp_.n_layer, hp_.n_head_kv, hp_.head_dim, n_seq, n_cells};
}

void Model::stack_input(ForwardContext& ctx, const float* emb, const float* feat, int32_t n, float* x) const {
  TREESPEC_ASSERT(hp_.layers_only, "stack_input: only layer stacks have an input projection");
  const int64_t E = hp_.n_embd;
  ctx.stack_cat_.reserve(static_cast<size_t>(n) * 2 * static_cast<size_t>(E), "layer-stack input rows");
  float* cat = ctx.stack_cat_.data();
  for (int64_t r = 0; r < n; ++r) {
    kernels::rmsnorm(emb + r * E, stack_enorm_.data(), cat + r * 2 * E, E, hp_.rms_eps);
    std::memcpy(cat + r * 2 * E + E, feat + r * E, static_cast<size_t>(E) * sizeof(float));
  }
  kernels::matmul(stack_fc_, cat, n, x, ctx.pool_);
}

void Model::embed(const Batch& batch, float* x) const {
  TREESPEC_ASSERT(!hp_.layers_only, "embed: a layer stack has no embedding (callers check hparams().layers_only)");
  for (int32_t r = 0; r < batch.n_rows(); ++r) {
    const int32_t tok = batch.tokens[static_cast<size_t>(r)];
    TREESPEC_ASSERT(tok >= 0 && tok < hp_.n_vocab, "embed: token id out of range (callers validate ids)");
    float* xr = x + static_cast<size_t>(r) * hp_.n_embd;
    kernels::get_row(tok_embd_, tok, xr);
    if (hp_.embd_scale != 1.0f) {
      for (int32_t i = 0; i < hp_.n_embd; ++i) xr[i] *= hp_.embd_scale;
    }
  }
}

Status Model::run_layers(ForwardContext& ctx, const Batch& batch, int32_t l0, int32_t l1, float* x,
                         kv::KvCache& kv) const {
  if (batch.n_rows() == 0 || l0 >= l1) return {};
  TREESPEC_ASSERT(l0 >= 0 && l1 <= hp_.n_layer, "run_layers: layer range out of bounds");
  TREESPEC_ASSERT(kv.shape().n_layer == hp_.n_layer, "run_layers: KV cache shaped for another model");
  if (Status st = prepare_rows(ctx, batch, kv); !st.ok()) return st;
  for (int32_t il = l0; il < l1; ++il) run_layer(ctx, batch, il, il, x, kv);
  return {};
}

Status Model::run_layer_list(ForwardContext& ctx, const Batch& batch, std::span<const int32_t> layers, float* x,
                             kv::KvCache& kv) const {
  if (batch.n_rows() == 0 || layers.empty()) return {};
  for (int32_t il : layers) TREESPEC_ASSERT(il >= 0 && il < hp_.n_layer, "run_layer_list: layer out of bounds");
  TREESPEC_ASSERT(kv.shape().n_layer == static_cast<int32_t>(layers.size()),
                  "run_layer_list: KV cache needs one layer per listed layer");
  if (Status st = prepare_rows(ctx, batch, kv); !st.ok()) return st;
  for (size_t k = 0; k < layers.size(); ++k) run_layer(ctx, batch, layers[k], static_cast<int32_t>(k), x, kv);
  return {};
}

Status Model::prepare_rows(ForwardContext& ctx, const Batch& batch, kv::KvCache& kv) const {
  const int32_t n = batch.n_rows();
  TREESPEC_ASSERT(kv.shape().n_head_kv == hp_.n_head_kv && kv.shape().head_dim == hp_.head_dim,
                  "run_layers: KV cache shaped for another model");
  for (const auto& s : batch.segs) {
    TREESPEC_ASSERT(s.seq >= 0 && s.seq < kv.n_seq(), "run_layers: sequence id out of range");
    TREESPEC_ASSERT(s.n_past == kv.n_past(s.seq), "run_layers: batch built for another committed length");
    if (Status st = kv.reserve(s.seq, batch.cells_needed(s)); !st.ok()) return st;
  }
  ctx.reserve(n, kv.n_cells());

  // Visible tree cells of every row (ancestors-or-self), the same for all layers.
  ctx.extra_.resize(static_cast<size_t>(n));
  for (const auto& s : batch.segs) {
    for (int32_t r = s.row_begin; r < s.row_begin + s.n_rows; ++r) {
      auto& ex = ctx.extra_[static_cast<size_t>(r)];
      ex.clear();
      const int32_t node = batch.node[static_cast<size_t>(r)];
      if (s.tree == nullptr) {
        for (int32_t j = 0; j <= node; ++j) ex.push_back(s.n_past + j);
      } else {
        const uint64_t* anc = s.tree->ancestors(node);
        for (int32_t j = 0; j <= node; ++j) {
          if ((anc[j / 64] >> (j % 64)) & 1u) ex.push_back(s.n_past + j);
        }
      }
    }
  }

  // Sliding window: a row at position p sees positions > p - n_swa.
  ctx.window_begin_.resize(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    const int64_t p = batch.pos[static_cast<size_t>(r)];
    ctx.window_begin_[static_cast<size_t>(r)] = hp_.n_swa > 0 ? std::max<int64_t>(0, p - hp_.n_swa + 1) : 0;
  }
  ctx.extra_ptr_.resize(static_cast<size_t>(n));
  ctx.extra_len_.resize(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    ctx.extra_ptr_[static_cast<size_t>(r)] = ctx.extra_[static_cast<size_t>(r)].data();
    ctx.extra_len_[static_cast<size_t>(r)] = static_cast<int32_t>(ctx.extra_[static_cast<size_t>(r)].size());
  }
  return {};
}

namespace {

// Row-wise work (norms, RoPE, residual adds, activations) is cheap next to the matmuls
// but not for 64 tree rows of a wide model: split it over the pool when there is enough.
template <class Fn>
void rows_parallel(core::ThreadPool* pool, int64_t n_items, int64_t item_cost, Fn&& fn) {
  if (n_items > 1 && n_items * item_cost >= (int64_t{1} << 15) && pool->n_threads() > 1) {
    pool->parallel_for(n_items, 1, [&](int64_t b, int64_t e, int) { fn(b, e); });
  } else {
    fn(int64_t{0}, n_items);
  }
}

}  // namespace

void Model::run_layer(ForwardContext& ctx, const Batch& batch, int32_t il, int32_t kv_layer, float* x,
                      kv::KvCache& kv) const {
  const int32_t n = batch.n_rows();
  const int64_t E = hp_.n_embd;
  const LayerWeights& L = layers_[static_cast<size_t>(il)];
  float* xn = ctx.xn_.data();
  float* tmp = ctx.tmp_.data();
  // x += post_norm(add) (no norm when post is empty); xn = norm(x) with `gain` (none if empty).
  auto residual_norm = [&](float* add, const std::vector<float>& post, const std::vector<float>& gain) {
    rows_parallel(ctx.pool_, n, E, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float* xr = x + r * E;
        if (add) {
          float* ar = add + r * E;
          if (!post.empty()) kernels::rmsnorm(ar, post.data(), ar, E, hp_.rms_eps);
          // (Granite's residual_scale; 1 elsewhere, where s * a == a exactly)
          for (int64_t i = 0; i < E; ++i) xr[i] += hp_.residual_scale * ar[i];
        }
        if (!gain.empty()) kernels::rmsnorm(xr, gain.data(), xn + r * E, E, hp_.rms_eps);
      }
    });
  };
  static const std::vector<float> kNone;
  residual_norm(nullptr, kNone, L.attn_norm);
  attention(ctx, batch, il, kv_layer, kv);
  residual_norm(tmp, L.attn_post_norm, L.ffn_norm);
  ffn(ctx, n, L);
  residual_norm(tmp, L.ffn_post_norm, kNone);
}

void Model::attention(ForwardContext& ctx, const Batch& batch, int32_t il, int32_t kv_layer, kv::KvCache& kv) const {
  const LayerWeights& L = layers_[static_cast<size_t>(il)];
  const int32_t n = batch.n_rows();
  const int64_t nq = hp_.n_embd_q();
  const int64_t nkv = hp_.n_embd_kv();
  const int64_t hd = hp_.head_dim;
  core::ThreadPool* pool = ctx.pool_;
  float* q = ctx.q_.data();
  float* k = ctx.k_.data();
  float* v = ctx.v_.data();
  float* att = ctx.att_.data();
  const int64_t group = hp_.n_head / hp_.n_head_kv;
  {
    // q [n, nq], k [n, nkv], v [n, nkv] in one pass over the three matrices
    const kernels::WeightView* ws[3] = {&L.wq, &L.wk, &L.wv};
    float* ys[3] = {q, k, v};
    kernels::matmul_multi(ws, ys, 3, ctx.xn_.data(), n, pool);
  }
  if (hp_.has_qkv_bias) {
    for (int32_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < nq; ++i) q[r * nq + i] += L.bq[static_cast<size_t>(i)];
      for (int64_t i = 0; i < nkv; ++i) k[r * nkv + i] += L.bk[static_cast<size_t>(i)];
      for (int64_t i = 0; i < nkv; ++i) v[r * nkv + i] += L.bv[static_cast<size_t>(i)];
    }
  }
  const float* inv_freq = L.swa && !inv_freq_swa_.empty()                       ? inv_freq_swa_.data()
                          : hp_.longrope && kv.shape().n_cells > hp_.n_ctx_orig ? inv_freq_long_.data()
                                                                                : inv_freq_.data();
  rows_parallel(pool, n, nq + nkv, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      if (hp_.qk_norm) {  // per-head RMSNorm before RoPE (Qwen3, Gemma 3)
        for (int64_t h = 0; h < hp_.n_head; ++h) {
          float* qh = q + r * nq + h * hd;
          kernels::rmsnorm(qh, L.q_norm.data(), qh, hd, hp_.rms_eps);
        }
        for (int64_t h = 0; h < hp_.n_head_kv; ++h) {
          float* kh = k + r * nkv + h * hd;
          kernels::rmsnorm(kh, L.k_norm.data(), kh, hd, hp_.rms_eps);
        }
      }
      if (!L.rope) continue;
      const int32_t p = batch.pos[static_cast<size_t>(r)];
      kernels::rope(q + r * nq, hp_.n_head, hd, hp_.n_rot, p, inv_freq, hp_.rope_neox, hp_.rope_attn_factor);
      kernels::rope(k + r * nkv, hp_.n_head_kv, hd, hp_.n_rot, p, inv_freq, hp_.rope_neox, hp_.rope_attn_factor);
    }
  });
  // Write this layer's K/V into the rows' cells (the cache converts to its types).
  for (const auto& s : batch.segs) {
    for (int32_t r = s.row_begin; r < s.row_begin + s.n_rows; ++r) {
      kv.write_row(kv_layer, s.seq, s.n_past + batch.node[static_cast<size_t>(r)], k + r * nkv, v + r * nkv);
    }
  }
  // Attention: one task per (segment, kv head, chunk of up to kAttnRows rows). The rows
  // of a chunk share one pass over the committed prefix's K/V.
  ctx.attn_tasks_.clear();
  for (size_t si = 0; si < batch.segs.size(); ++si) {
    const auto& s = batch.segs[si];
    for (int32_t r = s.row_begin; r < s.row_begin + s.n_rows; r += ForwardContext::kAttnRows) {
      const int32_t nr = std::min(ForwardContext::kAttnRows, s.row_begin + s.n_rows - r);
      for (int32_t g = 0; g < hp_.n_head_kv; ++g) ctx.attn_tasks_.push_back({static_cast<int32_t>(si), r, nr, g});
    }
  }
  auto work = [&](int64_t b, int64_t e, int thread) {
    float* sc = ctx.scores_.data() + static_cast<size_t>(thread) * ctx.scores_per_thread_;
    for (int64_t t = b; t < e; ++t) {
      const auto& task = ctx.attn_tasks_[static_cast<size_t>(t)];
      const auto& s = batch.segs[static_cast<size_t>(task.seg)];
      const int64_t g = task.kv_head;
      kernels::AttentionRows a;
      a.q = q + task.row * nq + g * group * hd;
      a.ldq = nq;
      a.out = att + task.row * nq + g * group * hd;
      a.ldo = nq;
      a.n_rows = task.n_rows;
      a.n_head = group;
      a.head_dim = hd;
      a.k = kv.k_rows(kv_layer, s.seq, static_cast<int32_t>(g));
      a.v = kv.v_rows(kv_layer, s.seq, static_cast<int32_t>(g));
      a.n_committed = s.n_past;
      a.extra = ctx.extra_ptr_.data() + task.row;
      a.n_extra = ctx.extra_len_.data() + task.row;
      a.scale = hp_.attn_scale;
      a.softcap = hp_.attn_softcap;
      if (L.swa) a.window_begin = ctx.window_begin_.data() + task.row;
      a.scratch = sc;
      kernels::attention_rows(a);
    }
  };
  const auto n_tasks = static_cast<int64_t>(ctx.attn_tasks_.size());
  if (n_tasks > 1) {
    pool->parallel_for(n_tasks, 1, work);
  } else {
    work(0, n_tasks, 0);
  }
  kernels::matmul(L.wo, att, n, ctx.tmp_.data(), pool);  // [n, E]
}

void Model::ffn(ForwardContext& ctx, int32_t n, const LayerWeights& L) const {
  float* gate = ctx.gate_.data();
  float* up = ctx.up_.data();
  {
    const kernels::WeightView* ws[2] = {&L.w_gate, &L.w_up};
    float* ys[2] = {gate, up};  // [n, n_ff] each
    kernels::matmul_multi(ws, ys, 2, ctx.xn_.data(), n, ctx.pool_);
  }
  const int64_t F = hp_.n_ff;
  rows_parallel(ctx.pool_, n, F, [&](int64_t b, int64_t e) {
    if (hp_.act == FfnAct::gelu_tanh) {
      kernels::geglu(gate + b * F, up + b * F, gate + b * F, (e - b) * F);
    } else {
      kernels::swiglu(gate + b * F, up + b * F, gate + b * F, (e - b) * F);
    }
  });
  kernels::matmul(L.w_down, gate, n, ctx.tmp_.data(), ctx.pool_);  // [n, E]
}

void Model::final_norm(const float* x, int32_t n_rows, std::span<const int32_t> rows, float* out) const {
  const int64_t E = hp_.n_embd;
  if (rows.empty()) {
    for (int32_t r = 0; r < n_rows; ++r) kernels::rmsnorm(x + r * E, output_norm_.data(), out + r * E, E, hp_.rms_eps);
    return;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    TREESPEC_ASSERT(rows[i] >= 0 && rows[i] < n_rows, "final_norm: row out of range");
    kernels::rmsnorm(x + rows[i] * E, output_norm_.data(), out + static_cast<int64_t>(i) * E, E, hp_.rms_eps);
  }
}

void Model::lm_head(ForwardContext& ctx, const float* xn, int32_t n, float* logits) const {
  TREESPEC_ASSERT(!hp_.layers_only,
                  "lm_head: a layer stack has no output matrix (callers check hparams().layers_only)");
  kernels::matmul(output_, xn, n, logits, ctx.pool_);
  const int64_t total = static_cast<int64_t>(n) * hp_.n_vocab;
  if (hp_.final_softcap > 0.0f) kernels::softcap(logits, total, hp_.final_softcap);  // Gemma 2
  if (hp_.logit_scale != 1.0f) {  // Granite: logits x (1 / logit_scale), as llama.cpp scales them
    const float inv = 1.0f / hp_.logit_scale;
    for (int64_t i = 0; i < total; ++i) logits[i] *= inv;
  }
}

Status Model::forward(ForwardContext& ctx, const Batch& batch, kv::KvCache& kv, std::span<const int32_t> out_rows,
                      float* logits, float* normed) const {
  const int32_t n = batch.n_rows();
  ctx.reserve(n, kv.n_cells());
  float* x = ctx.x_.data();
  embed(batch, x);
  if (Status st = run_layers(ctx, batch, 0, hp_.n_layer, x, kv); !st.ok()) return st;
  const int32_t n_out = out_rows.empty() ? n : static_cast<int32_t>(out_rows.size());
  float* xn = normed ? normed : ctx.xn_.data();
  final_norm(x, n, out_rows, xn);
  lm_head(ctx, xn, n_out, logits);
  return {};
}

ForwardContext::ForwardContext(const Model& model, int32_t n_threads)
    : model_(model), owned_pool_(std::make_unique<core::ThreadPool>(n_threads)), pool_(owned_pool_.get()) {}

ForwardContext::ForwardContext(const Model& model, core::ThreadPool& pool) : model_(model), pool_(&pool) {}

void ForwardContext::reserve(int32_t n_rows, int32_t n_cells) {
  const auto& hp = model_.hparams();
  if (n_rows > max_rows_) {
    const auto n = static_cast<size_t>(n_rows);
    const size_t wide = static_cast<size_t>(std::max({hp.n_embd, hp.n_embd_q()}));
    x_.resize(n * hp.n_embd, "hidden states");
    xn_.resize(n * wide, "normed hidden states");
    q_.resize(n * hp.n_embd_q(), "queries");
    k_.resize(n * hp.n_embd_kv(), "keys");
    v_.resize(n * hp.n_embd_kv(), "values");
    att_.resize(n * hp.n_embd_q(), "attention output");
    gate_.resize(n * hp.n_ff, "ffn gate");
    up_.resize(n * hp.n_ff, "ffn up");
    tmp_.resize(n * hp.n_embd, "residual update");
    max_rows_ = n_rows;
  }
  if (n_cells > max_cells_) {
    const int64_t group = hp.n_head / hp.n_head_kv;
    scores_per_thread_ = static_cast<size_t>(kernels::attention_scratch_floats(kAttnRows, group, n_cells));
    scores_.resize(static_cast<size_t>(pool_->n_threads()) * scores_per_thread_, "attention scores");
    max_cells_ = n_cells;
  }
}

}  // namespace treespec::model
