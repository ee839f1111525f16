// The architecture families of the reference tests, as tiny random-weight model
// configurations (shared by test_arch and the tiny_model_tool that writes them for
// side-by-side runs against ../shared/anchors; docs/models.md).
#pragma once

#include <cmath>
#include <ostream>
#include <vector>

#include "common/tiny_model.h"

namespace treespec::test {

struct Family {
  const char* name;
  TinyModelConfig cfg;
  float tol;  // max |ours - reference| / max(1, max |reference|)
};

// Readable parameter names in gtest output instead of a byte dump.
inline void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

inline std::vector<Family> families() {
  std::vector<Family> out;
  {  // TinyLlama / Llama 2 shape: SPM vocab, GQA, untied output, default theta.
    TinyModelConfig c;
    c.n_embd = 64, c.n_head = 8, c.n_head_kv = 2, c.n_ff = 96, c.seed = 11;
    out.push_back({"tinyllama_gqa_untied", c, 1e-4f});
  }
  {  // Mistral: MQA-like GQA, theta 1e6, f16 weights.
    TinyModelConfig c;
    c.n_head = 4, c.n_head_kv = 1, c.rope_theta = 1e6f, c.wtype = tensor::DType::f16, c.seed = 12;
    out.push_back({"mistral_f16", c, 1e-3f});
  }
  {  // SmolLM: tied embeddings, GQA 6/2, BPE vocab with the smollm pre-tokenizer.
    TinyModelConfig c;
    c.n_embd = 48, c.n_head = 6, c.n_head_kv = 2, c.n_ff = 64, c.tied = true, c.n_vocab = 320;
    c.tokenizer = "gpt2", c.bpe_pre = "smollm", c.seed = 13;
    out.push_back({"smollm_tied", c, 1e-4f});
  }
  {  // Llama 3: rope_freqs.weight, theta 5e5, head size from key_length (16 != 32/4), BPE.
    TinyModelConfig c;
    c.n_embd = 32, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 16, c.n_vocab = 320, c.rope_theta = 500000.0f;
    c.rope_freqs = llama3_rope_factors(16, 500000.0f, 8.0f, 1.0f, 4.0f, 64.0f);
    c.tokenizer = "gpt2", c.bpe_pre = "llama-bpe", c.write_vocab_size = true, c.seed = 14;
    out.push_back({"llama3_rope_freqs", c, 1e-4f});
  }
  {  // Linear RoPE scaling (rope.scaling.type = linear, factor 4).
    TinyModelConfig c;
    c.rope_scale_linear = 4.0f, c.seed = 15;
    out.push_back({"llama_linear_scaling", c, 1e-4f});
  }
  {  // Qwen2.5 small: QKV bias, NeoX RoPE, theta 1e6, eps 1e-6, tied, GQA, BPE.
    TinyModelConfig c;
    c.arch = "qwen2", c.qkv_bias = true, c.tied = true, c.rope_theta = 1e6f, c.rms_eps = 1e-6f;
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 16;
    out.push_back({"qwen2_tied", c, 1e-4f});
  }
  {  // Qwen2 larger-style: untied output, f16 weights, MHA.
    TinyModelConfig c;
    c.arch = "qwen2", c.qkv_bias = true, c.n_head_kv = 4, c.rope_theta = 1e6f, c.wtype = tensor::DType::f16;
    c.seed = 17;
    out.push_back({"qwen2_untied_f16", c, 1e-3f});
  }
  {  // Qwen3: per-head Q/K RMSNorm, no biases, NeoX, head size 16 != 32/4, tied, BPE.
    TinyModelConfig c;
    c.arch = "qwen3", c.qk_norm = true, c.tied = true, c.head_dim = 16, c.rope_theta = 1e6f, c.rms_eps = 1e-6f;
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 18;
    out.push_back({"qwen3_tied", c, 1e-4f});
  }
  {  // Gemma 2: embedding scale, GELU, post norms, both soft-caps (small, so they bend the
     // logits), sliding window 4 on the even layers of 3, tied.
    TinyModelConfig c;
    c.arch = "gemma2", c.post_norms = true, c.attn_softcap = 2.0f, c.final_softcap = 3.0f, c.sliding_window = 4;
    c.n_layer = 3, c.head_dim = 16, c.tied = true, c.rms_eps = 1e-6f, c.embd_std = 0.18f, c.seed = 19;
    out.push_back({"gemma2_softcap_swa", c, 1e-4f});
  }
  {  // Gemma 3: Q/K norms, post norms, window 5 on 5 of every 6 layers (7 layers: 0-4 and 6
     // local), global layers at theta 1e6 with linear scaling 8, local ones at 10000.
    TinyModelConfig c;
    c.arch = "gemma3", c.qk_norm = true, c.post_norms = true, c.sliding_window = 5, c.n_layer = 7;
    c.rope_theta = 1e6f, c.rope_scale_linear = 8.0f, c.head_dim = 16, c.tied = true, c.rms_eps = 1e-6f;
    c.embd_std = 0.18f;
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 20;
    out.push_back({"gemma3_local_global", c, 1e-4f});
  }
  {  // Phi-3: fused QKV and gate/up, sliding window 6 on every layer, untied, f16.
    TinyModelConfig c;
    c.arch = "phi3", c.fused_qkv = true, c.fused_gate_up = true, c.sliding_window = 6, c.wtype = tensor::DType::f16;
    c.seed = 21;
    out.push_back({"phi3_fused_f16", c, 1e-3f});
  }
  {  // SmolLM3: llama layout with every 4th layer RoPE-free (5 layers: layer 3), tied, GQA.
    TinyModelConfig c;
    c.arch = "smollm3", c.n_layer = 5, c.tied = true, c.n_head_kv = 1, c.rope_theta = 5e6f, c.rms_eps = 1e-6f;
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 23;
    out.push_back({"smollm3_nope", c, 1e-4f});
  }
  {  // ERNIE 4.5 dense (0.3B): the llama layout under its own name, tied, GQA 4/2, theta 5e5.
    TinyModelConfig c;
    c.arch = "ernie4_5", c.tied = true, c.rope_theta = 500000.0f, c.rms_eps = 1e-5f;
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 24;
    out.push_back({"ernie45_tied", c, 1e-4f});
  }
  {  // Granite 3.x: the llama layout with four scalars (embedding x6, residual x0.5, attention
     // scale 0.2 instead of 1/sqrt(8), logits / 4), tied, GQA 4/2.
    TinyModelConfig c;
    c.arch = "granite", c.tied = true, c.embedding_scale = 6.0f, c.residual_scale = 0.5f, c.attention_scale = 0.2f;
    c.logit_scale = 4.0f, c.embd_std = 0.15f, c.rope_theta = 1e7f, c.rms_eps = 1e-5f;
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 25;
    out.push_back({"granite_scales", c, 1e-4f});
  }
  {  // Phi-3.5 / Phi-4-mini: LongRoPE (training context 1024, original 256: the tests' 64 KV
     // cells take the short factors, ArchLongRope both), attention factor
     // sqrt(1 + ln(1024/256) / ln 256), BPE, sliding window 262144 (as
     // those files say: none in effect; llama.cpp-family loaders require the key).
    TinyModelConfig c;
    c.arch = "phi3", c.fused_qkv = true, c.fused_gate_up = true, c.n_embd = 64, c.n_ff = 96;  // head size 16
    c.n_ctx = 1024, c.sliding_window = 262144, c.rope_orig_ctx = 256;
    c.rope_attn_factor = std::sqrt(1.0f + std::log(4.0f) / std::log(256.0f));
    for (int i = 0; i < 8; ++i) {
      c.rope_factors_short.push_back(1.0f + 0.05f * static_cast<float>(i));
      c.rope_factors_long.push_back(1.0f + 1.5f * static_cast<float>(i));
    }
    c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2", c.seed = 22;
    out.push_back({"phi3_longrope", c, 1e-4f});
  }
  return out;
}

// The families beyond llama and qwen2 (the ones added with their own features).
inline std::vector<Family> newer_families() {
  std::vector<Family> out;
  for (const Family& f : families()) {
    if (f.cfg.arch != "llama" && f.cfg.arch != "qwen2") out.push_back(f);
  }
  return out;
}

}  // namespace treespec::test
