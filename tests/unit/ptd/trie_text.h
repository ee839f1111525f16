// A PTD trie as nested text, for the pool and drafter tests.
#pragma once

#include <cstdint>
#include <string>

#include "drafters/ptd/pool.h"

namespace treespec::test {

// "a(b(c) d) e": the children of node `id`, in insertion order, each with its subtree.
inline std::string trie_text(const drafters::ptd::Trie& t, int32_t id = 0) {
  std::string s;
  bool first = true;
  for (int32_t c : t.node(id).kids) {
    if (!first) s += ' ';
    first = false;
    s += std::to_string(t.tok(c));
    if (!t.node(c).kids.empty()) {
      s += '(';
      s += trie_text(t, c);
      s += ')';
    }
  }
  return s;
}

}  // namespace treespec::test
