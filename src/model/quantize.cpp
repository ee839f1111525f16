#include "model/quantize.h"

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "tensor/quant.h"
#include "treespec/status.h"

namespace treespec::model {

using tensor::DType;

namespace {

bool fits(DType t, int64_t n) { return n % tensor::dtype_traits(t).block_size == 0; }

// GGUF general.file_type numbering (llama_ftype) for the types we write; a uniform
// K-quant file is named after llama.cpp's "_S" mix (closest to one type everywhere).
int32_t file_type_of(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::q4_0: return 2;
    case DType::q4_1: return 3;
    case DType::q8_0: return 7;
    case DType::q5_0: return 8;
    case DType::q5_1: return 9;
    case DType::q2_k: return 10;
    case DType::q3_k: return 11;
    case DType::q4_k: return 15;  // Q4_K_M is the common name; we quantise uniformly
    case DType::q5_k: return 16;
    case DType::q6_k: return 18;
    case DType::iq4_nl: return 25;
    case DType::iq4_xs: return 30;
    case DType::bf16: return 32;
    default: return -1;
  }
}

}  // namespace

DType quant_type_for(const std::string& name, const std::vector<int64_t>& ne, DType target) {
  const bool is_matrix = ne.size() == 2 && ne[0] > 1 && ne[1] > 1;
  const bool is_weight = name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
  if (!is_matrix || !is_weight || name == "rope_freqs.weight") return DType::f32;
  const int64_t n = ne[0];
  if (fits(target, n)) return target;
  // llama.cpp's fallbacks for rows that are not a multiple of 256.
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
    throw Unsupported(fmt::format("quantize: target type {} is not supported (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                                  "q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs)",
                                  tensor::dtype_name(target)));
  }
  const auto src = gguf::GgufFile::open(in);
  gguf::GgufWriter w;
  for (const auto& [k, v] : src->metadata()) {
    if (k == "general.alignment") continue;
    w.set(k, v);
  }
  if (src->alignment() != gguf::kDefaultAlignment) w.set_alignment(src->alignment());
  w.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(file_type_of(target))));
  QuantizeSummary s;
  for (const auto& t : src->tensors()) {
    const DType dst = quant_type_for(t.name, t.ne, target);
    s.n_tensors++;
    s.bytes_in += t.nbytes;
    if (dst == target) s.n_quantized++;
    if (dst != target && dst != DType::f32) s.n_fallback++;
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
