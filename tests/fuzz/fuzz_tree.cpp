// TokenTree validation and derived structures from arbitrary (token, parent) pairs: a
// bad tree is InvalidArgument; a good one has consistent ancestors, paths and subtrees.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tree/token_tree.h"
#include "treespec/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  std::vector<int32_t> tokens, parents;
  for (size_t i = 0; i + 4 <= size && tokens.size() < 600; i += 4) {
    int16_t tok, par;
    std::memcpy(&tok, data + i, 2);
    std::memcpy(&par, data + i + 2, 2);
    tokens.push_back(tok);
    parents.push_back(par);
  }
  try {
    const auto t = tree::TokenTree::from_arrays(tokens, parents);
    t.validate();
    for (int32_t i = 0; i < t.size(); ++i) {
      const auto path = t.path_to(i);
      if (path.front() != 0 || path.back() != i || static_cast<int32_t>(path.size()) != t.depth(i) + 1) std::abort();
      for (int32_t a : path) {
        if (!t.is_ancestor_or_self(a, i)) std::abort();
      }
    }
    // Ancestor-closed subset: root plus nodes whose parent is kept.
    std::vector<bool> kept(static_cast<size_t>(t.size()), false);
    std::vector<int32_t> closed;
    for (int32_t i = 0; i < t.size(); ++i) {
      if (i == 0 || (kept[static_cast<size_t>(t.parent(i))] && (t.token(i) & 1))) {
        kept[static_cast<size_t>(i)] = true;
        closed.push_back(i);
      }
    }
    const auto sub = t.subtree(closed);
    sub.validate();
  } catch (const InvalidArgument&) {
  }
  return 0;
}
