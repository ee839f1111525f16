// NgramPool: the n-grams lookahead decoding harvests from its Jacobi window, keyed by
// their first token. Each key keeps at most `cap` n-grams of `len` tokens (the tokens
// after the key) in least-recently-seen order; inserting a known n-gram refreshes it,
// inserting a new one into a full key evicts that key's oldest. Memory is bounded by
// n_keys * cap * len tokens, and n_keys <= the vocabulary size.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace treespec::drafters {

class NgramPool {
 public:
  NgramPool(int32_t len, int32_t cap);

  int32_t len() const { return len_; }
  int32_t cap() const { return cap_; }

  // Adds (or refreshes) the n-gram key, gram[0], ..., gram[len-1]. gram.size() == len.
  void insert(int32_t key, std::span<const int32_t> gram);

  // Number of n-grams stored under key.
  int32_t count(int32_t key) const;
  // The i-th n-gram of key, i = 0 the most recently seen. [len]
  std::span<const int32_t> gram(int32_t key, int32_t i) const;

  size_t n_keys() const { return map_.size(); }
  size_t n_grams() const;
  void clear() { map_.clear(); }

 private:
  int32_t len_;
  int32_t cap_;
  // key -> n-grams, oldest first: [count, len] flattened.
  std::unordered_map<int32_t, std::vector<int32_t>> map_;
};

}  // namespace treespec::drafters
