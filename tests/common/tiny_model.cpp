#include "tiny_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "gguf/gguf.h"
#include "tensor/fp16.h"

namespace treespec::test {

namespace {

std::vector<uint8_t> encode(const std::vector<float>& v, tensor::DType t) {
  std::vector<uint8_t> out;
  if (t == tensor::DType::f32) {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (t == tensor::DType::f16 || t == tensor::DType::bf16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = t == tensor::DType::f16 ? tensor::fp32_to_fp16(v[i]) : tensor::fp32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (t == tensor::DType::q8_0) {
    for (size_t b = 0; b < v.size(); b += 32) {
      float amax = 0.0f;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b + j]));
      const float d = amax / 127.0f;
      const uint16_t dh = tensor::fp32_to_fp16(d);
      const float dq = tensor::fp16_to_fp32(dh);
      uint8_t blk[34];
      std::memcpy(blk, &dh, 2);
      for (size_t j = 0; j < 32; ++j) {
        const float q = dq > 0.0f ? std::round(v[b + j] / dq) : 0.0f;
        blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, q))));
      }
      out.insert(out.end(), blk, blk + 34);
    }
  } else {
    throw std::runtime_error("tiny_model: unsupported weight type");
  }
  return out;
}

}  // namespace

void write_tiny_model(const std::string& path, const TinyModelConfig& c) {
  using gguf::Value;
  core::Rng rng(c.seed);
  gguf::GgufWriter w;
  const std::string a = c.arch + ".";
  w.set("general.architecture", Value::string(c.arch));
  w.set("general.name", Value::string("tiny-random"));
  w.set(a + "context_length", Value::u32(static_cast<uint32_t>(c.n_ctx)));
  w.set(a + "embedding_length", Value::u32(static_cast<uint32_t>(c.n_embd)));
  w.set(a + "block_count", Value::u32(static_cast<uint32_t>(c.n_layer)));
  w.set(a + "feed_forward_length", Value::u32(static_cast<uint32_t>(c.n_ff)));
  w.set(a + "attention.head_count", Value::u32(static_cast<uint32_t>(c.n_head)));
  w.set(a + "attention.head_count_kv", Value::u32(static_cast<uint32_t>(c.n_head_kv)));
  w.set(a + "rope.freq_base", Value::f32(c.rope_theta));
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  // Minimal vocabulary: <unk>, <s>, </s>, then single letters/pieces.
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int32_t i = 0; i < c.n_vocab; ++i) {
    if (i == 0) tokens.push_back("<unk>"), types.push_back(2);
    else if (i == 1) tokens.push_back("<s>"), types.push_back(3);
    else if (i == 2) tokens.push_back("</s>"), types.push_back(3);
    else tokens.push_back(fmt::format("t{}", i)), types.push_back(1);
    scores.push_back(-static_cast<float>(i));
  }
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.scores", Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(c.eos_id)));

  auto randn = [&](size_t n, float stddev) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.normal()) * stddev;
    return v;
  };
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out) {
    const auto v = randn(static_cast<size_t>(n_in * n_out), c.weight_scale * 3.0f / std::sqrt(static_cast<float>(n_in)));
    const auto bytes = encode(v, c.wtype);
    w.add_tensor(name, c.wtype, {n_in, n_out}, bytes.data(), bytes.size());
  };
  auto norm = [&](const std::string& name, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = 1.0f + 0.2f * static_cast<float>(rng.normal());
    w.add_tensor(name, tensor::DType::f32, {n}, v.data(), v.size() * 4);
  };
  auto bias = [&](const std::string& name, int64_t n) {
    const auto v = randn(static_cast<size_t>(n), 0.1f);
    w.add_tensor(name, tensor::DType::f32, {n}, v.data(), v.size() * 4);
  };
  const int64_t hd = c.n_embd / c.n_head;
  {
    const auto v = randn(static_cast<size_t>(c.n_embd) * c.n_vocab, 1.0f);
    const auto bytes = encode(v, c.wtype);
    w.add_tensor("token_embd.weight", c.wtype, {c.n_embd, c.n_vocab}, bytes.data(), bytes.size());
  }
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const std::string p = fmt::format("blk.{}.", il);
    norm(p + "attn_norm.weight", c.n_embd);
    matrix(p + "attn_q.weight", c.n_embd, c.n_head * hd);
    matrix(p + "attn_k.weight", c.n_embd, c.n_head_kv * hd);
    matrix(p + "attn_v.weight", c.n_embd, c.n_head_kv * hd);
    if (c.qkv_bias) {
      bias(p + "attn_q.bias", c.n_head * hd);
      bias(p + "attn_k.bias", c.n_head_kv * hd);
      bias(p + "attn_v.bias", c.n_head_kv * hd);
    }
    matrix(p + "attn_output.weight", c.n_head * hd, c.n_embd);
    norm(p + "ffn_norm.weight", c.n_embd);
    matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
  }
  norm("output_norm.weight", c.n_embd);
  if (!c.tied) matrix("output.weight", c.n_embd, c.n_vocab);
  w.write(path);
}

}  // namespace treespec::test
