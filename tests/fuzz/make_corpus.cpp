// Writes small seed inputs for each fuzz target into DIR/<target>/:
//   gguf: a tiny llama model and a vocab-only file made by our writer;
//   llama2c: a synthetic checkpoint + tokenizer in the fuzzer's framing;
//   tokenizer: a few texts (ASCII, UTF-8, invalid UTF-8, special-token text);
//   tree: a few (token, parent) arrays (valid and invalid).
// Usage: make_fuzz_corpus DIR
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace {

void write(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void put(std::vector<uint8_t>& v, T x) {
  const auto* b = reinterpret_cast<const uint8_t*>(&x);
  v.insert(v.end(), b, b + sizeof x);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace treespec;
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_corpus DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  {  // gguf: tiny model (dims 8, vocab 4, 1 layer) and a vocab-only file
    gguf::GgufWriter w;
    w.set("general.architecture", gguf::Value::string("llama"));
    w.set("llama.embedding_length", gguf::Value::u32(8));
    w.set("llama.block_count", gguf::Value::u32(1));
    w.set("llama.feed_forward_length", gguf::Value::u32(8));
    w.set("llama.attention.head_count", gguf::Value::u32(2));
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"<unk>", "<s>", "</s>", "a"}));
    w.set("nested", gguf::Value::array(gguf::ValueType::array, {gguf::Value::i32_array({1, 2}), gguf::Value::i32_array({})}));
    std::vector<float> v(64, 0.5f);
    w.add_tensor("token_embd.weight", tensor::DType::f32, {8, 4}, v.data(), 8 * 4 * 4);
    w.add_tensor("blk.0.attn_q.weight", tensor::DType::f32, {8, 8}, v.data(), 64 * 4);
    w.add_tensor("output_norm.weight", tensor::DType::f32, {8}, v.data(), 8 * 4);
    write(dir / "gguf" / "tiny_model.gguf", w.to_bytes());
    gguf::GgufWriter voc(2);
    voc.set("tokenizer.ggml.model", gguf::Value::string("llama"));
    voc.set("tokenizer.ggml.scores", gguf::Value::f32_array({0.0f, -1.0f}));
    voc.set("flag", gguf::Value::boolean(true));
    voc.set("f64", gguf::Value::f64(1.5));
    write(dir / "gguf" / "vocab_v2.gguf", voc.to_bytes());
  }
  {  // llama2c: dim 8, hidden 8, 1 layer, 2 heads, 2 kv heads, vocab 4, seq_len 4 (tied)
    const int32_t dim = 8, hidden = 8, layers = 1, heads = 2, kv = 2, vocab = 4, seq = 4;
    std::vector<uint8_t> model;
    for (int32_t x : {dim, hidden, layers, heads, kv, vocab, seq}) put(model, x);
    const int64_t head = dim / heads;
    const int64_t kv_dim = dim / heads * kv;
    const int64_t n_floats = int64_t{vocab} * dim + layers * dim + layers * dim * dim + 2 * layers * kv_dim * dim +
                             layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim + 2 * seq * head / 2;
    for (int64_t i = 0; i < n_floats; ++i) put(model, 0.01f * static_cast<float>(i % 7));
    std::vector<uint8_t> tok;
    put<int32_t>(tok, 8);
    for (const char* t : {"<unk>", "\n<s>\n", "\n</s>\n", " a"}) {
      put(tok, -1.0f);
      put<int32_t>(tok, static_cast<int32_t>(std::strlen(t)));
      tok.insert(tok.end(), t, t + std::strlen(t));
    }
    std::vector<uint8_t> framed;
    put<uint32_t>(framed, static_cast<uint32_t>(model.size()));
    framed.insert(framed.end(), model.begin(), model.end());
    framed.insert(framed.end(), tok.begin(), tok.end());
    write(dir / "llama2c" / "tiny.bin", framed);
  }
  {  // tokenizer texts
    const std::vector<std::string> texts = {"the cat sat", "  leading spaces\tand tabs\n", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87",
                                            "bad \xff\xfe utf8 \xc3", "<s>hi</s> <|user|> x", ""};
    for (size_t i = 0; i < texts.size(); ++i) {
      write(dir / "tokenizer" / ("text" + std::to_string(i)), std::vector<uint8_t>(texts[i].begin(), texts[i].end()));
    }
  }
  {  // trees: pairs of int16 (token, parent)
    auto tree = [](std::vector<std::pair<int16_t, int16_t>> nodes) {
      std::vector<uint8_t> v;
      for (auto [t, p] : nodes) {
        put(v, t);
        put(v, p);
      }
      return v;
    };
    write(dir / "tree" / "chain", tree({{5, -1}, {6, 0}, {7, 1}, {8, 2}}));
    write(dir / "tree" / "wide", tree({{5, -1}, {6, 0}, {7, 0}, {8, 0}, {9, 1}, {10, 1}, {11, 4}}));
    write(dir / "tree" / "bad_parent", tree({{5, -1}, {6, 3}, {7, 0}}));
    write(dir / "tree" / "two_roots", tree({{5, -1}, {6, -1}}));
  }
  std::printf("wrote seed corpora under %s\n", dir.c_str());
  return 0;
}
