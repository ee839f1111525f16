// Import of llama2.c checkpoints (legacy "version 0" export) and llama2.c tokenizer files
// into a standard llama-architecture GGUF (llama.cpp key and tensor names).
//
// Checkpoint: 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; vocab_size < 0 means an untied classifier is stored at the end),
// then fp32 arrays: token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
// wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
// w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
// two legacy RoPE tables [seq_len, head_size / 2] (skipped), [wcls [vocab, dim]].
// Tokenizer: int32 max_token_length, then per token: f32 score, int32 length, bytes.
//
// Mapping details (RoPE convention, spaces, token types, end of generation) are in
// docs/gguf.md. Every inconsistency raises FormatError naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace treespec::gguf {

struct Llama2cConfig {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // always positive here
  int32_t seq_len = 0;
  bool shared_classifier = true;  // header vocab_size > 0: output tied to token_embd

  int32_t head_size() const { return dim / n_heads; }
  int32_t kv_dim() const { return dim / n_heads * n_kv_heads; }
};

// Validates the header (positive sizes, n_heads divides dim, n_kv_heads divides n_heads,
// even head size) and that the file length equals exactly what the header implies.
Llama2cConfig parse_llama2c_header(const uint8_t* data, size_t size, const std::string& name);

struct Llama2cToken {
  std::string text;  // raw bytes as stored (spaces as ' ')
  float score = 0;
};

// Parses exactly n_vocab tokens; lengths are checked against max_token_length and the
// remaining bytes, and the file must end after the last token.
std::vector<Llama2cToken> parse_llama2c_tokenizer(const uint8_t* data, size_t size, int32_t n_vocab,
                                                  const std::string& name);

struct Llama2cConvertOptions {
  std::string name = "llama2c";             // general.name
  tensor::DType type = tensor::DType::f32;  // f32 or f16 for matrices; norms stay f32
};

// In-memory conversion. `model_name`/`tok_name` appear in error messages.
GgufWriter convert_llama2c(const uint8_t* model, size_t model_size, const uint8_t* tok, size_t tok_size,
                           const Llama2cConvertOptions& opts, const std::string& model_name = "<checkpoint>",
                           const std::string& tok_name = "<tokenizer>");

struct Llama2cConvertSummary {
  Llama2cConfig config;
  size_t n_tensors = 0;
  int64_t n_params = 0;
};

// Reads both files, converts, writes out_path. Throws IoError / FormatError / InvalidArgument.
Llama2cConvertSummary convert_llama2c_files(const std::string& model_path, const std::string& tok_path,
                                            const std::string& out_path, const Llama2cConvertOptions& opts);

}  // namespace treespec::gguf
