#include "drafters/lookahead/lookahead_drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/assert.h"
#include "treespec/status.h"

namespace treespec::drafters {

void LookaheadParams::validate() const {
  if (ngram < 2 || ngram > 16)
    throw InvalidArgument(fmt::format("lookahead n-gram size N must be in 2..16, got {}", ngram));
  if (window < 1 || window > 64)
    throw InvalidArgument(fmt::format("lookahead window W must be in 1..64, got {}", window));
  if (guess < 1 || guess > 64)
    throw InvalidArgument(fmt::format("lookahead guess set G must be in 1..64, got {}", guess));
}

namespace {
const LookaheadParams& validated(const LookaheadParams& p) {
  p.validate();
  return p;
}
}  // namespace

LookaheadDrafter::LookaheadDrafter(const LookaheadParams& p, uint64_t seed)
    : p_(validated(p)), rng_(seed), pool_(p.ngram - 1, p.guess) {}

void LookaheadDrafter::begin(std::span<const int32_t> prompt) {
  TREESPEC_ASSERT(!prompt.empty(), "lookahead: empty prompt");
  pool_.clear();
  levels_.clear();
  root_ = -1;
  fed_cols_ = 0;
  n_trie_ = 0;
  // Level 0 starts W + N - 3 wide: each of the N - 2 filling steps drops one column, so
  // the window is W wide once all N - 1 levels exist. Seeds are prompt tokens drawn at
  // random (the reference code's default initialisation).
  std::vector<int32_t> l0(static_cast<size_t>(p_.window + p_.ngram - 3));
  for (auto& t : l0) t = prompt[static_cast<size_t>(rng_.uniform_int(prompt.size()))];
  levels_.push_back(std::move(l0));
}

int32_t LookaheadDrafter::window_rows(int32_t cols) const {
  if (cols <= 0) return 0;
  const auto f = static_cast<int32_t>(levels_.size()) - 1;  // levels above level 0
  return (cols - 1) + f * cols;
}

int32_t LookaheadDrafter::max_nodes() const {
  // Filling step k (k = 0 .. N-2) feeds a level 0 of s = W + N - 3 - k guesses and k
  // levels of s + 1; the pool is empty until the window is full, so no trie then.
  int32_t most = 0;
  for (int32_t k = 0; k <= p_.ngram - 2; ++k) {
    const int32_t s = p_.window + p_.ngram - 3 - k;
    most = std::max(most, s + k * (s + 1));
  }
  const int32_t steady = (p_.window - 1) + (p_.ngram - 2) * p_.window + p_.guess * (p_.ngram - 1);
  return 1 + std::max(most, steady);
}

int32_t LookaheadDrafter::window_node(int32_t level, int32_t column) const {
  if (level < 0 || level >= static_cast<int32_t>(node_.size()) || column < 0 || column >= fed_cols_) return -1;
  return node_[static_cast<size_t>(level)][static_cast<size_t>(column)];
}

tree::TokenTree LookaheadDrafter::propose(const DraftInput& in) {
  TREESPEC_ASSERT(!levels_.empty(), "lookahead: propose() before begin()");
  root_ = in.context.back();
  const auto n_levels = static_cast<int32_t>(levels_.size());
  const auto C = static_cast<int32_t>(levels_[0].size()) + 1;
  const int32_t R = std::max(0, in.budget - 1);  // rows besides the root

  // Verification branch: the root's n-grams, most recent first, merged into a trie.
  tree::TokenTree trie(root_);
  if (window_full()) {
    for (int32_t i = 0; i < pool_.count(root_); ++i) {
      int32_t node = 0;
      for (int32_t tok : pool_.gram(root_, i)) {
        const int32_t child = trie.find_child(node, tok);
        node = child >= 0 ? child : trie.add(tok, node);
      }
    }
  }
  const int32_t need_t = trie.size() - 1;
  const int32_t need_w = window_rows(C);

  // Split the budget (see the header comment).
  int32_t cols = C;
  int32_t n_trie = need_t;
  if (need_w + need_t > R) {
    const int32_t w_share = static_cast<int32_t>(static_cast<int64_t>(R) * need_w / std::max(1, need_w + need_t));
    cols = 0;
    while (cols < C && window_rows(cols + 1) <= w_share) ++cols;
    n_trie = std::min(need_t, R - window_rows(cols));
    while (cols < C && window_rows(cols + 1) <= R - n_trie) ++cols;  // hand back what the trie left
  }

  tree::TokenTree t(root_);
  node_.assign(static_cast<size_t>(n_levels), std::vector<int32_t>(static_cast<size_t>(std::max(cols, 0)), -1));
  if (cols > 0) {
    node_[0][0] = 0;
    for (int32_t c = 1; c < cols; ++c) {
      node_[0][static_cast<size_t>(c)] = t.add(levels_[0][static_cast<size_t>(c - 1)],
                                               node_[0][static_cast<size_t>(c - 1)], 1.0f, tree::NodeKind::aux);
    }
    for (int32_t l = 1; l < n_levels; ++l) {
      for (int32_t c = 0; c < cols; ++c) {
        node_[static_cast<size_t>(l)][static_cast<size_t>(c)] =
            t.add(levels_[static_cast<size_t>(l)][static_cast<size_t>(c)],
                  node_[static_cast<size_t>(l - 1)][static_cast<size_t>(c)], 1.0f, tree::NodeKind::aux);
      }
    }
  }
  fed_cols_ = cols;
  // Trie nodes in insertion order: a prefix of it is ancestor-closed and keeps the most
  // recent n-grams.
  std::vector<int32_t> map(static_cast<size_t>(trie.size()), -1);
  map[0] = 0;
  for (int32_t k = 1; k <= n_trie; ++k) {
    map[static_cast<size_t>(k)] = t.add(trie.token(k), map[static_cast<size_t>(trie.parent(k))]);
  }
  n_trie_ = n_trie;
  TREESPEC_ASSERT(t.size() <= std::max(1, in.budget), "lookahead: tree exceeds its budget");
  return t;
}

void LookaheadDrafter::observe(const StepFeedback& fb) {
  if (fed_cols_ <= 0 || fb.tree.empty() || fb.tree.token(0) != root_) return;  // no window this step
  const auto n_levels = static_cast<int32_t>(levels_.size());
  const int32_t f = n_levels - 1;
  const auto C = static_cast<int32_t>(levels_[0].size()) + 1;
  // The model's argmax at each fed column of the last level: the Jacobi update.
  int32_t fed = fed_cols_;
  std::vector<int32_t> out(static_cast<size_t>(C));
  for (int32_t c = 0; c < fed; ++c) {
    const int32_t node = node_[static_cast<size_t>(f)][static_cast<size_t>(c)];
    const int32_t am =
        static_cast<size_t>(node) < fb.node_argmax.size() ? fb.node_argmax[static_cast<size_t>(node)] : -1;
    if (am < 0) {  // not computed (pruned): treat the rest as not fed
      fed = c;
      break;
    }
    out[static_cast<size_t>(c)] = am;
  }
  if (fed == 0) return;
  // Columns not fed keep their current last-level guess.
  for (int32_t c = fed; c < C; ++c) {
    out[static_cast<size_t>(c)] = f > 0 ? levels_[static_cast<size_t>(f)][static_cast<size_t>(c)]
                                        : (c == 0 ? root_ : levels_[0][static_cast<size_t>(c - 1)]);
  }

  if (!window_full()) {
    // Filling: every level drops its first column (the window moves one position on)
    // and the new level is the prediction for columns 1..C-1.
    for (auto& lv : levels_) lv.erase(lv.begin());
    levels_.emplace_back(out.begin() + 1, out.end());
    return;
  }
  // Harvest one N-gram per fed column: its level-0 token (the key), its tokens at levels
  // 1..N-2, and the new prediction.
  std::vector<int32_t> gram(static_cast<size_t>(p_.ngram - 1));
  for (int32_t c = 0; c < fed; ++c) {
    const int32_t key = c == 0 ? root_ : levels_[0][static_cast<size_t>(c - 1)];
    for (int32_t l = 1; l <= f; ++l)
      gram[static_cast<size_t>(l - 1)] = levels_[static_cast<size_t>(l)][static_cast<size_t>(c)];
    gram[static_cast<size_t>(f)] = out[static_cast<size_t>(c)];
    pool_.insert(key, gram);
  }
  // Move one position on: level l+1 becomes level l (level 1 loses column 0, which the
  // next root replaces), the prediction becomes the last level.
  if (f == 0) {
    levels_[0].assign(out.begin() + 1, out.end());
  } else {
    levels_[0].assign(levels_[1].begin() + 1, levels_[1].end());
    for (int32_t l = 1; l < f; ++l) levels_[static_cast<size_t>(l)] = levels_[static_cast<size_t>(l + 1)];
    levels_[static_cast<size_t>(f)] = std::move(out);
  }
}

}  // namespace treespec::drafters
