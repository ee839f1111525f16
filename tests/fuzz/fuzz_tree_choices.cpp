// Tree-choices JSON (Medusa / ProPD tree shapes given with --tree-file): any bytes must
// parse into a TreeShape or throw treespec::Error. A shape that parses is ancestor-closed
// in node order, survives paths() -> from_paths() unchanged, and so do its prefixes and
// depth limits.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tree/tree_choices.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_shape(const tree::TreeShape& s) {
  check(s.size() >= 1 && s.parent(0) == -1 && s.depth(0) == 0);
  for (int32_t i = 1; i < s.size(); ++i) {
    check(s.parent(i) >= 0 && s.parent(i) < i);
    check(s.depth(i) == s.depth(s.parent(i)) + 1);
    check(static_cast<int32_t>(s.path(i).size()) == s.depth(i));
  }
  check(tree::TreeShape::from_paths(s.paths()) == s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const char* name : {"", "a"}) {
    tree::TreeShape s;
    try {
      s = tree::parse_tree_choices(text, name, "fuzz.json");
    } catch (const Error&) {
      continue;
    }
    check_shape(s);
    for (int32_t n : {1, s.size() / 2 + 1, s.size() + 3}) check_shape(s.prefix(n));
    for (int32_t d : {0, 1, s.max_depth() / 2}) check_shape(s.limit_depth(d));
  }
  return 0;
}
