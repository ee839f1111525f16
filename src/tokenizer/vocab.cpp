// load_vocab: tokenizer.ggml.* metadata -> Vocab, validated.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace treespec::tokenizer {

namespace {

// End-of-turn / end-of-message spellings that llama.cpp recognises when the GGUF does
// not name them. Checked in this order; the first present token wins.
constexpr const char* kEotSpellings[] = {"<|eot_id|>",    "<|im_end|>",    "<|end|>",
                                         "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                                         "<EOT>",         "_<EOT>",        "<end_of_utterance>"};
constexpr const char* kEomSpellings[] = {"<|eom_id|>"};

int32_t find_token(const std::vector<std::string>& tokens, std::string_view text) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == text) return static_cast<int32_t>(i);
  }
  return -1;
}

}  // namespace

Vocab load_vocab(const gguf::GgufFile& file) {
  const std::string& path = file.path();
  Vocab v;
  v.model = file.get_string("tokenizer.ggml.model");
  v.pre = file.get_string("tokenizer.ggml.pre", "");
  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();
  if (n == 0) throw FormatError(fmt::format("{}: metadata key 'tokenizer.ggml.tokens' is empty", path));
  if (n > static_cast<size_t>(INT32_MAX)) {
    throw FormatError(
        fmt::format("{}: metadata key 'tokenizer.ggml.tokens' has {} tokens (more than 2^31 - 1)", path, n));
  }

  if (file.has("tokenizer.ggml.scores")) {
    v.scores = file.get_float_array("tokenizer.ggml.scores");
    if (v.scores.size() != n) {
      throw FormatError(
          fmt::format("{}: metadata key 'tokenizer.ggml.scores' has {} entries, expected {} (one per token)", path,
                      v.scores.size(), n));
    }
  }
  v.types.assign(n, TokenType::normal);
  if (file.has("tokenizer.ggml.token_type")) {
    const auto types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) {
      throw FormatError(
          fmt::format("{}: metadata key 'tokenizer.ggml.token_type' has {} entries, expected {} (one per token)", path,
                      types.size(), n));
    }
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::byte)) {
        throw FormatError(fmt::format("{}: metadata key 'tokenizer.ggml.token_type': token {} has type {} (0..6)", path,
                                      i, types[i]));
      }
      v.types[i] = static_cast<TokenType>(types[i]);
    }
  }
  if (file.has("tokenizer.ggml.merges")) v.merges = file.get_string_array("tokenizer.ggml.merges");

  const bool spm = v.model == "llama";
  v.bos_id = spm ? 1 : -1;
  v.eos_id = spm ? 2 : -1;
  v.unk_id = spm ? 0 : -1;
  auto read_id = [&](const char* key, int32_t& id) {
    if (!file.has(key)) {
      if (id >= static_cast<int32_t>(n)) id = -1;  // a default the vocab cannot hold
      return;
    }
    const int64_t x = file.get_int(key);
    if (x < 0 || x >= static_cast<int64_t>(n)) {
      throw FormatError(fmt::format("{}: metadata key '{}' = {} is outside the vocabulary [0, {})", path, key, x, n));
    }
    id = static_cast<int32_t>(x);
  };
  read_id("tokenizer.ggml.bos_token_id", v.bos_id);
  read_id("tokenizer.ggml.eos_token_id", v.eos_id);
  read_id("tokenizer.ggml.eot_token_id", v.eot_id);
  read_id("tokenizer.ggml.eom_token_id", v.eom_id);
  read_id("tokenizer.ggml.unknown_token_id", v.unk_id);
  read_id("tokenizer.ggml.padding_token_id", v.pad_id);
  if (!file.has("tokenizer.ggml.eot_token_id")) {
    for (const char* s : kEotSpellings) {
      if ((v.eot_id = find_token(v.tokens, s)) >= 0) break;
    }
  }
  if (!file.has("tokenizer.ggml.eom_token_id")) {
    for (const char* s : kEomSpellings) {
      if ((v.eom_id = find_token(v.tokens, s)) >= 0) break;
    }
  }

  // llama.cpp adds BOS by default for SPM and for Llama 3's BPE; the key overrides.
  const bool llama3_bpe = v.model == "gpt2" && (v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3");
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token", spm || llama3_bpe);
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix", spm);
  if (v.add_bos && v.bos_id < 0) {
    throw FormatError(fmt::format("{}: 'tokenizer.ggml.add_bos_token' is true but there is no BOS token", path));
  }
  if (v.add_eos && v.eos_id < 0) {
    throw FormatError(fmt::format("{}: 'tokenizer.ggml.add_eos_token' is true but there is no EOS token", path));
  }

  // Phi-3: llama.cpp strips whitespace after most special tokens (keyed on general.name).
  std::string name = file.get_string("general.name", "");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    v.strip.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const TokenType t = v.types[i];
      if (t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) {
        v.strip[i] |= Vocab::kStripRight;
      }
    }
    if (int32_t id = find_token(v.tokens, "</s>"); id >= 0) v.strip[static_cast<size_t>(id)] |= Vocab::kStripRight;
    for (const char* s : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t id = find_token(v.tokens, s); id >= 0) v.strip[static_cast<size_t>(id)] = 0;
    }
  }
  return v;
}

}  // namespace treespec::tokenizer
