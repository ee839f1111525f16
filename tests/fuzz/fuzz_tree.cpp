// TokenTree validation and derived structures from arbitrary input. Layout: u8 n_nodes,
// then n_nodes x {i16 token, i16 parent, u8 flags (bit 0: aux)}, then the rest as i16
// node indices for subtree(). A bad tree or subset is InvalidArgument; a good one has
// consistent depths, paths, ancestor bitsets and children, and so has every subtree;
// from_arrays with explicit depths accepts exactly the right ones.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tree/token_tree.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_consistent(const tree::TokenTree& t) {
  t.validate();
  const int32_t n = t.size();
  check(t.mask_words() == (n + 63) / 64);
  int32_t n_children = 0;
  for (int32_t i = 0; i < n; ++i) {
    const auto path = t.path_to(i);
    check(path.front() == 0 && path.back() == i && static_cast<int32_t>(path.size()) == t.depth(i) + 1);
    int32_t n_anc = 0;
    for (int32_t a = 0; a < n; ++a) n_anc += t.is_ancestor_or_self(a, i) ? 1 : 0;
    check(n_anc == static_cast<int32_t>(path.size()));
    for (int32_t a : path) check(t.is_ancestor_or_self(a, i));
    for (int32_t c : t.children(i)) check(t.parent(c) == i && c > i);
    n_children += static_cast<int32_t>(t.children(i).size());
    const int32_t found = t.find_child(i == 0 ? 0 : t.parent(i), t.token(i));
    if (i > 0 && t.is_candidate(i)) check(found >= 0 && t.token(found) == t.token(i));
  }
  check(n_children == n - 1);
  check(t.kind(0) == tree::NodeKind::candidate);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t n_nodes = data[0];
  size_t pos = 1;
  tree::TokenTree t;
  try {
    for (size_t i = 0; i < n_nodes && pos + 5 <= size; ++i, pos += 5) {
      int16_t tok, par;
      std::memcpy(&tok, data + pos, 2);
      std::memcpy(&par, data + pos + 2, 2);
      const auto kind = (data[pos + 4] & 1) ? tree::NodeKind::aux : tree::NodeKind::candidate;
      t.add(tok, par, 0.5f, kind);
    }
  } catch (const InvalidArgument&) {
    return 0;
  }
  if (t.empty()) {
    try {
      t.validate();
      std::abort();  // an empty tree must be rejected
    } catch (const InvalidArgument&) {
    }
    return 0;
  }
  check_consistent(t);
  // The same arrays with their own depths rebuild the tree; one wrong depth is refused.
  std::vector<int32_t> depths = t.depths();
  const auto same = tree::TokenTree::from_arrays(t.tokens(), t.parents(), {}, depths);
  check(same.tokens() == t.tokens() && same.parents() == t.parents() && same.depths() == t.depths());
  depths[static_cast<size_t>(data[0]) % depths.size()] += 1;
  try {
    (void)tree::TokenTree::from_arrays(t.tokens(), t.parents(), {}, depths);
    std::abort();
  } catch (const InvalidArgument&) {
  }
  std::vector<int32_t> keep;
  for (; pos + 2 <= size; pos += 2) {
    int16_t k;
    std::memcpy(&k, data + pos, 2);
    keep.push_back(k);
  }
  try {
    std::vector<int32_t> old_index;
    const auto sub = t.subtree(keep, &old_index);
    check_consistent(sub);
    check(old_index.size() == static_cast<size_t>(sub.size()));
    for (int32_t k = 0; k < sub.size(); ++k) check(sub.token(k) == t.token(old_index[static_cast<size_t>(k)]));
  } catch (const InvalidArgument&) {
  }
  return 0;
}
