// Tiny random-weight Llama models written with our GGUF writer: fixtures for model,
// kernel, tree and engine tests (nothing downloads).
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace treespec::test {

struct TinyModelConfig {
  int32_t n_vocab = 64;
  int32_t n_embd = 32;
  int32_t n_layer = 2;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t n_ff = 48;
  int32_t n_ctx = 256;
  bool tied = false;
  bool qkv_bias = false;
  std::string arch = "llama";
  float rope_theta = 10000.0f;
  tensor::DType wtype = tensor::DType::f32;  // 2-D weights; norms stay f32
  uint64_t seed = 1;
  float weight_scale = 0.3f;                 // stddev relative to 1/sqrt(fan_in)
  int32_t eos_id = 2;
};

// Writes the model to `path` (with a minimal SPM-style vocabulary of n_vocab tokens).
void write_tiny_model(const std::string& path, const TinyModelConfig& cfg);

}  // namespace treespec::test
