#include "tree/token_tree.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "treespec/status.h"

namespace treespec::tree {

TokenTree TokenTree::from_arrays(std::span<const int32_t> tokens, std::span<const int32_t> parents,
                                 std::span<const float> probs, std::span<const int32_t> depths) {
  if (tokens.size() != parents.size()) {
    throw InvalidArgument(fmt::format("token tree: {} tokens but {} parents", tokens.size(), parents.size()));
  }
  if (!probs.empty() && probs.size() != tokens.size()) {
    throw InvalidArgument(fmt::format("token tree: {} tokens but {} draft probabilities", tokens.size(), probs.size()));
  }
  if (!depths.empty() && depths.size() != tokens.size()) {
    throw InvalidArgument(fmt::format("token tree: {} tokens but {} depths", tokens.size(), depths.size()));
  }
  TokenTree t;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t n = t.add(tokens[i], parents[i], probs.empty() ? 1.0f : probs[i]);
    if (!depths.empty() && depths[i] != t.depth(n)) {
      throw InvalidArgument(fmt::format("token tree: node {} has depth {}, expected {} (parent {})", i, depths[i],
                                        t.depth(n), parents[i]));
    }
  }
  return t;
}

TokenTree TokenTree::chain(int32_t root_token, std::span<const int32_t> continuation) {
  TokenTree t(root_token);
  for (size_t i = 0; i < continuation.size(); ++i) t.add(continuation[i], static_cast<int32_t>(i));
  return t;
}

int32_t TokenTree::add(int32_t token, int32_t parent, float prob, NodeKind kind) {
  const int32_t i = size();
  if (i == 0) {
    if (parent != -1)
      throw InvalidArgument(fmt::format("token tree: node 0 must be the root (parent -1), got parent {}", parent));
  } else if (parent == -1) {
    throw InvalidArgument(
        fmt::format("token tree: node {} is a second root (parent -1); only node 0 may be the root", i));
  } else if (parent < 0 || parent >= i) {
    throw InvalidArgument(
        fmt::format("token tree: node {} has parent {}, must be an earlier node in [0, {})", i, parent, i));
  }
  if (token < 0) throw InvalidArgument(fmt::format("token tree: node {} has negative token id {}", i, token));
  if (i > 0 && kind == NodeKind::candidate && kind_[static_cast<size_t>(parent)] != NodeKind::candidate) {
    throw InvalidArgument(
        fmt::format("token tree: candidate node {} has aux parent {} (it could never be accepted)", i, parent));
  }
  token_.push_back(token);
  parent_.push_back(parent);
  depth_.push_back(i == 0 ? 0 : depth_[static_cast<size_t>(parent)] + 1);
  prob_.push_back(prob);
  kind_.push_back(i == 0 ? NodeKind::candidate : kind);
  derived_valid_ = false;
  return i;
}

int32_t TokenTree::n_candidates() const {
  int32_t n = 0;
  for (size_t i = 1; i < kind_.size(); ++i) n += kind_[i] == NodeKind::candidate ? 1 : 0;
  return n;
}

int32_t TokenTree::max_depth() const {
  int32_t d = 0;
  for (int32_t x : depth_) d = std::max(d, x);
  return d;
}

void TokenTree::build_derived() const {
  if (derived_valid_) return;
  const int32_t n = size();
  words_ = (n + 63) / 64;
  anc_.assign(static_cast<size_t>(n) * static_cast<size_t>(words_), 0);
  children_.assign(static_cast<size_t>(n), {});
  for (int32_t i = 0; i < n; ++i) {
    uint64_t* row = anc_.data() + static_cast<size_t>(i) * words_;
    const int32_t p = parent_[static_cast<size_t>(i)];
    if (p >= 0) {
      const uint64_t* prow = anc_.data() + static_cast<size_t>(p) * words_;
      std::copy(prow, prow + words_, row);
      children_[static_cast<size_t>(p)].push_back(i);
    }
    row[i / 64] |= uint64_t{1} << (i % 64);
  }
  derived_valid_ = true;
}

const std::vector<int32_t>& TokenTree::children(int32_t i) const {
  build_derived();
  return children_[static_cast<size_t>(i)];
}

int32_t TokenTree::find_child(int32_t i, int32_t token) const {
  for (int32_t c : children(i)) {
    if (token_[static_cast<size_t>(c)] == token && is_candidate(c)) return c;
  }
  return -1;
}

int32_t TokenTree::mask_words() const {
  build_derived();
  return words_;
}

const uint64_t* TokenTree::ancestors(int32_t i) const {
  build_derived();
  return anc_.data() + static_cast<size_t>(i) * words_;
}

bool TokenTree::is_ancestor_or_self(int32_t a, int32_t i) const { return (ancestors(i)[a / 64] >> (a % 64)) & 1u; }

std::vector<int32_t> TokenTree::path_to(int32_t i) const {
  std::vector<int32_t> path;
  for (int32_t n = i; n >= 0; n = parent_[static_cast<size_t>(n)]) path.push_back(n);
  std::reverse(path.begin(), path.end());
  return path;
}

TokenTree TokenTree::prefix(int32_t n) const {
  if (size() <= n) return *this;
  std::vector<int32_t> keep(static_cast<size_t>(n));
  std::iota(keep.begin(), keep.end(), 0);
  return subtree(keep);
}

TokenTree TokenTree::subtree(std::span<const int32_t> keep, std::vector<int32_t>* old_index) const {
  std::vector<int32_t> new_of(static_cast<size_t>(size()), -1);
  TokenTree t;
  for (int32_t k : keep) {
    if (k < 0 || k >= size()) throw InvalidArgument(fmt::format("token tree subtree: node {} out of range", k));
    const int32_t p = parent_[static_cast<size_t>(k)];
    const int32_t np = p < 0 ? -1 : new_of[static_cast<size_t>(p)];
    if (p >= 0 && np < 0) {
      throw InvalidArgument(fmt::format("token tree subtree: node {} kept without its parent {}", k, p));
    }
    new_of[static_cast<size_t>(k)] =
        t.add(token_[static_cast<size_t>(k)], np, prob_[static_cast<size_t>(k)], kind_[static_cast<size_t>(k)]);
  }
  if (old_index) old_index->assign(keep.begin(), keep.end());
  return t;
}

void TokenTree::validate() const {
  if (empty()) throw InvalidArgument("token tree: empty (needs a root)");
  for (int32_t i = 0; i < size(); ++i) {
    const int32_t p = parent_[static_cast<size_t>(i)];
    if (i == 0 && p != -1) throw InvalidArgument("token tree: node 0 is not a root");
    if (i > 0 && p == -1) throw InvalidArgument(fmt::format("token tree: node {} is a second root (parent -1)", i));
    if (i > 0 && (p < 0 || p >= i)) {
      throw InvalidArgument(
          fmt::format("token tree: node {} has parent {}, must be an earlier node in [0, {})", i, p, i));
    }
    if (token_[static_cast<size_t>(i)] < 0) {
      throw InvalidArgument(
          fmt::format("token tree: node {} has negative token id {}", i, token_[static_cast<size_t>(i)]));
    }
    if (i > 0 && is_candidate(i) && !is_candidate(p)) {
      throw InvalidArgument(fmt::format("token tree: candidate node {} has aux parent {}", i, p));
    }
    const int32_t want = i == 0 ? 0 : depth_[static_cast<size_t>(p)] + 1;
    if (depth_[static_cast<size_t>(i)] != want) {
      throw InvalidArgument(
          fmt::format("token tree: node {} has depth {}, expected {}", i, depth_[static_cast<size_t>(i)], want));
    }
  }
}

}  // namespace treespec::tree
