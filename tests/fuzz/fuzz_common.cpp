#include "fuzz_common.h"

#include <cstdio>
#include <string>

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
  const char* pieces[] = {"\xe2\x96\x81", "e", "t", "a", "o", "h", "n", "s", "\xe2\x96\x81t", "he", "\xe2\x96\x81the",
                          "in", "\xe2\x96\x81a", "er", "an", "\xc3\xa9", "\xe4\xb8\xad", "<|user|>"};
  float score = -1.0f;
  for (const char* p : pieces) add(p, tokenizer::TokenType::normal, score -= 1.0f);
  v.types.back() = tokenizer::TokenType::user_defined;
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return tokenizer::Tokenizer::create(std::move(v));
}

}  // namespace treespec::fuzz
