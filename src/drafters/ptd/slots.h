// Free-list slot reuse shared by the PTD draft tree and the trie pool: both keep their
// nodes in a vector and recycle the slots of deleted nodes.
#pragma once

#include <cstdint>
#include <vector>

namespace treespec::drafters::ptd {

// The index of a slot for a new node: the most recently freed one, else a new
// default-constructed element at the end of `nodes`. The caller sets every field.
template <typename Node>
int32_t take_slot(std::vector<Node>& nodes, std::vector<int32_t>& free) {
  if (!free.empty()) {
    const int32_t id = free.back();
    free.pop_back();
    return id;
  }
  nodes.emplace_back();
  return static_cast<int32_t>(nodes.size()) - 1;
}

}  // namespace treespec::drafters::ptd
