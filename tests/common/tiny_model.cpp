#include "tiny_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/rng.h"
#include "gguf/gguf.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"
#include "tokenizer/bpe_pretok.h"
#include "tokenizer/unicode.h"

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
  } else if (tensor::quant_supported(t)) {
    // Q4_0 and the K-quants: our quantiser, rows laid end to end (every matrix's row
    // length is a multiple of the block, so this equals quantising row by row).
    const auto n = static_cast<int64_t>(v.size());
    if (n % tensor::dtype_traits(t).block_size != 0)
      throw std::runtime_error("tiny_model: size not a multiple of the block");
    out.resize(static_cast<size_t>(tensor::row_bytes(t, n)));
    tensor::quantize_row(t, v.data(), out.data(), n);
  } else {
    throw std::runtime_error("tiny_model: unsupported weight type");
  }
  return out;
}

// Minimal SPM vocabulary: <unk>, <s>, </s>, then placeholder pieces.
void write_spm_vocab(gguf::GgufWriter& w, const TinyModelConfig& c) {
  using gguf::Value;
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
}

constexpr const char* kCorpus =
    "Once upon a time there was a little girl named Lily. She liked to play in the park with her friends. "
    "One day the sun was shining and the birds were singing in the trees. Hello world! How are you today? "
    "I'm fine, thank you. The quick brown fox jumps over the lazy dog. There were three little cats and "
    "they wanted to go to the store. In 2024 the numbers 1234 and 5678 were written on the wall.\n";

// Gemma-style SentencePiece vocabulary (as llama.cpp's converter writes Gemma 2/3):
// <pad> <eos> <bos> <unk>, <start_of_turn> <end_of_turn> (control), the 256 byte-fallback
// pieces <0xNN>, newline and space runs, then every substring of the corpus words (with
// and without the leading U+2581) as normal pieces, shorter ones scored higher; padded
// with <unusedN>; add_space_prefix false.
void write_gemma_vocab(gguf::GgufWriter& w, const TinyModelConfig& c) {
  using gguf::Value;
  const std::string sp = "\xe2\x96\x81";  // U+2581
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
  std::vector<int32_t> types = {3, 3, 3, 2, 3, 3};
  for (int b = 0; b < 256; ++b) tokens.push_back(fmt::format("<0x{:02X}>", b)), types.push_back(6);
  std::set<std::string> have(tokens.begin(), tokens.end());
  std::vector<std::pair<size_t, std::string>> pieces;  // (length, piece), corpus order
  auto add = [&](const std::string& piece) {
    if (have.insert(piece).second) pieces.emplace_back(piece.size(), piece);
  };
  for (const char* ws : {"\n", "\n\n", "\t"}) add(ws);
  add(sp);
  add(sp + sp);
  std::string word;
  auto flush = [&] {
    for (const std::string& wd : {word, sp + word}) {
      // substrings on UTF-8 character boundaries
      std::vector<size_t> cuts;
      for (size_t i = 0; i < wd.size(); ++i) {
        if ((static_cast<uint8_t>(wd[i]) & 0xC0) != 0x80) cuts.push_back(i);
      }
      cuts.push_back(wd.size());
      for (size_t a = 0; a + 1 < cuts.size(); ++a) {
        for (size_t b = a + 1; b < cuts.size(); ++b) add(wd.substr(cuts[a], cuts[b] - cuts[a]));
      }
    }
    word.clear();
  };
  for (const char* p = kCorpus; *p; ++p) {
    if (*p == ' ' || *p == '\n') {
      if (!word.empty()) flush();
    } else {
      word += *p;
    }
  }
  if (!word.empty()) flush();
  std::stable_sort(pieces.begin(), pieces.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<float> scores(tokens.size(), 0.0f);
  for (const auto& [len, piece] : pieces) {
    if (static_cast<int32_t>(tokens.size()) >= c.n_vocab) break;
    scores.push_back(-static_cast<float>(tokens.size()));
    tokens.push_back(piece);
    types.push_back(1);
  }
  while (static_cast<int32_t>(tokens.size()) < c.n_vocab) {
    tokens.push_back(fmt::format("<unused{}>", tokens.size()));
    types.push_back(5);
    scores.push_back(0.0f);
  }
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.pre", Value::string("default"));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.scores", Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(2));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.unknown_token_id", Value::u32(3));
  w.set("tokenizer.ggml.padding_token_id", Value::u32(0));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));
  w.set("tokenizer.ggml.add_space_prefix", Value::boolean(false));
}

// Byte-level BPE vocabulary: 256 byte characters, 3 specials, learned merges.
void write_bpe_vocab(gguf::GgufWriter& w, const TinyModelConfig& c) {
  using gguf::Value;
  const bool llama3 = c.bpe_pre == "llama-bpe";
  if (c.n_vocab < 300) throw std::runtime_error("tiny_model: a BPE vocabulary needs n_vocab >= 300");
  std::vector<std::string> tokens(tokenizer::unicode::byte_to_unicode().begin(),
                                  tokenizer::unicode::byte_to_unicode().end());
  std::vector<int32_t> types(256, 1);
  const int32_t first_special = 256;
  const std::vector<std::string> specials =
      llama3 ? std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}
             : std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (const std::string& sp : specials) {
    tokens.push_back(sp);
    types.push_back(3);
  }
  // Learn merges: words of the corpus as symbol lists; repeatedly merge the most frequent
  // adjacent pair (ties: smallest pair text), as BPE training does.
  std::vector<std::string_view> raw;
  tokenizer::pre_tokenize(tokenizer::pre_tokenizer_from_name(c.bpe_pre), kCorpus, raw);
  std::vector<std::vector<std::string>> words;
  for (std::string_view wd : raw) {
    std::vector<std::string> syms;
    for (char ch : wd) syms.push_back(tokenizer::unicode::byte_to_unicode()[static_cast<uint8_t>(ch)]);
    words.push_back(std::move(syms));
  }
  std::vector<std::string> merges;
  std::set<std::string> have(tokens.begin(), tokens.end());
  while (static_cast<int32_t>(tokens.size()) < c.n_vocab) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& syms : words) {
      for (size_t i = 1; i < syms.size(); ++i) ++counts[{syms[i - 1], syms[i]}];
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_n = 0;
    for (const auto& [pair, n] : counts) {
      if (n > best_n && have.count(pair.first + pair.second) == 0) best = &pair, best_n = n;
    }
    if (!best) {  // corpus exhausted: fill with unused control tokens
      tokens.push_back(fmt::format("<|reserved_{}|>", tokens.size()));
      types.push_back(3);
      continue;
    }
    const auto [a, b] = *best;
    merges.push_back(a + " " + b);
    tokens.push_back(a + b);
    types.push_back(1);
    have.insert(a + b);
    for (auto& syms : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms = std::move(out);
    }
  }
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string(c.bpe_pre));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.merges", Value::string_array(merges));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(first_special));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(llama3 ? first_special + 1 : first_special));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(llama3));
}

}  // namespace

std::vector<float> llama3_rope_factors(int32_t n_rot, float theta, float factor, float low_freq_factor,
                                       float high_freq_factor, float original_context) {
  const double low_wavelen = original_context / low_freq_factor;
  const double high_wavelen = original_context / high_freq_factor;
  std::vector<float> out;
  for (int32_t i = 0; i < n_rot; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(theta), static_cast<double>(i) / n_rot);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

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
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(c.rms_eps));
  if (c.head_dim > 0) {
    w.set(a + "attention.key_length", Value::u32(static_cast<uint32_t>(c.head_dim)));
    w.set(a + "attention.value_length", Value::u32(static_cast<uint32_t>(c.head_dim)));
  }
  if (c.n_rot > 0) w.set(a + "rope.dimension_count", Value::u32(static_cast<uint32_t>(c.n_rot)));
  if (c.rope_scale_linear > 0.0f) {
    w.set(a + "rope.scaling.type", Value::string("linear"));
    w.set(a + "rope.scaling.factor", Value::f32(c.rope_scale_linear));
  }
  if (c.rope_orig_ctx > 0) {
    w.set(a + "rope.scaling.original_context_length", Value::u32(static_cast<uint32_t>(c.rope_orig_ctx)));
  }
  if (c.rope_attn_factor > 0.0f) w.set(a + "rope.scaling.attn_factor", Value::f32(c.rope_attn_factor));
  if (c.write_vocab_size) w.set(a + "vocab_size", Value::u32(static_cast<uint32_t>(c.n_vocab)));
  if (c.attn_softcap > 0.0f) w.set(a + "attn_logit_softcapping", Value::f32(c.attn_softcap));
  if (c.final_softcap > 0.0f) w.set(a + "final_logit_softcapping", Value::f32(c.final_softcap));
  if (c.embedding_scale > 0.0f) w.set(a + "embedding_scale", Value::f32(c.embedding_scale));
  if (c.residual_scale > 0.0f) w.set(a + "residual_scale", Value::f32(c.residual_scale));
  if (c.attention_scale > 0.0f) w.set(a + "attention.scale", Value::f32(c.attention_scale));
  if (c.logit_scale > 0.0f) w.set(a + "logit_scale", Value::f32(c.logit_scale));
  if (c.sliding_window > 0) w.set(a + "attention.sliding_window", Value::u32(static_cast<uint32_t>(c.sliding_window)));
  if (c.tokenizer == "gpt2") {
    write_bpe_vocab(w, c);
  } else if (c.tokenizer == "gemma") {
    write_gemma_vocab(w, c);
  } else {
    write_spm_vocab(w, c);
  }

  auto randn = [&](size_t n, float stddev) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.normal()) * stddev;
    return v;
  };
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out) {
    const auto v =
        randn(static_cast<size_t>(n_in * n_out), c.weight_scale * 3.0f / std::sqrt(static_cast<float>(n_in)));
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
  const int64_t hd = c.head_dim > 0 ? c.head_dim : c.n_embd / c.n_head;
  {
    const auto v = randn(static_cast<size_t>(c.n_embd) * c.n_vocab, c.embd_std);
    const auto bytes = encode(v, c.wtype);
    w.add_tensor("token_embd.weight", c.wtype, {c.n_embd, c.n_vocab}, bytes.data(), bytes.size());
  }
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const std::string p = fmt::format("blk.{}.", il);
    norm(p + "attn_norm.weight", c.n_embd);
    if (c.fused_qkv) {
      matrix(p + "attn_qkv.weight", c.n_embd, (c.n_head + 2 * c.n_head_kv) * hd);
    } else {
      matrix(p + "attn_q.weight", c.n_embd, c.n_head * hd);
      matrix(p + "attn_k.weight", c.n_embd, c.n_head_kv * hd);
      matrix(p + "attn_v.weight", c.n_embd, c.n_head_kv * hd);
    }
    if (c.qk_norm) {
      norm(p + "attn_q_norm.weight", hd);
      norm(p + "attn_k_norm.weight", hd);
    }
    if (c.qkv_bias) {
      bias(p + "attn_q.bias", c.n_head * hd);
      bias(p + "attn_k.bias", c.n_head_kv * hd);
      bias(p + "attn_v.bias", c.n_head_kv * hd);
    }
    matrix(p + "attn_output.weight", c.n_head * hd, c.n_embd);
    if (c.post_norms) norm(p + "post_attention_norm.weight", c.n_embd);
    norm(p + "ffn_norm.weight", c.n_embd);
    if (c.fused_gate_up) {
      matrix(p + "ffn_up.weight", c.n_embd, 2 * c.n_ff);
    } else {
      matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
      matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    }
    matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    if (c.post_norms) norm(p + "post_ffw_norm.weight", c.n_embd);
  }
  norm("output_norm.weight", c.n_embd);
  if (!c.tied) matrix("output.weight", c.n_embd, c.n_vocab);
  auto factors = [&](const char* name, const std::vector<float>& v) {
    if (!v.empty()) w.add_tensor(name, tensor::DType::f32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * 4);
  };
  factors("rope_freqs.weight", c.rope_freqs);
  factors("rope_factors_long.weight", c.rope_factors_long);
  factors("rope_factors_short.weight", c.rope_factors_short);
  if (c.customize) c.customize(w);
  w.write(path);
}

std::vector<int32_t> random_tokens(core::Rng& rng, int32_t n, int32_t V) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  return t;
}

}  // namespace treespec::test
