// Prompts that are not ordinary text: invalid UTF-8 goes through byte fallback (never
// dropped), special-token text becomes special tokens only when asked, and an empty
// text is BOS alone (or nothing, for vocabularies that add no BOS).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace treespec;

namespace {

std::unique_ptr<tokenizer::Tokenizer> spm_with_bytes() {
  tokenizer::Vocab v;
  v.model = "llama";
  auto add = [&](const std::string& piece, tokenizer::TokenType type) {
    v.tokens.push_back(piece);
    v.types.push_back(type);
    v.scores.push_back(-static_cast<float>(v.tokens.size()));
  };
  add("<unk>", tokenizer::TokenType::unknown);
  add("<s>", tokenizer::TokenType::control);
  add("</s>", tokenizer::TokenType::control);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), tokenizer::TokenType::byte);
  for (const char* p : {"\xe2\x96\x81", "a", "b",
                        "\xe2\x96\x81"
                        "a"})
    add(p, tokenizer::TokenType::normal);
  v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;
  return tokenizer::Tokenizer::create(std::move(v));
}

std::unique_ptr<tokenizer::Tokenizer> bpe_from_tiny_model(const std::string& pre) {
  test::TinyModelConfig c;
  c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = pre;
  const std::string path = test::temp_dir() + "/bpe.gguf";
  test::write_tiny_model(path, c);
  return tokenizer::Tokenizer::from_gguf(*gguf::GgufFile::open(path));
}

}  // namespace

TEST(PromptLimits, InvalidUtf8UsesByteFallbackInSpm) {
  const auto tok = spm_with_bytes();
  const std::string text = "a\xff\xc3 b\xe2\x82";  // stray byte, cut 2-byte and 3-byte sequences
  const auto ids = tok->encode(text, true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  int n_bytes = 0;
  for (int32_t id : ids) n_bytes += tok->is_byte(id) ? 1 : 0;
  EXPECT_EQ(n_bytes, 4);  // FF, C3, E2, 82: every invalid byte kept as its byte token
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(PromptLimits, InvalidUtf8IsExactlyReversibleInByteLevelBpe) {
  for (const std::string pre : {"qwen2", "llama-bpe", "gpt-2", "smollm", "default"}) {
    const auto tok = bpe_from_tiny_model(pre);
    const std::string text = "x\xff\xfe\xc3 y \xf0\x9f\x98 \x80z";
    const auto ids = tok->encode(text, false, false);
    EXPECT_EQ(tok->decode(ids), text) << pre;
  }
}

TEST(PromptLimits, EmptyTextIsBosOnlyOrNothing) {
  EXPECT_EQ(spm_with_bytes()->encode("", true, true), std::vector<int32_t>({1}));
  // Qwen2-style byte-level BPE adds no BOS: an empty prompt encodes to no tokens (the
  // engine then refuses it with "prompt is empty").
  EXPECT_TRUE(bpe_from_tiny_model("qwen2")->encode("", true, true).empty());
}

TEST(PromptLimits, SpecialTokenTextOnlyWhenParsingSpecials) {
  const auto tok = spm_with_bytes();
  EXPECT_EQ(tok->encode("<s></s>", true, true), std::vector<int32_t>({1, 1, 2}));
  const auto plain = tok->encode("<s></s>", true, false);
  ASSERT_GT(plain.size(), 3u);  // spelled out through byte fallback
  EXPECT_EQ(tok->decode(plain), "<s></s>");
  const auto bpe = bpe_from_tiny_model("qwen2");
  const auto ids = bpe->encode("<|im_start|><|im_end|>", true, true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_TRUE(bpe->is_control(ids[0]) && bpe->is_control(ids[1]));
}
