// SPM encoder and decoder on a small hand-made vocabulary: merge order, byte fallback,
// special-token parsing, decoding rules, streaming, and load_vocab validation.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

using namespace treespec;
using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;
using tokenizer::TokenType;
using tokenizer::Vocab;

namespace {

const std::string kSp = "\xe2\x96\x81";  // U+2581

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below.
Vocab tiny_vocab() {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::unknown, TokenType::control, TokenType::control};
  v.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.types.push_back(TokenType::byte);
    v.scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {kSp, -1},         // 259
      {"a", -2},         // 260
      {"b", -3},         // 261
      {"c", -4},         // 262
      {kSp + "a", -5},   // 263
      {"ab", -6},        // 264
      {"bc", -1.5f},     // 265: beats "ab" in "abc"
      {"aa", -7},        // 266
      {kSp + "ab", -8},  // 267 (not reachable: "▁a"+"b" merges only if "▁ab" exists: it does)
      {"<user>", 0},     // 268 user-defined
      {"<us", -9},       // 269 (normal piece, prefix of the user-defined token)
      {"x", -10},        // 270
  };
  for (const auto& [p, s] : pieces) {
    v.tokens.push_back(p);
    v.types.push_back(TokenType::normal);
    v.scores.push_back(s);
  }
  v.types[268] = TokenType::user_defined;
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

std::unique_ptr<Tokenizer> tiny(bool add_space_prefix = true) {
  Vocab v = tiny_vocab();
  v.add_space_prefix = add_space_prefix;
  return Tokenizer::create(std::move(v));
}

int32_t byte_id(uint8_t b) { return 3 + b; }

}  // namespace

TEST(SpmEncode, DummyPrefixAndMerges) {
  auto t = tiny();
  EXPECT_EQ(t->encode("a", false), (std::vector<int32_t>{263}));    // "▁a"
  EXPECT_EQ(t->encode("a", true), (std::vector<int32_t>{1, 263}));  // BOS first
  EXPECT_EQ(t->encode("ab", false), (std::vector<int32_t>{267}));   // "▁ab"
  EXPECT_EQ(t->encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(t->encode("", false).empty());
  auto np = tiny(false);
  EXPECT_EQ(np->encode("a", false), (std::vector<int32_t>{260}));
  EXPECT_EQ(np->encode(" a", false), (std::vector<int32_t>{263}));
}

TEST(SpmEncode, HighestScoreFirstThenLeftmost) {
  auto t = tiny(false);
  // "abc": "bc" (-1.5) beats "ab" (-6).
  EXPECT_EQ(t->encode("abc", false), (std::vector<int32_t>{260, 265}));
  // "aaa": two equal candidates; the leftmost pair merges first.
  EXPECT_EQ(t->encode("aaa", false), (std::vector<int32_t>{266, 260}));
  EXPECT_EQ(t->encode("aaaa", false), (std::vector<int32_t>{266, 266}));
}

TEST(SpmEncode, ByteFallbackAndInvalidUtf8) {
  auto t = tiny(false);
  // "é" (C3 A9) is not a piece: two byte tokens.
  EXPECT_EQ(t->encode("\xc3\xa9", false), (std::vector<int32_t>{byte_id(0xC3), byte_id(0xA9)}));
  // "z" is not a piece either.
  EXPECT_EQ(t->encode("z", false), (std::vector<int32_t>{byte_id('z')}));
  // Invalid UTF-8: a lone continuation byte, a truncated sequence, an 0xFF; the valid
  // characters around them keep merging ("ab" stays one token).
  const std::string bad =
      "ab\x80"
      "a\xc3"
      "b\xff";
  const auto ids = t->encode(bad, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{264, byte_id(0x80), 260, byte_id(0xC3), 261, byte_id(0xFF)}));
  EXPECT_EQ(t->decode(ids), bad);
  // A truncated sequence at the very end.
  EXPECT_EQ(t->encode("a\xe2\x96", false), (std::vector<int32_t>{260, byte_id(0xE2), byte_id(0x96)}));
}

TEST(SpmEncode, SpecialTokens) {
  auto t = tiny();
  // parse_special: control tokens in the text become the token, and the text after
  // them gets the dummy prefix again (llama.cpp's SPM behaviour).
  EXPECT_EQ(t->encode("a<s>a", false, true), (std::vector<int32_t>{263, 1, 263}));
  EXPECT_EQ(t->encode("<s>", false, true), (std::vector<int32_t>{1}));
  EXPECT_EQ(t->encode("</s><s>", false, true), (std::vector<int32_t>{2, 1}));
  // Without parse_special "<s>" is text (bytes here: '<', 's', '>' are not pieces).
  const auto plain = t->encode("<s>", false, false);
  EXPECT_EQ(plain, (std::vector<int32_t>{259, byte_id('<'), byte_id('s'), byte_id('>')}));
  // User-defined tokens are matched even without parse_special, and before the
  // shorter normal piece "<us" could take part of them.
  EXPECT_EQ(t->encode("a<user>", false, false), (std::vector<int32_t>{263, 268}));
  EXPECT_EQ(t->encode("<user>x", false, false), (std::vector<int32_t>{268, 259, 270}));
  // <unk> is matched only with parse_special.
  EXPECT_EQ(t->encode("<unk>", false, true), (std::vector<int32_t>{0}));
  EXPECT_NE(t->encode("<unk>", false, false), (std::vector<int32_t>{0}));
}

TEST(SpmEncode, AddEos) {
  Vocab v = tiny_vocab();
  v.add_eos = true;
  auto t = Tokenizer::create(std::move(v));
  EXPECT_EQ(t->encode("a", true), (std::vector<int32_t>{1, 263, 2}));
  EXPECT_EQ(t->encode("a", false), (std::vector<int32_t>{263}));
}

TEST(SpmDecode, PiecesAndRules) {
  auto t = tiny();
  EXPECT_EQ(t->token_to_piece(byte_id('A')), "A");
  EXPECT_EQ(t->token_to_piece(byte_id(0xE2)), "\xe2");
  EXPECT_EQ(t->token_to_piece(263), " a");
  EXPECT_EQ(t->token_to_piece(1), "");
  EXPECT_EQ(t->token_to_piece(1, true), "<s>");
  EXPECT_EQ(t->token_to_piece(0), "");
  EXPECT_EQ(t->token_to_piece(0, true), "<unk>");
  EXPECT_EQ(t->token_to_piece(268), "<user>");
  EXPECT_THROW(t->token_to_piece(-1), InvalidArgument);
  EXPECT_THROW(t->token_to_piece(t->n_vocab()), InvalidArgument);
  // Leading space dropped only for the piece right after BOS.
  EXPECT_EQ(t->decode({1, 263, 263}), "a a");
  EXPECT_EQ(t->decode({263, 263}), " a a");
  EXPECT_EQ(t->decode({260, 1, 263}), "aa");
  EXPECT_EQ(t->decode({1, 259, 263}), " a");  // only one space is dropped
  EXPECT_EQ(t->decode({1, 263}, true), "<s>a");
  // Bytes joined across tokens.
  EXPECT_EQ(t->decode({byte_id(0xC3), byte_id(0xA9)}), "\xc3\xa9");
  EXPECT_EQ(t->decode(t->encode("ab c", true)), "ab c");
}

TEST(SpmDecode, StreamDecoderHoldsBackPartialCharacters) {
  auto t = tiny();
  StreamDecoder sd(*t);
  EXPECT_EQ(sd.push(1), "");
  EXPECT_EQ(sd.push(263), "a");  // leading space dropped after BOS
  // U+1F600 (F0 9F 98 80) split over four byte tokens.
  EXPECT_EQ(sd.push(byte_id(0xF0)), "");
  EXPECT_EQ(sd.push(byte_id(0x9F)), "");
  EXPECT_EQ(sd.push(byte_id(0x98)), "");
  EXPECT_EQ(sd.push(byte_id(0x80)), "\xf0\x9f\x98\x80");
  // "é" split in two, then text.
  EXPECT_EQ(sd.push(byte_id(0xC3)), "");
  EXPECT_EQ(sd.push(byte_id(0xA9)), "\xc3\xa9");
  EXPECT_EQ(sd.push(263), " a");
  // Invalid bytes come out as U+FFFD right away; an unfinished tail at the end is
  // flushed as U+FFFD.
  EXPECT_EQ(sd.push(byte_id(0xFF)), "\xef\xbf\xbd");
  EXPECT_EQ(sd.push(byte_id(0xE2)), "");
  EXPECT_EQ(sd.push(byte_id(0x82)), "");
  EXPECT_EQ(sd.flush(), "\xef\xbf\xbd");
  EXPECT_EQ(sd.flush(), "");
  // A broken sequence followed by ASCII: the lead byte is replaced, the ASCII kept.
  EXPECT_EQ(sd.push(byte_id(0xC3)), "");
  EXPECT_EQ(sd.push(byte_id('A')),
            "\xef\xbf\xbd"
            "A");
}

TEST(SpmDecode, StreamPrime) {
  auto t = tiny();
  StreamDecoder sd(*t);
  sd.prime(1);  // the prompt ended with BOS
  EXPECT_EQ(sd.push(263), "a");
  StreamDecoder sd2(*t);
  sd2.prime(260);
  EXPECT_EQ(sd2.push(263), " a");
}

TEST(SpmVocab, EogAndLookups) {
  Vocab v = tiny_vocab();
  v.eot_id = 270;
  auto t = Tokenizer::create(std::move(v));
  EXPECT_TRUE(t->is_eog(2));
  EXPECT_TRUE(t->is_eog(270));
  EXPECT_FALSE(t->is_eog(1));
  EXPECT_FALSE(t->is_eog(-1));
  EXPECT_EQ(t->eog_ids(), (std::vector<int32_t>{2, 270}));
  EXPECT_EQ(t->token_id("x"), 270);
  EXPECT_EQ(t->token_id("nope"), -1);
  EXPECT_EQ(t->byte_token(0x41), byte_id(0x41));
}

TEST(SpmVocab, UnsupportedModel) {
  Vocab v = tiny_vocab();
  v.model = "bert";  // WordPiece
  try {
    Tokenizer::create(std::move(v));
    FAIL();
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("'bert'"), std::string::npos);
  }
}

// ---- load_vocab from GGUF metadata ----

namespace {

gguf::GgufWriter vocab_writer() {
  const Vocab v = tiny_vocab();
  gguf::GgufWriter w;
  w.set("general.name", gguf::Value::string("tiny"));
  w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(v.scores));
  std::vector<int32_t> types;
  for (auto t : v.types) types.push_back(static_cast<int32_t>(t));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  return w;
}

Vocab load(const gguf::GgufWriter& w) {
  const auto bytes = w.to_bytes();
  auto f = gguf::GgufFile::from_bytes(bytes.data(), bytes.size(), "vocab.gguf");
  return tokenizer::load_vocab(*f);
}

void expect_vocab_error(const gguf::GgufWriter& w, const std::string& needle) {
  try {
    load(w);
    ADD_FAILURE() << "no FormatError, expected one mentioning " << needle;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocab.gguf"), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(LoadVocab, DefaultsAndKeys) {
  auto w = vocab_writer();
  Vocab v = load(w);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.n_tokens(), 271);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_EQ(v.eot_id, -1);
  EXPECT_EQ(v.pad_id, -1);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.type(268), TokenType::user_defined);
  EXPECT_FLOAT_EQ(v.scores[265], -1.5f);
  EXPECT_TRUE(v.strip.empty());

  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(2));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(1));
  w.set("tokenizer.ggml.eot_token_id", gguf::Value::u32(270));
  w.set("tokenizer.ggml.eom_token_id", gguf::Value::i32(269));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(0));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));
  w.set("tokenizer.ggml.add_eos_token", gguf::Value::boolean(true));
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(false));
  w.set("tokenizer.ggml.pre", gguf::Value::string("default"));
  w.set("tokenizer.ggml.merges", gguf::Value::string_array({"a b"}));
  v = load(w);
  EXPECT_EQ(v.bos_id, 2);
  EXPECT_EQ(v.eos_id, 1);
  EXPECT_EQ(v.eot_id, 270);
  EXPECT_EQ(v.eom_id, 269);
  EXPECT_EQ(v.pad_id, 0);
  EXPECT_FALSE(v.add_bos);
  EXPECT_TRUE(v.add_eos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(v.pre, "default");
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b"}));
}

TEST(LoadVocab, EndOfTurnBySpelling) {
  auto w = vocab_writer();
  Vocab base = tiny_vocab();
  base.tokens.push_back("<|im_end|>");
  base.tokens.push_back("<|eom_id|>");
  base.scores.resize(base.tokens.size());
  std::vector<int32_t> types;
  for (auto t : base.types) types.push_back(static_cast<int32_t>(t));
  types.push_back(3);
  types.push_back(3);
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(base.tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(base.scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  Vocab v = load(w);
  EXPECT_EQ(v.eot_id, 271);
  EXPECT_EQ(v.eom_id, 272);
  // An explicit key wins over spellings.
  w.set("tokenizer.ggml.eot_token_id", gguf::Value::u32(2));
  EXPECT_EQ(load(w).eot_id, 2);
}

TEST(LoadVocab, Errors) {
  {
    gguf::GgufWriter w;
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"a"}));
    expect_vocab_error(w, "'tokenizer.ggml.model' missing");
  }
  {
    gguf::GgufWriter w;
    w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
    expect_vocab_error(w, "'tokenizer.ggml.tokens' missing");
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({}));
    expect_vocab_error(w, "'tokenizer.ggml.tokens' is empty");
    w.set("tokenizer.ggml.tokens", gguf::Value::i32_array({1}));
    expect_vocab_error(w, "'tokenizer.ggml.tokens' has type array of i32");
  }
  auto w = vocab_writer();
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array({1.0f}));
  expect_vocab_error(w, "'tokenizer.ggml.scores' has 1 entries, expected 271");
  w = vocab_writer();
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({1, 1}));
  expect_vocab_error(w, "'tokenizer.ggml.token_type' has 2 entries");
  w = vocab_writer();
  std::vector<int32_t> types(271, 1);
  types[5] = 9;
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  expect_vocab_error(w, "token 5 has type 9");
  w = vocab_writer();
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(271));
  expect_vocab_error(w, "'tokenizer.ggml.bos_token_id' = 271 is outside the vocabulary");
  w = vocab_writer();
  w.set("tokenizer.ggml.eot_token_id", gguf::Value::i32(-5));
  expect_vocab_error(w, "'tokenizer.ggml.eot_token_id' = -5");
  w = vocab_writer();
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::string("0"));
  expect_vocab_error(w, "'tokenizer.ggml.unknown_token_id' has type string");
  w = vocab_writer();
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::u8(1));
  expect_vocab_error(w, "'tokenizer.ggml.add_bos_token' has type u8, expected bool");
}

TEST(LoadVocab, FromGgufRejectsOtherModels) {
  auto w = vocab_writer();
  w.set("tokenizer.ggml.model", gguf::Value::string("t5"));
  const auto bytes = w.to_bytes();
  auto f = gguf::GgufFile::from_bytes(bytes.data(), bytes.size(), "ugm.gguf");
  EXPECT_NO_THROW(tokenizer::load_vocab(*f));  // the vocab itself loads
  try {
    Tokenizer::from_gguf(*f);
    FAIL();
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("'t5'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("ugm.gguf"), std::string::npos);
  }
}
