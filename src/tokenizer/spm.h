// SentencePiece-style BPE (tokenizer.ggml.model "llama"), following llama.cpp's SPM
// tokenizer: spaces become U+2581, a dummy-prefix space goes before text that starts the
// input or follows a special token, the text is split into UTF-8 characters, and the
// adjacent pair whose concatenation is the highest-scoring vocab piece is merged until
// none is left (ties: leftmost). Characters that never became a vocab piece fall back to
// byte tokens <0xNN>. Details and the differences from llama.cpp: docs/tokenizer.md.
#pragma once

#include "tokenizer/tokenizer.h"

namespace treespec::tokenizer {

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = false) const override;
  std::string token_to_piece(int32_t id, bool render_special = false) const override;

 private:
  // Appends the tokens of one raw-text fragment (spaces already escaped).
  void encode_fragment(const std::string& text, std::vector<int32_t>& out) const;
};

}  // namespace treespec::tokenizer
