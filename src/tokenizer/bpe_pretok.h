// Pre-tokenizers for byte-level BPE: split text into the words that BPE merges within.
//
// Each is llama.cpp's regex (or regex chain) for its tokenizer.ggml.pre, written by hand:
// the regexes use \p{L} / \p{N} classes and a (?!\S) lookahead that no regex library in
// Debian handles the way they must be handled here. Every word is a byte range of the
// input; the words cover it contiguously (nothing is dropped or rewritten).
#pragma once

#include <string_view>
#include <vector>

namespace treespec::tokenizer {

enum class PreTokenizer {
  // llama.cpp's "default" chain: [\p{P}\$\+<=>\^~\|]+, then gpt2, then \p{N}+, then [0-9]{3}.
  default_chain,
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  llama3,
  // As llama3 with \p{N} (one digit per word) instead of \p{N}{1,3}.
  qwen2,
  // \p{N} (every digit alone), then gpt2 (SmolLM: Digits(individual) + ByteLevel).
  smollm,
  // o200k (GPT-4o; Phi-4-mini, Llama 4) in llama.cpp's form, where an "upper" letter U is
  // any letter but a-z and a "lower" one W any letter but A-Z, C = 's|'t|'re|'ve|'m|'ll|'d
  // in any case: [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  gpt4o,
};

// From tokenizer.ggml.pre. Unsupported (naming the value and listing the supported ones)
// for anything else; "" (key absent) is llama.cpp's "default".
PreTokenizer pre_tokenizer_from_name(std::string_view pre);
const char* pre_tokenizer_name(PreTokenizer p);

// Appends the words of `text` to `words` (views into text).
void pre_tokenize(PreTokenizer p, std::string_view text, std::vector<std::string_view>& words);

}  // namespace treespec::tokenizer
