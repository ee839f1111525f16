// llama2.c checkpoint + tokenizer -> llama GGUF. See llama2c.h and docs/gguf.md.
#include "gguf/llama2c.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "gguf/byte_piece.h"
#include "tensor/fp16.h"
#include "treespec/status.h"

namespace treespec::gguf {

namespace {

constexpr uint32_t kLlama2cMagic = 0x616b3432u;  // "ak42": newer llama2.c export formats
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kUnkId = 0;

// Token types as GGUF / llama.cpp number them.
constexpr int32_t kTypeNormal = 1;
constexpr int32_t kTypeUnknown = 2;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeByte = 6;

int32_t read_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// llama2.c writes spaces as ' '; SentencePiece GGUF vocabs use U+2581.
std::string to_spm_piece(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == ' ') out += "\xe2\x96\x81";
    else out += c;
  }
  return out;
}

// llama2.c's export writes BOS/EOS as "\n<s>\n" / "\n</s>\n" so its own printer shows
// them on lines of their own; GGUF vocabs spell them "<s>" / "</s>".
std::string trim_newlines(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && s[b] == '\n') ++b;
  while (e > b && s[e - 1] == '\n') --e;
  return s.substr(b, e - b);
}

std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw IoError(fmt::format("{}: read failed", path));
  return data;
}

}  // namespace

Llama2cConfig parse_llama2c_header(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 28) {
    throw FormatError(fmt::format("{}: {} bytes is too small for a llama2.c checkpoint header (28 bytes)", name, size));
  }
  uint32_t magic;
  std::memcpy(&magic, data, 4);
  if (magic == kLlama2cMagic) {
    throw Unsupported(
        fmt::format("{}: llama2.c export version {} (magic \"ak42\") is not supported; "
                    "export with the legacy format (version 0)",
                    name, read_i32(data + 4)));
  }
  Llama2cConfig c;
  c.dim = read_i32(data + 0);
  c.hidden_dim = read_i32(data + 4);
  c.n_layers = read_i32(data + 8);
  c.n_heads = read_i32(data + 12);
  c.n_kv_heads = read_i32(data + 16);
  const int32_t vocab_raw = read_i32(data + 20);
  c.seq_len = read_i32(data + 24);
  const std::pair<const char*, int32_t> fields[] = {
      {"dim", c.dim},         {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
      {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"seq_len", c.seq_len}};
  for (const auto& [field, v] : fields) {
    if (v <= 0) throw FormatError(fmt::format("{}: header field {} = {} must be positive", name, field, v));
  }
  if (vocab_raw == 0 || vocab_raw == INT32_MIN) {
    throw FormatError(fmt::format("{}: header field vocab_size = {} is invalid", name, vocab_raw));
  }
  c.shared_classifier = vocab_raw > 0;
  c.vocab_size = vocab_raw > 0 ? vocab_raw : -vocab_raw;
  if (c.dim % c.n_heads != 0) {
    throw FormatError(fmt::format("{}: n_heads = {} does not divide dim = {}", name, c.n_heads, c.dim));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    throw FormatError(fmt::format("{}: n_kv_heads = {} does not divide n_heads = {}", name, c.n_kv_heads, c.n_heads));
  }
  if (c.head_size() % 2 != 0) {
    throw FormatError(fmt::format("{}: head size {} (dim / n_heads) must be even for RoPE", name, c.head_size()));
  }
  // Expected float count; 128-bit so no header can overflow it.
  using u128 = unsigned __int128;
  const u128 dim = static_cast<u128>(c.dim), hid = static_cast<u128>(c.hidden_dim);
  const u128 L = static_cast<u128>(c.n_layers), V = static_cast<u128>(c.vocab_size);
  const u128 kv = static_cast<u128>(c.kv_dim());
  u128 floats = V * dim                                                             // token embedding
                + L * dim                                                           // rms_att
                + L * dim * dim * 2                                                 // wq, wo
                + L * kv * dim * 2                                                  // wk, wv
                + L * dim                                                           // rms_ffn
                + L * hid * dim * 3                                                 // w1, w2, w3
                + dim                                                               // rms_final
                + static_cast<u128>(c.seq_len) * static_cast<u128>(c.head_size());  // 2 RoPE tables of half size
  if (!c.shared_classifier) floats += V * dim;
  const u128 expect = 28 + floats * 4;
  if (expect != static_cast<u128>(size)) {
    const bool huge = expect > static_cast<u128>(UINT64_MAX);
    throw FormatError(fmt::format(
        "{}: file is {} bytes but the header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, "
        "vocab_size {}, seq_len {}) implies {} bytes",
        name, size, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab_raw, c.seq_len,
        huge ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(expect))));
  }
  return c;
}

std::vector<Llama2cToken> parse_llama2c_tokenizer(const uint8_t* data, size_t size, int32_t n_vocab,
                                                  const std::string& name) {
  if (size < 4) throw FormatError(fmt::format("{}: {} bytes is too small for a llama2.c tokenizer", name, size));
  const int32_t max_len = read_i32(data);
  if (max_len <= 0) throw FormatError(fmt::format("{}: max_token_length = {} must be positive", name, max_len));
  std::vector<Llama2cToken> out;
  // n_vocab is checked against the bytes as we go; reserve only what the file could hold.
  out.reserve(std::min<size_t>(static_cast<size_t>(n_vocab), (size - 4) / 8));
  size_t pos = 4;
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (size - pos < 8) {
      throw FormatError(fmt::format("{}: ends after {} tokens (at byte offset {}), but the model's vocab_size is {}",
                                    name, i, pos, n_vocab));
    }
    Llama2cToken t;
    std::memcpy(&t.score, data + pos, 4);
    const int32_t len = read_i32(data + pos + 4);
    if (!std::isfinite(t.score)) {
      throw FormatError(fmt::format("{}: token {} has a non-finite score (at byte offset {})", name, i, pos));
    }
    if (len < 0 || len > max_len) {
      throw FormatError(fmt::format("{}: token {} has length {} outside 0..max_token_length {} (at byte offset {})",
                                    name, i, len, max_len, pos + 4));
    }
    pos += 8;
    if (static_cast<size_t>(len) > size - pos) {
      throw FormatError(
          fmt::format("{}: token {} (length {}) runs past the end of the file (at byte offset {})", name, i, len, pos));
    }
    t.text.assign(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    out.push_back(std::move(t));
  }
  if (pos != size) {
    throw FormatError(
        fmt::format("{}: {} bytes left after {} tokens: the tokenizer has more tokens than the model's "
                    "vocab_size {}",
                    name, size - pos, n_vocab, n_vocab));
  }
  return out;
}

namespace {

// general.* and llama.* hyperparameters of a converted checkpoint.
void set_llama2c_hparams(GgufWriter& w, const Llama2cConfig& c, const Llama2cConvertOptions& opts) {
  w.set("general.architecture", Value::string("llama"));
  w.set("general.name", Value::string(opts.name));
  w.set("general.file_type", Value::u32(opts.type == tensor::DType::f16 ? 1 : 0));  // LLAMA_FTYPE_ALL_F32 / MOSTLY_F16
  w.set("llama.context_length", Value::u32(static_cast<uint32_t>(c.seq_len)));
  w.set("llama.embedding_length", Value::u32(static_cast<uint32_t>(c.dim)));
  w.set("llama.block_count", Value::u32(static_cast<uint32_t>(c.n_layers)));
  w.set("llama.feed_forward_length", Value::u32(static_cast<uint32_t>(c.hidden_dim)));
  w.set("llama.attention.head_count", Value::u32(static_cast<uint32_t>(c.n_heads)));
  w.set("llama.attention.head_count_kv", Value::u32(static_cast<uint32_t>(c.n_kv_heads)));
  w.set("llama.rope.freq_base", Value::f32(10000.0f));
  w.set("llama.attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  w.set("llama.rope.dimension_count", Value::u32(static_cast<uint32_t>(c.head_size())));
  w.set("llama.vocab_size", Value::u32(static_cast<uint32_t>(c.vocab_size)));
}

// tokenizer.ggml.*: the llama2.c vocabulary as a SentencePiece ("llama") GGUF vocabulary.
void set_llama2c_vocab(GgufWriter& w, const std::vector<Llama2cToken>& tokens) {
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  texts.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    std::string text = tokens[i].text;
    int32_t type = kTypeNormal;
    if (id == kUnkId) {
      type = kTypeUnknown;
    } else if (id == kBosId || id == kEosId) {
      type = kTypeControl;
      text = trim_newlines(text);
    } else if (parse_byte_piece(text) >= 0) {
      type = kTypeByte;
    } else {
      text = to_spm_piece(text);
    }
    texts.push_back(std::move(text));
    scores.push_back(tokens[i].score);
    types.push_back(type);
  }
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.tokens", Value::string_array(texts));
  w.set("tokenizer.ggml.scores", Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(kBosId));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(kEosId));
  w.set("tokenizer.ggml.unknown_token_id", Value::u32(kUnkId));
  // llama2.c models end a story with BOS and the reference run loop stops there; EOT is
  // an end-of-generation token for both llama.cpp and treespec.
  w.set("tokenizer.ggml.eot_token_id", Value::u32(kBosId));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));
  w.set("tokenizer.ggml.add_space_prefix", Value::boolean(true));
}

// Adds fp32 payload tensors to a writer; matrices become f16 when the conversion asks.
class Llama2cTensorAdder {
 public:
  Llama2cTensorAdder(GgufWriter& w, tensor::DType type) : w_(w), type_(type) {}
  // A row-major [rows, cols] matrix is GGML ne {cols, rows}; vectors are ne {n}.
  void add(const std::string& tname, std::vector<int64_t> ne, const uint8_t* src, bool matrix) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    if (matrix && type_ == tensor::DType::f16) {
      half_.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        half_[static_cast<size_t>(i)] = tensor::fp32_to_fp16(f);
      }
      w_.add_tensor(tname, tensor::DType::f16, std::move(ne), half_.data(), static_cast<size_t>(n) * 2);
    } else {
      w_.add_tensor(tname, tensor::DType::f32, std::move(ne), src, static_cast<size_t>(n) * 4);
    }
  }

 private:
  GgufWriter& w_;
  tensor::DType type_;
  std::vector<uint16_t> half_;
};

// The weights, in file order: `payload` is the fp32 data after the 28-byte header.
void add_llama2c_weights(GgufWriter& w, const Llama2cConfig& c, const uint8_t* payload, tensor::DType type) {
  const uint8_t* p = payload;
  const int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, V = c.vocab_size, kv = c.kv_dim();
  const uint8_t* tok_embd = p;
  p += V * dim * 4;
  const uint8_t* rms_att = p;
  p += L * dim * 4;
  const uint8_t* wq = p;
  p += L * dim * dim * 4;
  const uint8_t* wk = p;
  p += L * kv * dim * 4;
  const uint8_t* wv = p;
  p += L * kv * dim * 4;
  const uint8_t* wo = p;
  p += L * dim * dim * 4;
  const uint8_t* rms_ffn = p;
  p += L * dim * 4;
  const uint8_t* w1 = p;
  p += L * hid * dim * 4;
  const uint8_t* w2 = p;
  p += L * dim * hid * 4;
  const uint8_t* w3 = p;
  p += L * hid * dim * 4;
  const uint8_t* rms_final = p;
  p += dim * 4;
  p += static_cast<int64_t>(c.seq_len) * c.head_size() * 4;  // freq_cis_real + freq_cis_imag, unused
  const uint8_t* wcls = c.shared_classifier ? nullptr : p;

  Llama2cTensorAdder t(w, type);
  t.add("token_embd.weight", {dim, V}, tok_embd, true);
  for (int64_t il = 0; il < L; ++il) {
    const std::string b = fmt::format("blk.{}.", il);
    t.add(b + "attn_norm.weight", {dim}, rms_att + il * dim * 4, false);
    t.add(b + "attn_q.weight", {dim, dim}, wq + il * dim * dim * 4, true);
    t.add(b + "attn_k.weight", {dim, kv}, wk + il * kv * dim * 4, true);
    t.add(b + "attn_v.weight", {dim, kv}, wv + il * kv * dim * 4, true);
    t.add(b + "attn_output.weight", {dim, dim}, wo + il * dim * dim * 4, true);
    t.add(b + "ffn_norm.weight", {dim}, rms_ffn + il * dim * 4, false);
    t.add(b + "ffn_gate.weight", {dim, hid}, w1 + il * hid * dim * 4, true);
    t.add(b + "ffn_down.weight", {hid, dim}, w2 + il * dim * hid * 4, true);
    t.add(b + "ffn_up.weight", {dim, hid}, w3 + il * hid * dim * 4, true);
  }
  t.add("output_norm.weight", {dim}, rms_final, false);
  if (wcls) t.add("output.weight", {dim, V}, wcls, true);
}

}  // namespace

GgufWriter convert_llama2c(const uint8_t* model, size_t model_size, const uint8_t* tok, size_t tok_size,
                           const Llama2cConvertOptions& opts, const std::string& model_name,
                           const std::string& tok_name) {
  if (opts.type != tensor::DType::f32 && opts.type != tensor::DType::f16) {
    throw InvalidArgument(fmt::format("llama2.c conversion writes f32 or f16, not {}", tensor::dtype_name(opts.type)));
  }
  const Llama2cConfig c = parse_llama2c_header(model, model_size, model_name);
  const auto tokens = parse_llama2c_tokenizer(tok, tok_size, c.vocab_size, tok_name);
  if (c.vocab_size <= std::max({kUnkId, kBosId, kEosId})) {
    throw FormatError(
        fmt::format("{}: vocab_size {} is too small to hold <unk>, <s> and </s>", model_name, c.vocab_size));
  }
  GgufWriter w(3);
  set_llama2c_hparams(w, c, opts);
  set_llama2c_vocab(w, tokens);
  add_llama2c_weights(w, c, model + 28, opts.type);
  return w;
}

Llama2cConvertSummary convert_llama2c_files(const std::string& model_path, const std::string& tok_path,
                                            const std::string& out_path, const Llama2cConvertOptions& opts) {
  const auto model = read_whole_file(model_path);
  const auto tok = read_whole_file(tok_path);
  const GgufWriter w = convert_llama2c(model.data(), model.size(), tok.data(), tok.size(), opts, model_path, tok_path);
  w.write(out_path);
  Llama2cConvertSummary s;
  s.config = parse_llama2c_header(model.data(), model.size(), model_path);
  s.n_tensors = w.n_tensors();
  s.n_params =
      static_cast<int64_t>((model.size() - 28) / 4) - static_cast<int64_t>(s.config.seq_len) * s.config.head_size();
  return s;
}

}  // namespace treespec::gguf
