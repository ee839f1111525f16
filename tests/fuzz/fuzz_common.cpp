#include "fuzz_common.h"

#include <cstdio>
#include <string>

#include "tokenizer/unicode.h"

namespace treespec::fuzz {

std::unique_ptr<tokenizer::Tokenizer> make_spm_tokenizer() {
  tokenizer::Vocab v;
  v.model = "llama";
  auto add = [&](const std::string& piece, tokenizer::TokenType type, float score) {
    v.tokens.push_back(piece);
    v.types.push_back(type);
    v.scores.push_back(score);
  };
  add("<unk>", tokenizer::TokenType::unknown, 0.0f);
  add("<s>", tokenizer::TokenType::control, 0.0f);
  add("</s>", tokenizer::TokenType::control, 0.0f);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, tokenizer::TokenType::byte, 0.0f);
  }
  const char* pieces[] = {"\xe2\x96\x81",
                          "e",
                          "t",
                          "a",
                          "o",
                          "h",
                          "n",
                          "s",
                          "\xe2\x96\x81t",
                          "he",
                          "\xe2\x96\x81the",
                          "in",
                          "\xe2\x96\x81"
                          "a",
                          "er",
                          "an",
                          "\xc3\xa9",
                          "\xe4\xb8\xad",
                          "<|user|>"};
  float score = -1.0f;
  for (const char* p : pieces) add(p, tokenizer::TokenType::normal, score -= 1.0f);
  v.types.back() = tokenizer::TokenType::user_defined;
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return tokenizer::Tokenizer::create(std::move(v));
}

std::unique_ptr<tokenizer::Tokenizer> make_bpe_tokenizer(const char* pre) {
  tokenizer::Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.add_space_prefix = false;
  v.add_bos = false;
  const auto& bytes = tokenizer::unicode::byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(bytes[static_cast<size_t>(b)]);
    v.types.push_back(tokenizer::TokenType::normal);
  }
  auto special = [&](const std::string& piece, tokenizer::TokenType type) {
    v.tokens.push_back(piece);
    v.types.push_back(type);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  v.bos_id = v.eos_id = special("<|endoftext|>", tokenizer::TokenType::control);
  special("<|im_start|>", tokenizer::TokenType::control);
  special("<tool>", tokenizer::TokenType::user_defined);
  // Merges in GPT-2 byte characters: "\xc4\xa0" is 'Ġ' (space), "\xc3\x83" 'Ã' and
  // "\xc2\xa9" '©' are the bytes of "é" (C3 A9).
  const char* merges[][2] = {{"\xc4\xa0", "t"},   {"h", "e"},
                             {"\xc4\xa0t", "he"}, {"i", "n"},
                             {"e", "r"},          {"\xc4\xa0", "a"},
                             {"a", "n"},          {"\xc4\xa0", "\xc4\xa0"},
                             {"1", "2"},          {"\xc3\x83", "\xc2\xa9"},
                             {"'", "s"},          {"o", "u"}};
  for (const auto& m : merges) {
    v.merges.push_back(std::string(m[0]) + " " + m[1]);
    const std::string merged = std::string(m[0]) + m[1];
    if (merged == "ou") continue;  // a merge whose result is not a piece: the encoder must spell its bytes
    v.tokens.push_back(merged);
    v.types.push_back(tokenizer::TokenType::normal);
  }
  return tokenizer::Tokenizer::create(std::move(v));
}

}  // namespace treespec::fuzz
