// What distinguishes the supported architectures (general.architecture) inside the one
// pre-norm decoder forward of model.cpp: a table of traits, so a family is a row here
// plus its metadata keys, not a branch in the forward. docs/models.md describes each.
#pragma once

#include <cstdint>
#include <string>

namespace treespec::model {

enum class FfnAct { silu, gelu_tanh };  // gate activation of the gated FFN
enum class BiasRule { none, optional, required };

struct ArchTraits {
  const char* name;
  bool rope_neox;     // RoPE pairs (i, i + n_rot/2) (GGML NeoX) instead of (2i, 2i+1)
  BiasRule qkv_bias;  // attn_q/k/v.bias: none, in every layer or none, or required
  bool qk_norm;       // attn_q_norm / attn_k_norm: per-head RMSNorm of Q and K before RoPE
  bool post_norms;    // post_attention_norm / post_ffw_norm on the block outputs (Gemma 2/3)
  FfnAct act;
  bool embd_scale;     // embeddings multiplied by sqrt(n_embd) (Gemma)
  bool fused_qkv;      // attn_qkv.weight may replace attn_q/k/v (Phi-3)
  bool fused_gate_up;  // ffn_up.weight holds gate then up, no ffn_gate (Phi-3)
  // Sliding-window layers: every layer when swa_period is 1, else layer il is local when
  // il % swa_period < swa_period - 1 (Gemma 2: even layers; Gemma 3: 5 of every 6).
  // 0: no sliding window.
  int swa_period;
  // RoPE-free layers: layer il has no RoPE when (il + 1) % nope_period == 0 (SmolLM3: every
  // 4th). 0: RoPE everywhere.
  int nope_period = 0;
  // Granite's four scalars from metadata: embedding_scale (embeddings), residual_scale (each
  // block's output before the residual add), attention.scale (replaces 1/sqrt(head size)),
  // logit_scale (logits divided by it).
  bool granite_scales = false;
};

// Whether layer il of a family with these traits uses the sliding window (when the file
// sets one).
bool is_swa_layer(const ArchTraits& t, int64_t il);
// Whether layer il rotates Q and K.
bool uses_rope(const ArchTraits& t, int64_t il);

// Queries are scaled by 1/sqrt(d) with d = this (llama.cpp's rule): the head size, except
// for the 27 B Gemma 2 (46 layers) and Gemma 3 (62 layers): n_embd / n_head
// (query_pre_attn_scalar).
int64_t query_scale_dim(const std::string& arch, int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t head_dim);

// The traits of `arch`, or null if it is not supported.
const ArchTraits* find_arch(const std::string& arch);
// "llama, qwen2, ..." for error messages.
std::string supported_archs();

}  // namespace treespec::model
