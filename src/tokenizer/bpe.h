// Byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen2, SmolLM), following
// llama.cpp's BPE tokenizer: special tokens are cut out first, the raw text is split
// into words by the pre-tokenizer named by tokenizer.ggml.pre (bpe_pretok.h), each
// word's bytes are written as GPT-2's byte characters (Ġ for a space, ...), and adjacent
// symbols are merged by tokenizer.ggml.merges, lowest rank (= index) first, ties
// leftmost, until no listed pair is left. Details and differences: docs/tokenizer.md.
#pragma once

#include <string>
#include <unordered_map>

#include "tokenizer/bpe_pretok.h"
#include "tokenizer/tokenizer.h"

namespace treespec::tokenizer {

class BpeTokenizer : public Tokenizer {
 public:
  // FormatError for a merge that is not "left right"; Unsupported for an unknown
  // pre-tokenizer (vocab.pre).
  explicit BpeTokenizer(Vocab vocab);

  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = false) const override;
  // Normal tokens are mapped back from GPT-2's byte characters to raw bytes.
  std::string token_to_piece(int32_t id, bool render_special = false) const override;

  PreTokenizer pre_tokenizer() const { return pre_; }

 private:
  // Appends the tokens of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t rank(std::string_view left, std::string_view right, std::string& key) const;

  PreTokenizer pre_;
  // Llama 3 (llama.cpp's ignore_merges): a word that is a vocab piece as a whole is that
  // piece, merges or not.
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> merge rank
};

}  // namespace treespec::tokenizer
