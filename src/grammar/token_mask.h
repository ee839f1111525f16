// Which tokens a grammar state allows: the vocabulary's pieces in a byte trie, walked
// with the state so that tokens sharing a prefix share its matching work.
//
// A token is allowed when its bytes keep the state alive (it may end inside a UTF-8
// character); an end-of-generation token when the state can end; a token with no bytes
// (control tokens) never. If a state allows no token at all (a grammar the vocabulary
// cannot spell onward), the end-of-generation tokens are allowed so the answer ends
// rather than the engine picking an arbitrary token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace treespec::grammar {

class TokenMask {
 public:
  // pieces[id]: the token's output bytes (tokenizer token_to_piece without specials).
  TokenMask(std::vector<std::string> pieces, const std::vector<int32_t>& eog_ids);

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  bool is_eog(int32_t tok) const { return tok >= 0 && tok < n_vocab() && eog_[static_cast<size_t>(tok)] != 0; }
  const std::string& piece(int32_t tok) const { return pieces_[static_cast<size_t>(tok)]; }

  // Whether s allows tok (ignores the allow-EOG-when-stuck fallback; see allowed()).
  bool allows(const State& s, int32_t tok) const;
  // s after tok (an end-of-generation token leaves it unchanged).
  State advance(const State& s, int32_t tok) const;
  // Per token, 1 if allowed; the fallback applied. Size n_vocab().
  std::vector<uint8_t> allowed(const State& s) const;
  // Sets the logits of the tokens s does not allow to -infinity.
  void apply(const State& s, float* logits) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;  // (byte, node), sorted by byte
    std::vector<int32_t> tokens;                    // tokens whose piece ends here
  };
  void walk(int32_t node, const State& s, std::vector<uint8_t>& out) const;

  std::vector<std::string> pieces_;
  std::vector<uint8_t> eog_;
  std::vector<int32_t> eog_ids_;
  std::vector<Node> trie_;
};

// A grammar bound to a vocabulary: what a sequence carries (SequenceParams::grammar).
struct Constraint {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenMask> mask;
};

}  // namespace treespec::grammar
