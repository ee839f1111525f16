// Sentence embeddings from a generative model, as llama.cpp computes them: the final
// RMSNorm's output for every prompt token (the hidden states the LM head reads), pooled
// over the tokens and L2-normalised. Used by `treespec serve`'s /v1/embeddings.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "tensor/dtype.h"

namespace treespec::engine {

// llama-server's --pooling: mean (of all tokens), cls (the first token), last.
enum class Pooling { mean, cls, last };
// InvalidArgument naming the value and the choices ("none" and "rank" are not
// sentence embeddings: no OpenAI-shaped answer).
Pooling parse_pooling(const std::string& name);
const char* pooling_name(Pooling p);

struct EmbeddingParams {
  Pooling pooling = Pooling::mean;
  int32_t n_batch = 512;                      // prefill chunk
  tensor::DType type_k = tensor::DType::f16;  // KV cache element types (as the engine's)
  tensor::DType type_v = tensor::DType::f16;
};

// One embedding of n_embd floats (unit L2 norm; all zeros stay zeros) for `tokens`
// (non-empty, each < n_vocab; at most n_ctx_max of them: InvalidArgument otherwise).
// Runs on ctx (its thread pool) with a KV cache of its own: safe alongside an Engine on
// the same immutable Model. The result does not depend on n_batch or the thread count.
std::vector<float> embed_tokens(const model::Model& m, model::ForwardContext& ctx, std::span<const int32_t> tokens,
                                const EmbeddingParams& p, int32_t n_ctx_max);

}  // namespace treespec::engine
