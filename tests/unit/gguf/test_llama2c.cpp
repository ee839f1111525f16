// llama2.c import: stories260K converted in memory and checked key by key and tensor by
// tensor against the .bin; corrupt checkpoints and tokenizers raise FormatError.
#include <gtest/gtest.h>

#include <cstring>

#include "common/test_util.h"
#include "gguf/gguf.h"
#include "gguf/llama2c.h"
#include "tensor/fp16.h"
#include "treespec/status.h"

using namespace treespec;
using gguf::GgufFile;

namespace {

struct Files {
  std::string model;
  std::string tok;
};

Files stories_files() {
  const std::string dir = test::shared_dir() + "/models/stories260K/";
  return {test::read_file(dir + "stories260K.bin"), test::read_file(dir + "tok512.bin")};
}

const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::unique_ptr<GgufFile> convert(const Files& f, gguf::Llama2cConvertOptions opts = {}) {
  const auto w =
      gguf::convert_llama2c(u8(f.model), f.model.size(), u8(f.tok), f.tok.size(), opts, "model.bin", "tok.bin");
  const auto bytes = w.to_bytes();
  return GgufFile::from_bytes(bytes.data(), bytes.size(), "stories.gguf");
}

template <typename Fn>
void expect_format_error(Fn fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no FormatError; expected one mentioning " << *needles.begin();
  } catch (const FormatError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

void set_i32(std::string& s, size_t off, int32_t v) { std::memcpy(s.data() + off, &v, 4); }

}  // namespace

TEST(Llama2c, HeaderOfStories260K) {
  TREESPEC_REQUIRE_SHARED();
  const Files f = stories_files();
  const auto c = gguf::parse_llama2c_header(u8(f.model), f.model.size(), "stories260K.bin");
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_size(), 8);
  EXPECT_EQ(c.kv_dim(), 32);
}

TEST(Llama2c, HparamsAndTokenizerKeys) {
  TREESPEC_REQUIRE_SHARED();
  gguf::Llama2cConvertOptions opts;
  opts.name = "stories260K";
  const auto g = convert(stories_files(), opts);
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->get_string("general.architecture"), "llama");
  EXPECT_EQ(g->get_string("general.name"), "stories260K");
  EXPECT_EQ(g->get_int("llama.context_length"), 512);
  EXPECT_EQ(g->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(g->get_int("llama.block_count"), 5);
  EXPECT_EQ(g->get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(g->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(g->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(g->get_int("llama.rope.dimension_count"), 8);
  EXPECT_EQ(g->get_int("llama.vocab_size"), 512);
  EXPECT_EQ(g->find("llama.rope.freq_base")->type(), gguf::ValueType::f32);
  EXPECT_DOUBLE_EQ(g->get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(g->find("llama.attention.layer_norm_rms_epsilon")->type(), gguf::ValueType::f32);
  EXPECT_FLOAT_EQ(static_cast<float>(g->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);

  EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "llama");
  const auto tokens = g->get_string_array("tokenizer.ggml.tokens");
  const auto scores = g->get_float_array("tokenizer.ggml.scores");
  const auto types = g->get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(scores.size(), 512u);
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[3 + 0x0A], "<0x0A>");
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[2], 3);
  for (int i = 3; i < 259; ++i) EXPECT_EQ(types[static_cast<size_t>(i)], 6) << i;
  int n_space = 0;
  for (int i = 259; i < 512; ++i) {
    EXPECT_EQ(types[static_cast<size_t>(i)], 1) << i;
    EXPECT_EQ(tokens[static_cast<size_t>(i)].find(' '), std::string::npos) << "space left in piece " << i;
    n_space += tokens[static_cast<size_t>(i)].rfind("\xe2\x96\x81", 0) == 0;
  }
  EXPECT_GT(n_space, 50);  // many pieces start with a (converted) space
  EXPECT_EQ(g->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(g->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(g->get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(g->get_int("tokenizer.ggml.eot_token_id"), 1);
  EXPECT_TRUE(g->get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_FALSE(g->get_bool("tokenizer.ggml.add_eos_token", true));

  // Scores come from the tokenizer file as stored: token i's score at its record.
  const std::string tok = stories_files().tok;
  float s300;
  size_t pos = 4;
  for (int i = 0; i < 300; ++i) {
    int32_t len;
    std::memcpy(&len, tok.data() + pos + 4, 4);
    pos += 8 + static_cast<size_t>(len);
  }
  std::memcpy(&s300, tok.data() + pos, 4);
  EXPECT_EQ(scores[300], s300);
}

TEST(Llama2c, TensorNamesShapesAndBytes) {
  TREESPEC_REQUIRE_SHARED();
  const Files f = stories_files();
  const auto g = convert(f);
  const int64_t dim = 64, hid = 172, V = 512, kv = 32, L = 5;
  ASSERT_EQ(g->tensors().size(), static_cast<size_t>(1 + 9 * L + 1));
  EXPECT_EQ(g->find_tensor("output.weight"), nullptr);  // tied classifier
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"token_embd.weight", {dim, V}},          {"output_norm.weight", {dim}},
      {"blk.0.attn_norm.weight", {dim}},        {"blk.0.attn_q.weight", {dim, dim}},
      {"blk.0.attn_k.weight", {dim, kv}},       {"blk.0.attn_v.weight", {dim, kv}},
      {"blk.0.attn_output.weight", {dim, dim}}, {"blk.0.ffn_norm.weight", {dim}},
      {"blk.4.ffn_gate.weight", {dim, hid}},    {"blk.4.ffn_down.weight", {hid, dim}},
      {"blk.4.ffn_up.weight", {dim, hid}},
  };
  for (const auto& [name, ne] : shapes) {
    const auto* t = g->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->ne, ne) << name;
    EXPECT_EQ(t->type, tensor::DType::f32) << name;
  }
  // Float offsets (in floats after the 28-byte header) of some arrays in the .bin.
  const int64_t o_embd = 0, o_rms_att = V * dim, o_wq = o_rms_att + L * dim;
  const int64_t o_wk = o_wq + L * dim * dim, o_wv = o_wk + L * kv * dim, o_wo = o_wv + L * kv * dim;
  const int64_t o_rms_ffn = o_wo + L * dim * dim, o_w1 = o_rms_ffn + L * dim, o_w2 = o_w1 + L * hid * dim;
  const int64_t o_w3 = o_w2 + L * dim * hid, o_final = o_w3 + L * hid * dim;
  auto same_bytes = [&](const std::string& name, int64_t float_offset) {
    const auto* t = g->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(std::memcmp(t->data, f.model.data() + 28 + 4 * float_offset, t->nbytes), 0) << name;
  };
  same_bytes("token_embd.weight", o_embd);
  same_bytes("blk.0.attn_norm.weight", o_rms_att);
  same_bytes("blk.3.attn_norm.weight", o_rms_att + 3 * dim);
  same_bytes("blk.2.attn_q.weight", o_wq + 2 * dim * dim);
  same_bytes("blk.1.attn_k.weight", o_wk + 1 * kv * dim);
  same_bytes("blk.4.attn_v.weight", o_wv + 4 * kv * dim);
  same_bytes("blk.0.attn_output.weight", o_wo);
  same_bytes("blk.2.ffn_norm.weight", o_rms_ffn + 2 * dim);
  same_bytes("blk.1.ffn_gate.weight", o_w1 + 1 * hid * dim);
  same_bytes("blk.3.ffn_down.weight", o_w2 + 3 * dim * hid);
  same_bytes("blk.4.ffn_up.weight", o_w3 + 4 * hid * dim);
  same_bytes("output_norm.weight", o_final);
  // The RoPE tables after rms_final are not copied: the last tensor data ends at rms_final.
  EXPECT_EQ(static_cast<size_t>(28 + 4 * (o_final + dim + 512 * 8)), f.model.size());
}

TEST(Llama2c, F16OptionKeepsNormsF32) {
  TREESPEC_REQUIRE_SHARED();
  const Files f = stories_files();
  gguf::Llama2cConvertOptions opts;
  opts.type = tensor::DType::f16;
  const auto g = convert(f, opts);
  EXPECT_EQ(g->get_int("general.file_type"), 1);
  const auto* q = g->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, tensor::DType::f16);
  EXPECT_EQ(q->nbytes, 64u * 64u * 2u);
  EXPECT_EQ(g->find_tensor("blk.0.attn_norm.weight")->type, tensor::DType::f32);
  // First element of wq, rounded to half.
  float w0;
  std::memcpy(&w0, f.model.data() + 28 + 4 * (512 * 64 + 5 * 64), 4);
  uint16_t h;
  std::memcpy(&h, q->data, 2);
  EXPECT_EQ(h, tensor::fp32_to_fp16(w0));
  opts.type = tensor::DType::q8_0;
  EXPECT_THROW(convert(f, opts), InvalidArgument);
}

TEST(Llama2c, UntiedClassifierIsWritten) {
  // A tiny synthetic checkpoint with negative vocab_size: the classifier follows the
  // RoPE tables and becomes output.weight.
  const int32_t dim = 8, hid = 16, L = 1, H = 2, KV = 1, V = 4, T = 3;
  std::string m(28, '\0');
  for (auto [i, v] :
       std::vector<std::pair<int, int32_t>>{{0, dim}, {1, hid}, {2, L}, {3, H}, {4, KV}, {5, -V}, {6, T}}) {
    set_i32(m, 4 * static_cast<size_t>(i), v);
  }
  const int64_t kvd = dim / H * KV;
  const int64_t n = V * dim + L * dim + 2 * L * dim * dim + 2 * L * kvd * dim + L * dim + 3 * L * hid * dim + dim +
                    T * (dim / H) + V * dim;
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(i);
    m.append(reinterpret_cast<const char*>(&x), 4);
  }
  std::string tok;
  auto put = [&](const void* p, size_t k) { tok.append(static_cast<const char*>(p), k); };
  const int32_t max_len = 8;
  put(&max_len, 4);
  for (const char* s : {"<unk>", "\n<s>\n", "\n</s>\n", " hi"}) {
    const float score = -1;
    const auto len = static_cast<int32_t>(std::strlen(s));
    put(&score, 4);
    put(&len, 4);
    put(s, static_cast<size_t>(len));
  }
  const auto g = convert({m, tok});
  const auto* out = g->find_tensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->ne, (std::vector<int64_t>{dim, V}));
  float first;
  std::memcpy(&first, out->data, 4);
  EXPECT_EQ(first, static_cast<float>(n - V * dim));
  EXPECT_EQ(g->get_string_array("tokenizer.ggml.tokens")[3], "\xe2\x96\x81hi");
}

TEST(Llama2c, CorruptCheckpoints) {
  TREESPEC_REQUIRE_SHARED();
  const Files f = stories_files();
  auto conv = [&](const std::string& model) {
    return [model, &f] {
      gguf::convert_llama2c(u8(model), model.size(), u8(f.tok), f.tok.size(), {}, "bad.bin", "tok.bin");
    };
  };
  std::string m = f.model;
  m.resize(m.size() - 4);  // truncated
  expect_format_error(conv(m), {"bad.bin", "1056536 bytes", "implies 1056540 bytes"});
  expect_format_error(conv(f.model.substr(0, 20)), {"bad.bin", "too small"});
  m = f.model + "xxxx";  // trailing bytes
  expect_format_error(conv(m), {"bad.bin", "implies"});
  m = f.model;
  set_i32(m, 12, 7);  // n_heads = 7 does not divide 64
  expect_format_error(conv(m), {"bad.bin", "n_heads = 7 does not divide dim = 64"});
  m = f.model;
  set_i32(m, 16, 3);  // n_kv_heads = 3 does not divide 8
  expect_format_error(conv(m), {"n_kv_heads = 3 does not divide n_heads = 8"});
  m = f.model;
  set_i32(m, 0, -64);
  expect_format_error(conv(m), {"dim = -64 must be positive"});
  m = f.model;
  set_i32(m, 8, 0);
  expect_format_error(conv(m), {"n_layers = 0 must be positive"});
  m = f.model;
  set_i32(m, 20, 0);
  expect_format_error(conv(m), {"vocab_size = 0"});
  m = f.model;
  set_i32(m, 0, 1 << 30);  // huge dims must not overflow the size computation
  set_i32(m, 4, 0x7fffffff);
  set_i32(m, 12, 1);
  set_i32(m, 16, 1);
  expect_format_error(conv(m), {"implies"});
  m = f.model;
  set_i32(m, 12, 64);  // head size 1: odd
  set_i32(m, 16, 64);
  expect_format_error(conv(m), {"head size 1"});
  m = f.model;
  set_i32(m, 20, -512);  // claims an untied classifier that is not there
  expect_format_error(conv(m), {"implies"});
  m = f.model;
  set_i32(m, 0, 0x616b3432);  // "ak42": a newer llama2.c export format
  EXPECT_THROW(conv(m)(), Unsupported);
}

TEST(Llama2c, CorruptTokenizers) {
  TREESPEC_REQUIRE_SHARED();
  const Files f = stories_files();
  auto conv = [&](const std::string& tok) {
    return [tok, &f] {
      gguf::convert_llama2c(u8(f.model), f.model.size(), u8(tok), tok.size(), {}, "model.bin", "badtok.bin");
    };
  };
  std::string t = f.tok.substr(0, f.tok.size() - 3);
  expect_format_error(conv(t), {"badtok.bin", "runs past the end"});
  t = f.tok.substr(0, 4 + (8 + 5) + (8 + 5) + (8 + 6));  // exactly <unk>, <s>, </s>
  expect_format_error(conv(t), {"badtok.bin", "ends after 3 tokens", "vocab_size is 512"});
  t = f.tok + std::string(9, '\0');  // a 513th token
  expect_format_error(conv(t), {"badtok.bin", "more tokens than the model's vocab_size 512"});
  t = f.tok;
  set_i32(t, 4 + 4, 1000);  // token 0 length > max_token_length
  expect_format_error(conv(t), {"token 0 has length 1000"});
  t = f.tok;
  set_i32(t, 4 + 4, -1);
  expect_format_error(conv(t), {"token 0 has length -1"});
  t = f.tok;
  set_i32(t, 0, 0);
  expect_format_error(conv(t), {"max_token_length = 0"});
  t = f.tok;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(t.data() + 4, &nan, 4);
  expect_format_error(conv(t), {"non-finite score"});
  expect_format_error(conv(""), {"too small"});
}

TEST(Llama2c, ConvertFiles) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/models/stories260K/";
  const std::string out = test::temp_dir() + "/s.gguf";
  gguf::Llama2cConvertOptions opts;
  opts.name = "s";
  const auto s = gguf::convert_llama2c_files(dir + "stories260K.bin", dir + "tok512.bin", out, opts);
  EXPECT_EQ(s.n_tensors, 47u);
  EXPECT_EQ(s.n_params, 260032);
  const auto g = GgufFile::open(out);
  EXPECT_EQ(g->get_string("general.name"), "s");
  int64_t total = 0;
  for (const auto& t : g->tensors()) total += t.n_elements();
  EXPECT_EQ(total, s.n_params);
  EXPECT_THROW(gguf::convert_llama2c_files(dir + "missing.bin", dir + "tok512.bin", out, opts), IoError);
}
