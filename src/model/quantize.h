// Re-quantising a GGUF model (`treespec quantize`) and the per-tensor type rules shared
// with `treespec expand`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace treespec::model {

// The type a tensor gets when a model is converted to `target`, following llama.cpp:
// only 2-D weight matrices are quantised (norms, biases, rope factors and other 1-D or
// small tensors stay F32); a matrix whose row length ne[0] is not a multiple of the
// target's block size falls back as llama.cpp does: q2_k / q3_k / iq4_xs -> iq4_nl,
// q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, then (and for the 32-value types) f16.
tensor::DType quant_type_for(const std::string& name, const std::vector<int64_t>& ne, tensor::DType target);

// A quantisation recipe (`treespec quantize --type NAME`): either one of llama.cpp's file
// types, with llama-quantize's per-tensor choices (q2_k, q3_k_s/m/l, q4_k_s/m, q5_k_s/m,
// q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, f16, bf16, f32), or one weight type
// for every matrix (q3_k, q4_k, q5_k: not llama.cpp file types). docs/kernels.md lists
// the rules.
struct QuantRecipe {
  std::string name;                         // lower case, as accepted
  tensor::DType base = tensor::DType::f16;  // the type most matrices get
  int32_t file_type = 1;                    // general.file_type (llama_ftype numbering)
  bool llama_rules = false;                 // apply llama-quantize's per-tensor choices
};
// nullopt for an unknown name; quant_recipe_names() lists the known ones.
std::optional<QuantRecipe> quant_recipe(const std::string& name);
std::string quant_recipe_names();
// general.file_type (llama_ftype) of a file whose matrices are all `t`; -1 if none fits.
int32_t file_type_for(tensor::DType t);

// What llama-quantize's rules look at besides a tensor's name and shape.
struct QuantModelShape {
  int64_t n_layer = 0;
  int64_t n_gqa = 1;        // query heads per KV head
  bool has_output = false;  // a separate output.weight (else token_embd is the output)
};
// The type of one tensor under a recipe (llama_rules: llama.cpp's choices for the output
// and the attention / FFN matrices of each layer, then the row-length fallbacks).
tensor::DType quant_type_for(const std::string& name, const std::vector<int64_t>& ne, const QuantRecipe& r,
                             const QuantModelShape& shape);

// Element values of a tensor as f32 (any type tensor::quant_supported accepts; Unsupported
// naming the tensor otherwise). ne[0] must be a multiple of the block size (GGUF invariant).
std::vector<float> tensor_to_f32(const std::string& file, const std::string& name, tensor::DType type,
                                 const std::vector<int64_t>& ne, const void* data);

// Bytes of rows [n_rows, n_cols] f32 quantised to `type` (row by row).
std::vector<uint8_t> f32_to_tensor(tensor::DType type, const float* x, int64_t n_rows, int64_t n_cols);

struct QuantizeSummary {
  size_t n_tensors = 0;
  size_t n_quantized = 0;  // tensors that got the recipe's base type
  size_t n_upgraded = 0;   // matrices a llama.cpp rule gave another quantised type
  size_t n_fallback = 0;   // matrices that got a fallback type (row length)
  uint64_t bytes_in = 0;   // tensor data bytes
  uint64_t bytes_out = 0;
};

// Reads `in`, writes `out` with every tensor converted by quant_type_for. Metadata is
// copied (general.file_type updated). Errors: IoError, FormatError, Unsupported (a
// source tensor type we cannot read, or a target we cannot write).
QuantizeSummary quantize_gguf(const std::string& in, const std::string& out, const QuantRecipe& recipe);
// One type for every matrix (the uniform recipe of `target`).
QuantizeSummary quantize_gguf(const std::string& in, const std::string& out, tensor::DType target);

}  // namespace treespec::model
