// Lookahead decoding (Fu et al., 2024, "Break the Sequential Dependency of LLM Inference
// Using Lookahead Decoding"): training-free self-drafting with a Jacobi window.
//
// Each step feeds, in one forward pass with one mask:
//  - the lookahead branch: a 2-D window of N-1 levels x C columns (C = W in steady
//    state). Level 0 is the root (column 0) followed by C-1 guess tokens; level l >= 1
//    has C tokens. Token (l, c) sees level-0 columns 0..c and its own column at levels
//    1..l, and sits at position n_past + c + l. That visibility set is exactly the
//    ancestor set of the "comb" tree (level 0 a chain from the root, each column a chain
//    hanging off its level-0 token), so the branch is a TokenTree of aux nodes with
//    positions n_past + depth: no special mask is needed (docs/lookahead.md derives it).
//  - the verification branch: the pooled n-grams whose first token is the root, merged
//    into a trie under the root (candidate nodes, verified by the shared verifiers).
// The model's argmax at the last level becomes the next level (one Jacobi update), one
// N-gram per column is harvested into the pool, and the window moves one position on.
// The first N-2 steps fill the window level by level (as the reference code does).
//
// Budget: when `budget` cannot hold both branches, the rows are split in proportion to
// their full sizes; the window drops its right-most (farthest) columns and the trie
// keeps the most recently seen n-grams (the last one possibly cut short).
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "drafters/drafter.h"
#include "drafters/lookahead/ngram_pool.h"

namespace treespec::drafters {

struct LookaheadParams {
  int32_t ngram = 5;      // N (LEVEL): n-gram length; the window has N-1 levels
  int32_t window = 7;     // W (WINDOW_SIZE): window columns
  int32_t guess = 7;      // G (GUESS_SET_SIZE): n-grams kept per first token = verified per step
  void validate() const;  // InvalidArgument naming the parameter
};

class LookaheadDrafter final : public Drafter {
 public:
  LookaheadDrafter(const LookaheadParams& p, uint64_t seed);
  std::string name() const override { return "lookahead"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  int32_t max_nodes() const override;

  // Introspection (tests, docs).
  const LookaheadParams& params() const { return p_; }
  const NgramPool& pool() const { return pool_; }
  // levels()[0]: level-0 tokens of columns 1..C-1; levels()[l >= 1]: columns 0..C-1.
  const std::vector<std::vector<int32_t>>& levels() const { return levels_; }
  bool window_full() const { return static_cast<int32_t>(levels_.size()) == p_.ngram - 1; }
  // Last proposal: columns fed, and the tree node of window token (level, column).
  int32_t fed_columns() const { return fed_cols_; }
  int32_t window_node(int32_t level, int32_t column) const;
  int32_t n_trie_nodes() const { return n_trie_; }

 private:
  // Rows the window costs when `cols` columns are fed (0 = none).
  int32_t window_rows(int32_t cols) const;

  LookaheadParams p_;
  core::Rng rng_;
  NgramPool pool_;
  std::vector<std::vector<int32_t>> levels_;
  // Last proposal.
  int32_t root_ = -1;
  int32_t fed_cols_ = 0;
  int32_t n_trie_ = 0;
  std::vector<std::vector<int32_t>> node_;  // [levels, fed_cols_] tree node per window token
};

}  // namespace treespec::drafters
