#include "model/quantize.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>

#include "gguf/gguf.h"
#include "tensor/quant.h"
#include "treespec/status.h"

namespace treespec::model {

using tensor::DType;

namespace {

bool fits(DType t, int64_t n) { return n % tensor::dtype_traits(t).block_size == 0; }

struct RecipeEntry {
  const char* name;
  DType base;
  int32_t file_type;  // llama_ftype
  bool llama_rules;
};

// llama.cpp's file types (llama_ftype numbers) and treespec's uniform K-quant recipes.
constexpr RecipeEntry kRecipes[] = {
    {"f32", DType::f32, 0, false},       {"f16", DType::f16, 1, false},     {"bf16", DType::bf16, 32, false},
    {"q8_0", DType::q8_0, 7, true},      {"q4_0", DType::q4_0, 2, true},    {"q4_1", DType::q4_1, 3, true},
    {"q5_0", DType::q5_0, 8, true},      {"q5_1", DType::q5_1, 9, true},    {"iq4_nl", DType::iq4_nl, 25, true},
    {"iq4_xs", DType::iq4_xs, 30, true}, {"q2_k", DType::q2_k, 10, true},   {"q3_k_s", DType::q3_k, 11, true},
    {"q3_k_m", DType::q3_k, 12, true},   {"q3_k_l", DType::q3_k, 13, true}, {"q4_k_s", DType::q4_k, 14, true},
    {"q4_k_m", DType::q4_k, 15, true},   {"q5_k_s", DType::q5_k, 16, true}, {"q5_k_m", DType::q5_k, 17, true},
    {"q6_k", DType::q6_k, 18, true},     {"q3_k", DType::q3_k, 11, false},  {"q4_k", DType::q4_k, 14, false},
    {"q5_k", DType::q5_k, 16, false},
};

// The type a matrix of `target` falls back to when its rows (n) do not fit the block,
// as llama.cpp's quantiser does.
DType row_fallback(DType target, int64_t n) {
  if (fits(target, n)) return target;
  DType fallback = DType::f16;
  switch (target) {
    case DType::q2_k:
    case DType::q3_k:
    case DType::iq4_xs: fallback = DType::iq4_nl; break;
    case DType::q4_k: fallback = DType::q5_0; break;
    case DType::q5_k: fallback = DType::q5_1; break;
    case DType::q6_k: fallback = DType::q8_0; break;
    default: break;
  }
  return fits(fallback, n) ? fallback : DType::f16;
}

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Layer index of "blk.N.<...>", or -1.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int64_t i = 0;
  size_t p = 4;
  if (p >= name.size() || !std::isdigit(static_cast<unsigned char>(name[p]))) return -1;
  while (p < name.size() && std::isdigit(static_cast<unsigned char>(name[p]))) i = i * 10 + (name[p++] - '0');
  return i;
}

// llama.cpp gives these layers of attn_v / ffn_down more bits in its _M mixes: the first
// and last eighth, and every third layer in between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama-quantize's per-tensor choice for a quantised matrix of a llama.cpp file type
// (before the row-length fallback), for the dense decoder architectures we load.
DType llama_rule(const std::string& name, int64_t nx, const QuantRecipe& r, const QuantModelShape& m) {
  const std::string& f = r.name;
  const DType base = r.base;
  if (name == "output.weight" || (!m.has_output && name == "token_embd.weight")) {
    if (nx % 256 != 0) return DType::q8_0;
    return base == DType::q8_0 ? DType::q8_0 : DType::q6_k;
  }
  const int64_t i = layer_of(name), n = m.n_layer;
  if (ends_with(name, ".attn_v.weight")) {
    if (f == "q2_k") return m.n_gqa >= 4 ? DType::q4_k : DType::q3_k;
    if (f == "q3_k_m") return i < 2 ? DType::q5_k : DType::q4_k;
    if (f == "q3_k_l") return DType::q5_k;
    if ((f == "q4_k_m" || f == "q5_k_m") && use_more_bits(i, n)) return DType::q6_k;
    if (f == "q4_k_s" && i < 4) return DType::q5_k;
    if ((f == "iq4_nl" || f == "iq4_xs") && m.n_gqa >= 4) return DType::q5_k;
    return base;
  }
  if (ends_with(name, ".ffn_down.weight")) {
    if (f == "q2_k") return DType::q3_k;
    if (f == "q3_k_m") return i < n / 16 ? DType::q5_k : DType::q4_k;
    if (f == "q3_k_l") return DType::q5_k;
    if ((f == "q4_k_m" || f == "q5_k_m") && use_more_bits(i, n)) return DType::q6_k;
    if ((f == "q4_k_s" || f == "iq4_nl" || f == "iq4_xs") && i < n / 8) return DType::q5_k;
    return base;
  }
  if (ends_with(name, ".attn_output.weight")) {
    if (f == "q2_k") return DType::q3_k;
    if (f == "q3_k_m") return DType::q4_k;
    if (f == "q3_k_l") return DType::q5_k;
    return base;
  }
  if (ends_with(name, ".attn_qkv.weight")) {  // fused QKV (phi3)
    if (f == "q3_k_m" || f == "q3_k_l") return DType::q4_k;
    if (f == "q4_k_m") return DType::q5_k;
    if (f == "q5_k_m") return DType::q6_k;
    return base;
  }
  return base;
}

QuantModelShape shape_of(const gguf::GgufFile& f) {
  QuantModelShape s;
  const std::string arch = f.get_string("general.architecture", "llama");
  s.n_layer = f.get_int(arch + ".block_count", 0);
  const int64_t heads = f.get_int(arch + ".attention.head_count", 1);
  const int64_t kv = f.get_int(arch + ".attention.head_count_kv", heads);
  s.n_gqa = kv > 0 ? heads / kv : 1;
  s.has_output = f.find_tensor("output.weight") != nullptr;
  return s;
}

}  // namespace

std::optional<QuantRecipe> quant_recipe(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& e : kRecipes) {
    if (lower == e.name) return QuantRecipe{e.name, e.base, e.file_type, e.llama_rules};
  }
  return std::nullopt;
}

int32_t file_type_for(DType t) {
  for (const auto& e : kRecipes) {
    if (e.base == t) return e.file_type;
  }
  return -1;
}

std::string quant_recipe_names() {
  std::string out;
  for (const auto& e : kRecipes) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

DType quant_type_for(const std::string& name, const std::vector<int64_t>& ne, DType target) {
  return quant_type_for(name, ne, QuantRecipe{tensor::dtype_name(target), target, -1, false}, QuantModelShape{});
}

namespace {

// A tensor's type under a recipe: what the recipe's rules give it, and the type it gets
// after the row-length fallback (both f32 for tensors that stay f32).
struct Choice {
  DType rule = DType::f32;
  DType type = DType::f32;
};

Choice choose(const std::string& name, const std::vector<int64_t>& ne, const QuantRecipe& r,
              const QuantModelShape& shape) {
  const bool is_matrix = ne.size() == 2 && ne[0] > 1 && ne[1] > 1;
  const bool is_weight = ends_with(name, ".weight");
  if (!is_matrix || !is_weight || name == "rope_freqs.weight") return {};
  const DType t = r.llama_rules ? llama_rule(name, ne[0], r, shape) : r.base;
  return {t, row_fallback(t, ne[0])};
}

}  // namespace

DType quant_type_for(const std::string& name, const std::vector<int64_t>& ne, const QuantRecipe& r,
                     const QuantModelShape& shape) {
  return choose(name, ne, r, shape).type;
}

std::vector<float> tensor_to_f32(const std::string& file, const std::string& name, DType type,
                                 const std::vector<int64_t>& ne, const void* data) {
  if (!tensor::quant_supported(type)) {
    throw Unsupported(fmt::format("{}: tensor '{}' has type {}, which treespec cannot read yet", file, name,
                                  tensor::dtype_name(type)));
  }
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  const int64_t row = ne.empty() ? 1 : ne[0];
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t rb = tensor::row_bytes(type, row);
  for (int64_t r = 0; r < n / row; ++r) {
    tensor::dequantize_row(type, static_cast<const uint8_t*>(data) + r * rb, out.data() + r * row, row);
  }
  return out;
}

std::vector<uint8_t> f32_to_tensor(DType type, const float* x, int64_t n_rows, int64_t n_cols) {
  const int64_t rb = tensor::row_bytes(type, n_cols);
  std::vector<uint8_t> out(static_cast<size_t>(rb * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) tensor::quantize_row(type, x + r * n_cols, out.data() + r * rb, n_cols);
  return out;
}

QuantizeSummary quantize_gguf(const std::string& in, const std::string& out, DType target) {
  if (!tensor::quant_supported(target)) {
    throw Unsupported(
        fmt::format("quantize: target type {} is not supported (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                    "q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs)",
                    tensor::dtype_name(target)));
  }
  return quantize_gguf(in, out, QuantRecipe{tensor::dtype_name(target), target, file_type_for(target), false});
}

QuantizeSummary quantize_gguf(const std::string& in, const std::string& out, const QuantRecipe& recipe) {
  const auto src = gguf::GgufFile::open(in);
  const QuantModelShape shape = shape_of(*src);
  gguf::GgufWriter w;
  for (const auto& [k, v] : src->metadata()) {
    if (k == "general.alignment") continue;
    w.set(k, v);
  }
  if (src->alignment() != gguf::kDefaultAlignment) w.set_alignment(src->alignment());
  if (recipe.file_type >= 0) w.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(recipe.file_type)));
  QuantizeSummary s;
  for (const auto& t : src->tensors()) {
    const Choice c = choose(t.name, t.ne, recipe, shape);
    const DType dst = c.type;
    s.n_tensors++;
    s.bytes_in += t.nbytes;
    if (dst == recipe.base) {
      s.n_quantized++;
    } else if (dst != DType::f32 && dst == c.rule) {
      s.n_upgraded++;
    } else if (dst != DType::f32) {
      s.n_fallback++;
    }
    if (dst == t.type) {
      w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
      s.bytes_out += t.nbytes;
      continue;
    }
    const auto f = tensor_to_f32(in, t.name, t.type, t.ne, t.data);
    const int64_t row = t.ne.empty() ? 1 : t.ne[0];
    const auto bytes = f32_to_tensor(dst, f.data(), static_cast<int64_t>(f.size()) / row, row);
    w.add_tensor(t.name, dst, t.ne, bytes.data(), bytes.size());
    s.bytes_out += bytes.size();
  }
  w.write(out);
  return s;
}

}  // namespace treespec::model
