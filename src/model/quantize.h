// Re-quantising a GGUF model (`treespec quantize`) and the per-tensor type rules shared
// with `treespec expand`.
#pragma once

#include <cstdint>
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

// Element values of a tensor as f32 (any type tensor::quant_supported accepts; Unsupported
// naming the tensor otherwise). ne[0] must be a multiple of the block size (GGUF invariant).
std::vector<float> tensor_to_f32(const std::string& file, const std::string& name, tensor::DType type,
                                 const std::vector<int64_t>& ne, const void* data);

// Bytes of rows [n_rows, n_cols] f32 quantised to `type` (row by row).
std::vector<uint8_t> f32_to_tensor(tensor::DType type, const float* x, int64_t n_rows, int64_t n_cols);

struct QuantizeSummary {
  size_t n_tensors = 0;
  size_t n_quantized = 0;     // tensors that got the target type
  size_t n_fallback = 0;      // matrices that got a fallback type (row length)
  uint64_t bytes_in = 0;      // tensor data bytes
  uint64_t bytes_out = 0;
};

// Reads `in`, writes `out` with every tensor converted by quant_type_for. Metadata is
// copied (general.file_type updated). Errors: IoError, FormatError, Unsupported (a
// source tensor type we cannot read, or a target we cannot write).
QuantizeSummary quantize_gguf(const std::string& in, const std::string& out, tensor::DType target);

}  // namespace treespec::model
