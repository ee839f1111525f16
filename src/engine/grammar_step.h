// A sequence's grammar work in one Engine::step (docs/grammar.md): before the forward
// pass, drafted candidates whose token the grammar refuses are cut with their subtrees
// (they could never be accepted, so they cost no row); after it, every row a token can
// come from (the root and each candidate) gets the grammar mask of the state after
// its own path, so that verification, whatever the drafter, picks exactly what plain
// decoding under the grammar would.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"
#include "tree/token_tree.h"

namespace treespec::engine {

// The token mask of a tokenizer's vocabulary: each token's output bytes (control tokens
// have none) and its end-of-generation tokens. Building it walks the vocabulary once;
// callers keep one per model.
std::shared_ptr<const grammar::TokenMask> make_token_mask(const tokenizer::Tokenizer& tok);

class GrammarStep {
 public:
  // Cuts `drafted` (whose root's state is s0). Returns true when nodes were cut; then
  // forwarded() is the tree to run and drafted() the original.
  bool cut(const tree::TokenTree& drafted, const grammar::Constraint& c, const grammar::State& s0, bool ignore_eog);
  const tree::TokenTree& drafted() const { return drafted_; }
  tree::TokenTree forwarded() const { return drafted_.subtree(kept_); }
  // Drafted index of forwarded node k; forwarded index of drafted node k (-1 when cut).
  int32_t drafted_of(int32_t k) const { return kept_[static_cast<size_t>(k)]; }
  int32_t forwarded_of(int32_t k) const { return fwd_of_[static_cast<size_t>(k)]; }
  // An accepted path (drafted indices) as forwarded rows, for the KV commit.
  std::vector<int32_t> forwarded_path(const std::vector<int32_t>& path) const {
    std::vector<int32_t> out(path.size());
    for (size_t k = 0; k < path.size(); ++k) out[k] = forwarded_of(path[k]);
    return out;
  }
  // Masks the logits row of drafted node `node` with the state after its path. Aux rows
  // (never a token's source) are left alone. With greedy, a row whose argmax the grammar
  // allows is left as it is: its argmax is already the constrained one.
  void mask_row(int32_t node, float* row, bool greedy) const;

 private:
  const grammar::TokenMask* mask_ = nullptr;
  tree::TokenTree drafted_;
  std::vector<grammar::State> states_;  // per drafted node: after its token (dead when cut)
  std::vector<int32_t> kept_;
  std::vector<int32_t> fwd_of_;
};

}  // namespace treespec::engine
