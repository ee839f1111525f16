// Prompt lookup decoding (n-gram matching against the sequence's own context).
//
// The newest n tokens (n from ngram_max down to ngram_min) are searched for in the
// prompt and generated text; every earlier occurrence yields the tokens that followed
// it as a guess. Unlike the usual single-guess prompt lookup, all distinct continuations
// are merged into one tree (shared prefixes share nodes), longest match and most recent
// occurrence first, up to the node budget. Training-free, no extra model.
#pragma once

#include <cstdint>

#include "drafters/drafter.h"

namespace treespec::drafters {

struct LookupParams {
  int32_t ngram_min = 1;     // shortest suffix matched
  int32_t ngram_max = 3;     // longest suffix matched
  int32_t draft_len = 8;     // tokens per continuation (tree depth)
  int32_t max_branches = 4;  // distinct continuations merged into the tree
  void validate() const;
};

class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(const LookupParams& p);
  std::string name() const override { return "lookup"; }
  tree::TokenTree propose(const DraftInput& in) override;
  int32_t max_nodes() const override { return 1 + p_.draft_len * p_.max_branches; }

 private:
  LookupParams p_;
};

}  // namespace treespec::drafters
