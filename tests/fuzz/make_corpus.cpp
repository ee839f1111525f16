// Writes small seed inputs for each fuzz target into DIR/<target>/:
//   gguf: complete tiny models (llama + SPM vocab in f32 and f16; qwen2 + byte-level BPE
//         vocab with QKV biases), a vocab-only file, and a file with every value type;
//   llama2c: synthetic checkpoints (tied and untied classifier) + tokenizers in the
//            fuzzer's framing (4-byte split point or 'auto', checkpoint, tokenizer);
//   tokenizer: texts (ASCII, UTF-8, invalid UTF-8, special-token text, digits,
//              contractions, newlines, U+2581);
//   tree: trees (valid and invalid) with subtree index lists;
//   tree_choices: tree-choices JSON (named trees, bare lists, broken ones);
//   server: request bodies (completions, chat, tokenize, detokenize; valid and invalid);
//   jinja: chat templates (every statement kind, filters, errors, whitespace control,
//          optional NUL + JSON variables) and our test templates (tests/unit/chat/templates);
//   grammar: GBNF grammars (every construct, errors) with NUL + an output text;
//   json_schema: JSON Schemas (every keyword, refs, errors) with NUL + walk choices.
// Inputs that found bugs (regress_*) are added by hand and kept by `make fuzz-corpus`.
// Deterministic: the same binary writes the same bytes. Usage: make_fuzz_corpus DIR
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/fp16.h"
#include "tokenizer/unicode.h"

namespace {

using namespace treespec;
using gguf::Value;

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

// Deterministic pseudo-random weights in [-0.5, 0.5).
std::vector<float> weights(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return v;
}

void spm_vocab(gguf::GgufWriter& w, int n_vocab) {
  std::vector<std::string> tokens = {"<unk>",
                                     "<s>",
                                     "</s>",
                                     "<0x41>",
                                     "\xe2\x96\x81",
                                     "a",
                                     "\xe2\x96\x81"
                                     "a",
                                     "b"};
  std::vector<int32_t> types = {2, 3, 3, 6, 1, 1, 1, 1};
  std::vector<float> scores;
  tokens.resize(static_cast<size_t>(n_vocab), "z");
  types.resize(static_cast<size_t>(n_vocab), 1);
  for (int i = 0; i < n_vocab; ++i) scores.push_back(-static_cast<float>(i));
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.scores", Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
}

// GPT-2's 256 byte characters, two merges and two control tokens (260 tokens).
constexpr int kBpeVocab = 260;
void bpe_vocab(gguf::GgufWriter& w) {
  const auto& bytes = tokenizer::unicode::byte_to_unicode();
  std::vector<std::string> tokens(bytes.begin(), bytes.end());
  std::vector<int32_t> types(256, 1);
  for (const char* t : {"\xc4\xa0"
                        "a",
                        "ab"})
    tokens.push_back(t), types.push_back(1);
  for (const char* t : {"<|endoftext|>", "<|im_end|>"}) tokens.push_back(t), types.push_back(3);
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("qwen2"));
  w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.merges", Value::string_array({"\xc4\xa0 a", "a b"}));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(258));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(259));
}

// A complete model: n_embd 8, 2 heads (1 KV head), FFN 16, 1 layer, vocab n_vocab.
std::vector<uint8_t> tiny_model(const std::string& arch, tensor::DType wt, bool bpe, bool tied) {
  const int64_t E = 8, H = 2, KV = 1, F = 16, V = bpe ? kBpeVocab : 8, hd = E / H;
  gguf::GgufWriter w;
  const std::string a = arch + ".";
  w.set("general.architecture", Value::string(arch));
  w.set("general.name", Value::string("fuzz-seed"));
  w.set(a + "context_length", Value::u32(64));
  w.set(a + "embedding_length", Value::u32(E));
  w.set(a + "block_count", Value::u32(1));
  w.set(a + "feed_forward_length", Value::u32(F));
  w.set(a + "attention.head_count", Value::u32(H));
  w.set(a + "attention.head_count_kv", Value::u32(KV));
  w.set(a + "rope.freq_base", Value::f32(10000.0f));
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  if (bpe) bpe_vocab(w);
  else spm_vocab(w, static_cast<int>(V));
  uint32_t seed = 1;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, tensor::DType t) {
    size_t n = 1;
    for (int64_t d : ne) n *= static_cast<size_t>(d);
    const auto v = weights(n, seed++);
    if (t == tensor::DType::f16) {
      std::vector<uint16_t> h(n);
      for (size_t i = 0; i < n; ++i) h[i] = tensor::fp32_to_fp16(v[i]);
      w.add_tensor(name, t, ne, h.data(), n * 2);
    } else {
      w.add_tensor(name, tensor::DType::f32, ne, v.data(), n * 4);
    }
  };
  add("token_embd.weight", {E, V}, wt);
  add("blk.0.attn_norm.weight", {E}, tensor::DType::f32);
  add("blk.0.attn_q.weight", {E, H * hd}, wt);
  add("blk.0.attn_k.weight", {E, KV * hd}, wt);
  add("blk.0.attn_v.weight", {E, KV * hd}, wt);
  if (arch == "qwen2") {
    add("blk.0.attn_q.bias", {H * hd}, tensor::DType::f32);
    add("blk.0.attn_k.bias", {KV * hd}, tensor::DType::f32);
    add("blk.0.attn_v.bias", {KV * hd}, tensor::DType::f32);
  }
  add("blk.0.attn_output.weight", {H * hd, E}, wt);
  add("blk.0.ffn_norm.weight", {E}, tensor::DType::f32);
  add("blk.0.ffn_gate.weight", {E, F}, wt);
  add("blk.0.ffn_up.weight", {E, F}, wt);
  add("blk.0.ffn_down.weight", {F, E}, wt);
  add("output_norm.weight", {E}, tensor::DType::f32);
  if (!tied) add("output.weight", {E, V}, wt);
  return w.to_bytes();
}

// llama2.c checkpoint (dim 8, hidden 8, 1 layer, 2 heads, kv_heads, vocab 4, seq 4)
// and tokenizer, framed as the fuzzer reads them.
std::vector<uint8_t> llama2c_seed(bool tied, int32_t kv, bool auto_split) {
  const int32_t dim = 8, hidden = 8, layers = 1, heads = 2, vocab = 4, seq = 4;
  std::vector<uint8_t> model;
  for (int32_t x : {dim, hidden, layers, heads, kv, tied ? vocab : -vocab, seq}) put(model, x);
  const int64_t head = dim / heads;
  const int64_t kv_dim = dim / heads * kv;
  int64_t n_floats = int64_t{vocab} * dim + layers * dim + layers * dim * dim + 2 * layers * kv_dim * dim +
                     layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim + 2 * seq * head / 2;
  if (!tied) n_floats += int64_t{vocab} * dim;
  for (int64_t i = 0; i < n_floats; ++i) put(model, 0.01f * static_cast<float>(i % 7));
  std::vector<uint8_t> tok;
  put<int32_t>(tok, 8);
  for (const char* t : {"<unk>", "\n<s>\n", "\n</s>\n", " a"}) {
    put(tok, -1.0f);
    put<int32_t>(tok, static_cast<int32_t>(std::strlen(t)));
    tok.insert(tok.end(), t, t + std::strlen(t));
  }
  std::vector<uint8_t> framed;
  put<uint32_t>(framed, auto_split ? 0x80000000u : static_cast<uint32_t>(model.size()));
  framed.insert(framed.end(), model.begin(), model.end());
  framed.insert(framed.end(), tok.begin(), tok.end());
  return framed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_corpus DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  {  // gguf
    write(dir / "gguf" / "llama_spm_f32.gguf", tiny_model("llama", tensor::DType::f32, false, true));
    write(dir / "gguf" / "llama_spm_f16_untied.gguf", tiny_model("llama", tensor::DType::f16, false, false));
    write(dir / "gguf" / "qwen2_bpe_f32.gguf", tiny_model("qwen2", tensor::DType::f32, true, true));
    gguf::GgufWriter voc(2);
    voc.set("tokenizer.ggml.model", Value::string("llama"));
    voc.set("tokenizer.ggml.tokens", Value::string_array({"<unk>", "<s>"}));
    voc.set("tokenizer.ggml.scores", Value::f32_array({0.0f, -1.0f}));
    write(dir / "gguf" / "vocab_v2.gguf", voc.to_bytes());
    gguf::GgufWriter all;  // one key of every value type, nested arrays, custom alignment
    all.set_alignment(64);
    all.set("u8", Value::u8(1));
    all.set("i8", Value::i8(-1));
    all.set("u16", Value::u16(2));
    all.set("i16", Value::i16(-2));
    all.set("u32", Value::u32(3));
    all.set("i32", Value::i32(-3));
    all.set("u64", Value::u64(4));
    all.set("i64", Value::i64(-4));
    all.set("f32", Value::f32(0.5f));
    all.set("f64", Value::f64(1.5));
    all.set("bool", Value::boolean(true));
    all.set("str", Value::string("text"));
    all.set("nested", Value::array(gguf::ValueType::array, {Value::i32_array({1, 2}), Value::i32_array({})}));
    const std::vector<float> v(8, 0.25f);
    all.add_tensor("t", tensor::DType::f32, {4, 2}, v.data(), v.size() * 4);
    write(dir / "gguf" / "all_types.gguf", all.to_bytes());
  }
  {  // llama2c
    write(dir / "llama2c" / "tied.bin", llama2c_seed(true, 2, false));
    write(dir / "llama2c" / "untied_gqa.bin", llama2c_seed(false, 1, false));
    write(dir / "llama2c" / "tied_auto.bin", llama2c_seed(true, 2, true));
    write(dir / "llama2c" / "untied_gqa_auto.bin", llama2c_seed(false, 1, true));
  }
  {  // tokenizer texts
    const std::vector<std::string> texts = {
        "the cat sat",
        "  leading spaces\tand tabs\n\n",
        "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
        "bad \xff\xfe utf8 \xc3",
        "<s>hi</s> <|user|> x <|endoftext|><|im_start|><tool>",
        "",
        "I'm 12345 it's WE'LL 3.14 \xd9\xa3\xd9\xa4",
        "line\r\n\r\n  \n end  ",
        "\xe2\x96\x81the \xe2\x96\x81",
        "$+<=>^~| ... !!! ?",
    };
    for (size_t i = 0; i < texts.size(); ++i) {
      write(dir / "tokenizer" / ("text" + std::to_string(i)), std::vector<uint8_t>(texts[i].begin(), texts[i].end()));
    }
  }
  {  // trees: u8 n_nodes, n x {i16 token, i16 parent, u8 flags}, then i16 subtree indices
    auto tree = [](std::vector<std::pair<int16_t, int16_t>> nodes, std::vector<int16_t> keep = {}) {
      std::vector<uint8_t> v;
      v.push_back(static_cast<uint8_t>(nodes.size()));
      for (size_t i = 0; i < nodes.size(); ++i) {
        put(v, nodes[i].first);
        put(v, nodes[i].second);
        v.push_back(static_cast<uint8_t>(i % 3 == 2 ? 1 : 0));  // some aux nodes
      }
      for (int16_t k : keep) put(v, k);
      return v;
    };
    write(dir / "tree" / "chain", tree({{5, -1}, {6, 0}, {7, 1}, {8, 2}}, {0, 1, 2}));
    write(dir / "tree" / "wide", tree({{5, -1}, {6, 0}, {7, 0}, {8, 0}, {9, 1}, {10, 1}, {11, 4}}, {0, 1, 4, 6}));
    write(dir / "tree" / "bad_parent", tree({{5, -1}, {6, 3}, {7, 0}}));
    write(dir / "tree" / "two_roots", tree({{5, -1}, {6, -1}}));
    write(dir / "tree" / "bad_subset", tree({{5, -1}, {6, 0}, {7, 1}}, {0, 2}));
    std::vector<std::pair<int16_t, int16_t>> big;  // 70 nodes: ancestor bitsets of two words
    big.push_back({1, -1});
    for (int16_t i = 1; i < 70; ++i) big.push_back({static_cast<int16_t>(i % 5), static_cast<int16_t>((i - 1) / 2)});
    std::vector<int16_t> keep;
    for (int16_t i = 0; i < 70; i += 1) keep.push_back(i);
    write(dir / "tree" / "binary70", tree(big, keep));
  }
  {  // tree choices JSON: the named-trees format, a bare list, and broken ones
    auto text = [&](const char* name, const std::string& t) {
      write(dir / "tree_choices" / name, std::vector<uint8_t>(t.begin(), t.end()));
    };
    text("named.json", R"({"trees": {"a": [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]], "b": [[0]]}})");
    text("bare.json", "[[0], [0, 0], [2], [0, 0, 5], [2, 3]]");
    text("unordered.json", "[[0, 0], [0], [1]]");
    text("no_parent.json", "[[0, 1], [0]]");
    text("bad_rank.json", "[[-1]]");
    text("nested.json", "[[[0]]]");
    text("one.json", R"({"trees": {"a": [[0], [0, 0]]}})");
  }
  {  // server request bodies: one byte (bit 0: SPM / byte-level BPE tokenizer), then the body
    auto body = [&](const char* name, char tok, const std::string& t) {
      std::vector<uint8_t> v{static_cast<uint8_t>(tok)};
      v.insert(v.end(), t.begin(), t.end());
      write(dir / "server" / name, v);
    };
    body("completion", 0,
         R"({"model": "m", "prompt": "the cat sat", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40,)"
         R"( "min_p": 0.05, "seed": 3, "stop": ["at", "
"], "stream": true, "stream_options": {"include_usage": true}})");
    body("completion_tokens", 1,
         R"({"prompt": [1, 2, 3], "max_tokens": 1, "ignore_eos": true, "n": 1, "logprobs": 0})");
    body(
        "chat", 1,
        R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi <|im_start|>"},)"
        R"( {"role": "assistant", "content": null}, {"role": "developer", "content": [{"type": "text", "text": "x"}]}],)"
        R"( "max_completion_tokens": 4, "stop": "user:"})");
    body("chat_spm", 0,
         R"({"messages": [{"role": "user", "content": "café <s> [INST] </s>"}], "response_format": {"type": "text"}})");
    body("tokenize", 0, R"({"content": "hello <s> world", "add_special": true, "with_pieces": true})");
    body("detokenize", 1, R"({"tokens": [0, 5, 300, -1]})");
    body("unsupported", 0, R"({"prompt": "x", "n": 2, "logit_bias": {"1": 2}, "tools": [{}], "echo": true})");
    body("bad_types", 0, R"({"prompt": ["a", "b"], "max_tokens": 1.5, "stop": [1], "temperature": "hot"})");
    body("bad_utf8", 0, "{\"prompt\": \"\xff\xfe\"}");
    body("not_object", 1, "[1, 2]");
    body("json_schema", 0,
         R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema":)"
         R"( {"type": "object", "properties": {"b": {"type": "boolean"}, "a": {"type": "integer"}}}}}})");
    body("grammar", 1, R"({"prompt": "x", "grammar": "root ::= [a-z]+ \"!\""})");
    body("json_object", 0,
         R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})");
  }
  {  // grammar: GBNF source, NUL, output text
    auto gram = [&](const std::string& name, const std::string& g, const std::string& text) {
      std::string all = g;
      all += '\0';
      all += text;
      write(dir / "grammar" / name, std::vector<uint8_t>(all.begin(), all.end()));
    };
    gram("json",
         "root ::= value\nvalue ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
         "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
         "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
         "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* "
         "\"\\\"\" ws\n"
         "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
         "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
         "{\"a\": [1, -2.5e3, \"x\\u00e9\", null]}");
    gram("repeat", "root ::= [a-z]{2,4} \"!\"? (\"x\" | [0-9]+)* .\n", "ab!x12\xc3\xa9");
    gram("utf8", "root ::= \"\\u00e9\" [\\u03b1-\\u03c9]+ [^\\x00-\\x7f]\n", "\xc3\xa9\xce\xb1\xe2\x82\xac");
    gram("comments", "# c\nroot ::= a | b # x\na ::= \"a\" (\n  \"b\"\n  | \"c\"\n)\nb ::= \"\\x41\"\n", "ab");
    gram("left_rec", "root ::= root \"a\" | \"b\"\n", "ba");
    gram("bad_escape", "root ::= \"\\q\"\n", "q");
    gram("undefined", "root ::= nope\n", "");
  }
  {  // json_schema: schema, NUL, the random walk's choices (a byte < 32 ends where it may)
    std::string choices;
    uint32_t x = 12345;
    for (int i = 0; i < 400; ++i) {
      x = x * 1103515245u + 12345u;
      choices += static_cast<char>(i % 24 == 23 ? 1 : 32 + (x >> 16) % 224);
    }
    auto schema = [&](const std::string& name, const std::string& sch) {
      std::string all = sch;
      all += '\0';
      all += choices;
      write(dir / "json_schema" / name, std::vector<uint8_t>(all.begin(), all.end()));
    };
    schema("object",
           R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},)"
           R"( "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array",)"
           R"( "items": {"enum": ["a", "b", 3, null]}, "minItems": 1, "maxItems": 3}}, "required": ["name"]})");
    schema("refs", R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},)"
                   R"( "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v"]}},)"
                   R"( "$ref": "#/$defs/node"})");
    schema("strings", R"({"type": "string", "pattern": "^[a-c]{2,3}(x|y)?\d+$"})");
    schema("formats", R"({"oneOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "uuid"},)"
                      R"( {"type": "string", "format": "date-time"}, {"const": {"k": [1, true]}}]})");
    schema("numbers", R"({"type": ["number", "boolean"], "exclusiveMinimum": -2.5, "maximum": 1e3})");
    schema("arrays", R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}],)"
                     R"( "items": {"type": "string", "maxLength": 2}, "maxItems": 4})");
    schema("allof", R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},)"
                    R"( {"required": ["a"], "additionalProperties": {"type": "boolean"}}]})");
    schema("any", "{}");
    schema("true", "true");
    schema("bad_keyword", R"({"type": "string", "contentEncoding": "base64"})");
    schema("bad_ref", R"({"$ref": "#/nowhere"})");
    schema("left_rec", R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})");
  }
  std::printf("wrote seed corpora under %s\n", dir.c_str());
  {  // jinja: template source, optionally NUL + JSON variables
    auto text = [&](const std::string& name, const std::string& t) {
      write(dir / "jinja" / name, std::vector<uint8_t>(t.begin(), t.end()));
    };
    text("print.jinja", "{{ messages[0].content|trim }} {{ 1 + 2 * 3 ** 2 // 4 % 5 }} {{ 'a' ~ none ~ true }}");
    text("for.jinja",
         "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ loop.cycle('a','b') }}"
         "{% if loop.last %}{% break %}{% endif %}{% else %}none{% endfor %}");
    text("macro_call.jinja",
         "{% macro w(t, x=1) %}<{{ t }}>{{ caller(x) }}{{ varargs }}{{ kwargs }}{% endmacro %}"
         "{% call(v) w('b', 2) %}[{{ v }}]{% endcall %}");
    text("namespace_set.jinja",
         "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}"
         "{% set a, b = 1, 2 %}{% set blk | upper %}x{{ ns.n }}{% endset %}{{ blk }}{{ a }}{{ b }}");
    text("filters.jinja",
         "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(', ') }}"
         "{{ [3, 1, 2]|sort|reverse|list }}{{ {'b': 1, 'a': 2}|dictsort }}{{ 'x'|center(9) }}"
         "{{ messages|tojson(indent=2) }}{{ '%s-%d'|format('a', 1) }}{{ 'a b'|title|wordcount }}");
    text("tests.jinja",
         "{{ x is defined }}{{ 3 is odd }}{{ [] is iterable }}{{ none is none }}{{ 'a' is string }}"
         "{{ 4 is divisibleby 2 }}{{ 1 is sameas 1 }}");
    text("whitespace.jinja",
         "a  {%- if true -%}  b  {%+ if true +%}\n  c {% endif %}{% endif %}\n  {# c #}\n{% raw %}{{ x }}{% endraw %}");
    text("errors.jinja", "{{ raise_exception('bad role') }}");
    text("syntax_error.jinja", "{% if %}{{ (1 + }}{% endfor %}");
    text("undefined.jinja", "{{ x }}{{ x|default('d') }}{{ x.y }}");
    text("slices_methods.jinja",
         "{{ 'héllo'[::-1] }}{{ [1,2,3][1:] }}{{ ' a,b '.strip().split(',') }}{{ {'k': 1}.items()|list }}"
         "{{ 'x'.startswith('x') }}{{ messages[-1].get('content') }}{{ strftime_now('%Y') }}");
    std::string with_vars = "{% for t in tools %}{{ t.function.name }}{{ t|tojson }}{% endfor %}{{ n * 2 }}";
    with_vars += '\0';
    with_vars += R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "n": 21})";
    text("vars.jinja", with_vars);
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(TREESPEC_CHAT_TEMPLATES_DIR)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      std::ifstream f(p, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      text("template_" + p.filename().string(), ss.str());
    }
  }
  return 0;
}
