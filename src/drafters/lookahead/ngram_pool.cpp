#include "drafters/lookahead/ngram_pool.h"

#include <algorithm>

#include "core/assert.h"

namespace treespec::drafters {

NgramPool::NgramPool(int32_t len, int32_t cap) : len_(len), cap_(cap) {
  TREESPEC_ASSERT(len >= 1 && cap >= 1, "n-gram pool needs len >= 1 and cap >= 1");
}

void NgramPool::insert(int32_t key, std::span<const int32_t> gram) {
  TREESPEC_ASSERT(static_cast<int32_t>(gram.size()) == len_, "n-gram pool: wrong n-gram length");
  auto& v = map_[key];
  const auto L = static_cast<size_t>(len_);
  const size_t n = v.size() / L;
  for (size_t i = 0; i < n; ++i) {
    if (std::equal(gram.begin(), gram.end(), v.begin() + static_cast<ptrdiff_t>(i * L))) {
      // Known: move it to the most recent end.
      std::rotate(v.begin() + static_cast<ptrdiff_t>(i * L), v.begin() + static_cast<ptrdiff_t>((i + 1) * L), v.end());
      return;
    }
  }
  if (n >= static_cast<size_t>(cap_)) v.erase(v.begin(), v.begin() + static_cast<ptrdiff_t>(L));  // evict oldest
  v.insert(v.end(), gram.begin(), gram.end());
}

int32_t NgramPool::count(int32_t key) const {
  const auto it = map_.find(key);
  return it == map_.end() ? 0 : static_cast<int32_t>(it->second.size() / static_cast<size_t>(len_));
}

std::span<const int32_t> NgramPool::gram(int32_t key, int32_t i) const {
  const auto& v = map_.at(key);
  const auto L = static_cast<size_t>(len_);
  const size_t n = v.size() / L;
  TREESPEC_ASSERT(i >= 0 && static_cast<size_t>(i) < n, "n-gram pool: index out of range");
  return std::span<const int32_t>(v).subspan((n - 1 - static_cast<size_t>(i)) * L, L);
}

size_t NgramPool::n_grams() const {
  size_t n = 0;
  for (const auto& kv : map_) n += kv.second.size() / static_cast<size_t>(len_);
  return n;
}

}  // namespace treespec::drafters
