// Tiny random-weight models written with our GGUF writer: fixtures for model, kernel,
// tree and engine tests (nothing downloads). Architectures "llama", "qwen2", "qwen3",
// "gemma2", "gemma3", "phi3" (and any other name, for error tests); SPM or byte-level
// BPE vocabularies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace treespec::core {
class Rng;
}
namespace treespec::gguf {
class GgufWriter;
}

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
  float weight_scale = 0.3f;  // stddev relative to 1/sqrt(fan_in)
  float embd_std = 1.0f;      // stddev of token_embd (Gemma's are ~1/sqrt(n_embd): it scales them up)
  int32_t eos_id = 2;         // SPM vocab only

  // Optional metadata / tensors of real families (defaults write none of them).
  int32_t head_dim = 0;  // > 0: <arch>.attention.key_length/value_length (may differ from n_embd/n_head)
  int32_t n_rot = 0;     // > 0: <arch>.rope.dimension_count
  float rms_eps = 1e-5f;
  float rope_scale_linear = 0.0f;  // > 0: rope.scaling.type "linear" with this factor
  std::vector<float> rope_freqs;   // non-empty: tensor rope_freqs.weight [n_rot/2] (Llama 3 style)
  // LongRoPE (Phi-3.5 / Phi-4-mini as convert_hf_to_gguf.py writes them): non-empty:
  // rope_factors_long.weight / rope_factors_short.weight [n_rot/2], and the two keys.
  std::vector<float> rope_factors_long, rope_factors_short;
  int32_t rope_orig_ctx = 0;      // > 0: <arch>.rope.scaling.original_context_length
  float rope_attn_factor = 0.0f;  // > 0: <arch>.rope.scaling.attn_factor
  bool write_vocab_size = false;  // <arch>.vocab_size
  // Newer families (llama.cpp's tensor names and keys):
  bool qk_norm = false;        // blk.N.attn_q_norm / attn_k_norm [head_dim] (qwen3, gemma3)
  bool post_norms = false;     // blk.N.post_attention_norm / post_ffw_norm (gemma2, gemma3)
  float attn_softcap = 0.0f;   // > 0: <arch>.attn_logit_softcapping
  float final_softcap = 0.0f;  // > 0: <arch>.final_logit_softcapping
  int32_t sliding_window = 0;  // > 0: <arch>.attention.sliding_window
  bool fused_qkv = false;      // blk.N.attn_qkv instead of attn_q/k/v (phi3)
  bool fused_gate_up = false;  // blk.N.ffn_up holds gate then up, no ffn_gate (phi3)
  // Granite's scalars (> 0: <arch>.embedding_scale / residual_scale / attention.scale /
  // logit_scale; llama.cpp requires all four for granite).
  float embedding_scale = 0.0f, residual_scale = 0.0f, attention_scale = 0.0f, logit_scale = 0.0f;

  // "llama": SPM vocab of placeholder pieces. "gpt2": byte-level BPE: the 256 byte
  // characters, three special tokens, then merges learned on a small built-in English
  // text until n_vocab (>= 300) tokens; specials and flags follow `bpe_pre`:
  // "llama-bpe": <|begin_of_text|> (BOS, added), <|end_of_text|> (EOS), <|eot_id|>;
  // otherwise (Qwen2 style): <|endoftext|> (BOS = EOS, not added), <|im_start|>, <|im_end|>.
  // "gemma": a Gemma-style SentencePiece vocabulary (byte fallback, <start_of_turn> /
  // <end_of_turn>, no space prefix; n_vocab >= 600 holds all its pieces).
  std::string tokenizer = "llama";
  std::string bpe_pre = "qwen2";

  // Last-moment edits (extra or replaced keys and tensors) for error tests.
  std::function<void(gguf::GgufWriter&)> customize;
};

// Writes the model to `path`.
void write_tiny_model(const std::string& path, const TinyModelConfig& cfg);

// Llama 3.1's per-pair RoPE factors (Meta's reference and llama.cpp's converter, which
// stores them as rope_freqs.weight): 1 for short wavelengths, `factor` for long ones,
// smoothly interpolated between original_context / high_freq_factor and
// original_context / low_freq_factor.
std::vector<float> llama3_rope_factors(int32_t n_rot, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, float original_context);

// n token ids drawn uniformly from [0, V).
std::vector<int32_t> random_tokens(core::Rng& rng, int32_t n, int32_t V);

}  // namespace treespec::test
