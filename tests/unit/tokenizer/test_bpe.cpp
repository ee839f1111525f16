// Byte-level BPE: GPT-2's byte mapping, the hand-written pre-tokenizers against splits
// computed by an independent regex engine (pretok_vectors.inc), merge order on a small
// hand-made vocabulary, special tokens, BOS/EOS flags, decoding, and errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>

#include "core/rng.h"
#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_pretok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"
#include "treespec/status.h"

using namespace treespec;
using tokenizer::PreTokenizer;
using tokenizer::Tokenizer;
using tokenizer::TokenType;
using tokenizer::Vocab;

namespace {

struct PretokCase {
  const char* pre;
  const char* text;
  std::vector<std::string> words;
};

const std::vector<PretokCase>& pretok_cases() {
  static const std::vector<PretokCase> cases = {
#include "pretok_vectors.inc"
  };
  return cases;
}

std::vector<std::string> split(PreTokenizer p, std::string_view text) {
  std::vector<std::string_view> w;
  tokenizer::pre_tokenize(p, text, w);
  return {w.begin(), w.end()};
}

// ids 0..255: the byte characters in byte order; then specials and merged pieces.
constexpr int32_t kEot = 256, kUser = 257, kHe = 258, kLl = 259, kHell = 260, kHello = 261, kSpW = 262, kBc = 263,
                  kAb = 264, kSpSp = 265, kOr = 266, kXyz = 267;

Vocab tiny_bpe(const std::string& pre = "gpt-2") {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(tokenizer::unicode::byte_to_unicode()[static_cast<size_t>(b)]);
  v.types.assign(256, TokenType::normal);
  const std::string sp = tokenizer::unicode::byte_to_unicode()[' '];  // "Ġ"
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(TokenType::control);
  v.tokens.push_back("<|user|>");
  v.types.push_back(TokenType::user_defined);
  for (const std::string& p :
       {std::string("he"), std::string("ll"), std::string("hell"), std::string("hello"), sp + "w", std::string("bc"),
        std::string("ab"), sp + sp, std::string("or"), std::string("xyz")}) {
    v.tokens.push_back(p);
    v.types.push_back(TokenType::normal);
  }
  // rank = index: "b c" (5) beats "a b" (6) in "abc".
  v.merges = {"h e", "l l", "he ll", "hell o", sp + " w", "b c", "a b", sp + " " + sp, "o r"};
  v.bos_id = kEot;
  v.eos_id = kEot;
  v.add_bos = false;
  v.add_space_prefix = false;
  return v;
}

std::unique_ptr<Tokenizer> tiny_tok(const std::string& pre = "gpt-2") { return Tokenizer::create(tiny_bpe(pre)); }

using Ids = std::vector<int32_t>;

}  // namespace

TEST(BpeUnicode, ByteMappingIsGpt2s) {
  const auto& m = tokenizer::unicode::byte_to_unicode();
  EXPECT_EQ(m['a'], "a");
  EXPECT_EQ(m['!'], "!");
  EXPECT_EQ(m[' '], "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(m['\n'], "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(m[0], "\xc4\x80");     // U+0100
  EXPECT_EQ(m[0xAD], "\xc5\x83");  // the 68th unprintable byte: U+0143
  EXPECT_EQ(m[0xE9], "\xc3\xa9");  // printable Latin-1 maps to itself
  std::set<std::string> seen(m.begin(), m.end());
  EXPECT_EQ(seen.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    const auto cps = tokenizer::unicode::decode_utf8(m[static_cast<size_t>(b)]);
    ASSERT_EQ(cps.cp.size(), 1u);
    EXPECT_EQ(tokenizer::unicode::unicode_to_byte(cps.cp[0]), b);
  }
  EXPECT_EQ(tokenizer::unicode::unicode_to_byte(' '), -1);
  EXPECT_EQ(tokenizer::unicode::unicode_to_byte(0x4E00), -1);
}

TEST(BpeUnicode, Classes) {
  using namespace tokenizer::unicode;
  EXPECT_EQ(classify('a'), kLetter);
  EXPECT_EQ(classify(0x0416), kLetter);  // Ж
  EXPECT_EQ(classify(0x6211), kLetter);  // 我 (Lo)
  EXPECT_EQ(classify('7'), kNumber);
  EXPECT_EQ(classify(0x00BD), kNumber);  // ½ (No)
  EXPECT_EQ(classify(0x2167), kNumber);  // Ⅷ (Nl)
  EXPECT_EQ(classify(' '), kWhitespace);
  EXPECT_EQ(classify(0x3000), kWhitespace);
  EXPECT_EQ(classify(0x0085), kWhitespace);
  EXPECT_EQ(classify(0x200B), kOther);  // zero-width space is not White_Space
  EXPECT_EQ(classify(0x0301), kOther);  // combining acute (Mn): not a letter
  EXPECT_EQ(classify(','), kPunct);
  EXPECT_EQ(classify('$'), kOther);  // Sc
  EXPECT_EQ(classify(kInvalidBase + 0xFF), kOther);
}

// Every expected split comes from python3-regex running llama.cpp's regexes.
TEST(BpePretokenize, MatchesRegexEngine) {
  ASSERT_GT(pretok_cases().size(), 250u);
  int failures = 0;
  for (const auto& c : pretok_cases()) {
    const auto got = split(tokenizer::pre_tokenizer_from_name(c.pre), c.text);
    EXPECT_EQ(got, c.words) << c.pre << " text '" << c.text << "'";
    failures += got != c.words;
  }
  EXPECT_EQ(failures, 0);
}

TEST(BpePretokenize, Examples) {
  EXPECT_EQ(split(PreTokenizer::gpt2, "I'm  here 123"), (std::vector<std::string>{"I", "'m", " ", " here", " 123"}));
  EXPECT_EQ(split(PreTokenizer::llama3, "I'M 12345\n\nok"),
            (std::vector<std::string>{"I", "'M", " ", "123", "45", "\n\n", "ok"}));
  EXPECT_EQ(split(PreTokenizer::qwen2, "x 123"), (std::vector<std::string>{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(split(PreTokenizer::smollm, "a 12b"), (std::vector<std::string>{"a", " ", "1", "2", "b"}));
  EXPECT_EQ(split(PreTokenizer::default_chain, "x 12345!?"), (std::vector<std::string>{"x", " ", "123", "45", "!?"}));
  EXPECT_TRUE(split(PreTokenizer::gpt2, "").empty());
}

// Invalid UTF-8 bytes are kept (as "other" characters): the words always cover the
// input exactly, with no empty word, for every pre-tokenizer.
TEST(BpePretokenize, CoversArbitraryBytes) {
  core::Rng rng(7);
  const char alphabet[] = {'a',    'Z',    ' ',    ' ',    '\n',   '\r',   '\t',   '1',    '\'',   's',   '!',
                           '\xc3', '\xa9', '\xe2', '\x80', '\xff', '\xf0', '\x9f', '\xa6', '\x99', '\x00'};
  for (PreTokenizer p : {PreTokenizer::default_chain, PreTokenizer::gpt2, PreTokenizer::llama3, PreTokenizer::qwen2,
                         PreTokenizer::smollm, PreTokenizer::gpt4o}) {
    for (int it = 0; it < 300; ++it) {
      std::string s;
      const auto n = rng.uniform_int(40);
      for (uint64_t i = 0; i < n; ++i) s += alphabet[rng.uniform_int(sizeof(alphabet))];
      std::string joined;
      for (const auto& w : split(p, s)) {
        ASSERT_FALSE(w.empty());
        joined += w;
      }
      ASSERT_EQ(joined, s) << tokenizer::pre_tokenizer_name(p);
    }
  }
  // An invalid byte is its own kind of character: it joins a run of punctuation.
  EXPECT_EQ(split(PreTokenizer::gpt2, "a\xff!b"), (std::vector<std::string>{"a", "\xff!", "b"}));
}

TEST(BpePretokenize, Names) {
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name(""), PreTokenizer::default_chain);
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("default"), PreTokenizer::default_chain);
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("gpt-2"), PreTokenizer::gpt2);
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("llama-bpe"), PreTokenizer::llama3);
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("gpt-4o"), PreTokenizer::gpt4o);
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("llama4"), PreTokenizer::gpt4o);
  EXPECT_STREQ(tokenizer::pre_tokenizer_name(PreTokenizer::gpt4o), "gpt-4o");
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("qwen2"), PreTokenizer::qwen2);
  EXPECT_EQ(tokenizer::pre_tokenizer_from_name("smollm"), PreTokenizer::smollm);
  try {
    tokenizer::pre_tokenizer_from_name("tekken");
    FAIL();
  } catch (const Unsupported& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'tekken'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama-bpe"), std::string::npos) << msg;
    EXPECT_NE(msg.find("qwen2"), std::string::npos) << msg;
  }
}

TEST(BpeEncode, MergesByRank) {
  auto t = tiny_tok();
  EXPECT_EQ(t->encode("hello", false), (Ids{kHello}));
  EXPECT_EQ(t->encode("hello world", false), (Ids{kHello, kSpW, kOr, 'l', 'd'}));
  EXPECT_EQ(t->encode("abc", false), (Ids{'a', kBc}));  // "b c" has the lower rank
  EXPECT_EQ(t->encode("ab", false), (Ids{kAb}));
  EXPECT_EQ(t->encode("hell", false), (Ids{kHell}));
  EXPECT_EQ(t->encode("hel", false), (Ids{kHe, 'l'}));
  EXPECT_EQ(t->encode("  w", false), (Ids{' ', kSpW}));      // \s+(?!\S) leaves one space to " w"
  EXPECT_EQ(t->encode("   ", false), (Ids{kSpSp, ' '}));     // leftmost pair merges first
  EXPECT_EQ(t->encode("xyz", false), (Ids{'x', 'y', 'z'}));  // no merges lead to "xyz"
  EXPECT_TRUE(t->encode("", false).empty());
  // Every byte has a token: invalid UTF-8 and control bytes go through as bytes.
  EXPECT_EQ(t->encode("\xff\x01", false), (Ids{0xFF, 0x01}));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(t->byte_token(static_cast<uint8_t>(b)), b);
}

TEST(BpeEncode, Llama3IgnoresMergesForWholeWords) {
  EXPECT_EQ(tiny_tok("llama-bpe")->encode("xyz", false), (Ids{kXyz}));
  EXPECT_EQ(tiny_tok("gpt-2")->encode("xyz", false), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(tiny_tok("qwen2")->encode("xyz", false), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(tiny_tok("llama-bpe")->encode("hello", false), (Ids{kHello}));
}

TEST(BpeEncode, SpecialTokens) {
  auto t = tiny_tok();
  // Control tokens only with parse_special; user-defined tokens always.
  EXPECT_EQ(t->encode("hello<|endoftext|>", false, true), (Ids{kHello, kEot}));
  const Ids plain = t->encode("hello<|endoftext|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kEot), 0);
  EXPECT_EQ(t->decode(plain), "hello<|endoftext|>");
  EXPECT_EQ(t->encode("<|user|>hello", false, false), (Ids{kUser, kHello}));
  // Text next to a special token is pre-tokenized on its own.
  EXPECT_EQ(t->encode("ab<|user|>c", false, false), (Ids{kAb, kUser, 'c'}));
}

TEST(BpeEncode, BosEosFlags) {
  Vocab v = tiny_bpe();
  v.add_bos = true;
  auto t = Tokenizer::create(v);
  EXPECT_EQ(t->encode("hello", true), (Ids{kEot, kHello}));
  EXPECT_EQ(t->encode("hello", false), (Ids{kHello}));
  v.add_eos = true;
  v.add_bos = false;
  t = Tokenizer::create(v);
  EXPECT_EQ(t->encode("hello", true), (Ids{kHello, kEot}));
  EXPECT_EQ(t->encode("", true), (Ids{kEot}));
}

TEST(BpeDecode, RoundTripsBytes) {
  Vocab v = tiny_bpe();
  v.add_bos = true;
  auto t = Tokenizer::create(v);
  for (const std::string& s :
       std::vector<std::string>{"hello world", " hello", "  w\n\t", "\xff\xfe a \xc3(", std::string("a\0b", 3),
                                "\xe2\x96\x81 caf\xc3\xa9 \xf0\x9f\xa6\x99"}) {
    const Ids ids = t->encode(s, true);
    ASSERT_EQ(ids.front(), kEot);
    EXPECT_EQ(t->decode(ids), s);  // no dummy-prefix space to drop after BOS
    tokenizer::StreamDecoder sd(*t);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    if (tokenizer::utf8::is_valid(s)) {
      EXPECT_EQ(streamed, s);
    }
  }
  EXPECT_EQ(t->token_to_piece(kSpW), " w");
  EXPECT_EQ(t->token_to_piece(kEot), "");
  EXPECT_EQ(t->token_to_piece(kEot, true), "<|endoftext|>");
  EXPECT_EQ(t->token_to_piece(kUser), "<|user|>");
  EXPECT_EQ(t->token_to_piece('\n'), "\n");
  EXPECT_THROW(t->token_to_piece(10000), InvalidArgument);
}

TEST(BpeVocab, Errors) {
  Vocab v = tiny_bpe();
  v.merges.clear();
  EXPECT_THROW(Tokenizer::create(v), FormatError);
  v = tiny_bpe();
  v.merges.push_back("nospace");
  try {
    Tokenizer::create(v);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("entry 9 ('nospace')"), std::string::npos) << e.what();
  }
  v = tiny_bpe("tekken");
  EXPECT_THROW(Tokenizer::create(v), Unsupported);
  // A byte without a token (and no <unk>) cannot be encoded: rejected up front.
  v = tiny_bpe();
  v.tokens[0x41] = "A-not-a-byte";
  try {
    Tokenizer::create(v);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("byte 0x41"), std::string::npos) << e.what();
  }
}

namespace {

gguf::GgufWriter bpe_writer(const std::string& pre) {
  const Vocab v = tiny_bpe(pre);
  gguf::GgufWriter w;
  w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
  if (!pre.empty()) w.set("tokenizer.ggml.pre", gguf::Value::string(pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(v.tokens));
  std::vector<int32_t> types;
  for (auto t : v.types) types.push_back(static_cast<int32_t>(t));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::string_array(v.merges));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(kEot));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(kEot));
  return w;
}

std::unique_ptr<Tokenizer> load_bpe(const gguf::GgufWriter& w, const std::string& name = "bpe.gguf") {
  const auto bytes = w.to_bytes();
  auto f = gguf::GgufFile::from_bytes(bytes.data(), bytes.size(), name);
  return Tokenizer::from_gguf(*f);
}

}  // namespace

TEST(BpeVocab, LoadDefaultsFollowLlamaCpp) {
  // BOS is added by default only for Llama 3's pre-tokenizer; the key overrides.
  EXPECT_TRUE(load_bpe(bpe_writer("llama-bpe"))->vocab().add_bos);
  EXPECT_FALSE(load_bpe(bpe_writer("qwen2"))->vocab().add_bos);
  EXPECT_FALSE(load_bpe(bpe_writer("gpt-2"))->vocab().add_bos);
  EXPECT_FALSE(load_bpe(bpe_writer(""))->vocab().add_bos);
  auto w = bpe_writer("llama-bpe");
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));
  EXPECT_FALSE(load_bpe(w)->vocab().add_bos);
  w = bpe_writer("qwen2");
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
  auto t = load_bpe(w);
  EXPECT_EQ(t->encode("hello"), (Ids{kEot, kHello}));
  EXPECT_FALSE(t->vocab().add_space_prefix);
  // <|endoftext|> is found by its spelling as the end-of-turn token.
  EXPECT_EQ(t->vocab().eot_id, kEot);
  EXPECT_TRUE(t->is_eog(kEot));
}

TEST(BpeVocab, FromGgufErrorsNameTheFile) {
  auto w = bpe_writer("tekken");
  try {
    load_bpe(w, "tekken-vocab.gguf");
    FAIL();
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("tekken-vocab.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'tekken'"), std::string::npos) << e.what();
  }
  w = bpe_writer("gpt-2");
  w.set("tokenizer.ggml.merges", gguf::Value::string_array({"h e", "x"}));
  try {
    load_bpe(w, "bad-merges.gguf");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-merges.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
}
