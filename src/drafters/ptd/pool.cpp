#include "drafters/ptd/pool.h"

#include <algorithm>

#include "core/assert.h"
#include "drafters/ptd/draft_tree.h"
#include "drafters/ptd/slots.h"

namespace treespec::drafters::ptd {

Trie::Trie(int32_t key) {
  nodes_.push_back(TrieNode{key, -1, {}, true});
  n_alive_ = 1;
}

int32_t Trie::find_child(int32_t id, int32_t t) const {
  for (int32_t c : node(id).kids) {
    if (tok(c) == t) return c;
  }
  return -1;
}

int32_t Trie::child(int32_t id, int32_t t, bool* added) {
  TREESPEC_ASSERT(alive(id), "trie: parent must be alive");
  if (const int32_t c = find_child(id, t); c >= 0) {
    if (added) *added = false;
    return c;
  }
  const int32_t c = take_slot(nodes_, free_);
  TrieNode& n = nodes_[static_cast<size_t>(c)];
  n.tok = t;
  n.parent = id;
  n.kids.clear();
  n.alive = true;
  nodes_[static_cast<size_t>(id)].kids.push_back(c);
  ++n_alive_;
  if (added) *added = true;
  return c;
}

int32_t Trie::remove_subtree(int32_t id) {
  TREESPEC_ASSERT(id > 0 && alive(id), "trie: removing the root or a dead node");
  auto& siblings = nodes_[static_cast<size_t>(node(id).parent)].kids;
  siblings.erase(std::find(siblings.begin(), siblings.end(), id));
  int32_t removed = 0;
  std::vector<int32_t> stack{id};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    TrieNode& tn = nodes_[static_cast<size_t>(n)];
    stack.insert(stack.end(), tn.kids.begin(), tn.kids.end());
    tn.kids.clear();
    tn.alive = false;
    free_.push_back(n);
    ++removed;
  }
  n_alive_ -= removed;
  return removed;
}

int32_t Trie::evict_oldest() {
  if (nodes_[0].kids.empty()) return 0;
  return remove_subtree(nodes_[0].kids.front());
}

std::vector<int32_t> Trie::preorder() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(size()));
  std::vector<int32_t> stack(node(0).kids.rbegin(), node(0).kids.rend());
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    out.push_back(n);
    const auto& kids = node(n).kids;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
  }
  return out;
}

std::vector<int32_t> Trie::breadth_first(int32_t max_nodes) const {
  std::vector<int32_t> out;
  if (max_nodes <= 0) return out;
  out.reserve(static_cast<size_t>(std::min(max_nodes, size())));
  std::vector<int32_t> level = node(0).kids;
  while (!level.empty() && static_cast<int32_t>(out.size()) < max_nodes) {
    std::vector<int32_t> next;
    for (int32_t n : level) {
      if (static_cast<int32_t>(out.size()) >= max_nodes) break;
      out.push_back(n);
      next.insert(next.end(), node(n).kids.begin(), node(n).kids.end());
    }
    level = std::move(next);
  }
  return out;
}

Trie* Pool::find(int32_t key) {
  auto it = tries_.find(key);
  return it == tries_.end() ? nullptr : &it->second;
}

const Trie* Pool::find(int32_t key) const {
  auto it = tries_.find(key);
  return it == tries_.end() ? nullptr : &it->second;
}

Trie& Pool::get(int32_t key) {
  auto it = tries_.find(key);
  if (it == tries_.end()) it = tries_.emplace(key, Trie(key)).first;
  return it->second;
}

int64_t Pool::n_nodes() const {
  int64_t n = 0;
  for (const auto& [k, t] : tries_) n += t.size();
  return n;
}

void Pool::merge(const MergeSource& src) {
  if (src.nodes.empty()) return;
  Trie& t = get(src.nodes[0].tok);
  counters.merges += 1;
  // (source node, trie node) pairs; a node's new children come in source order, then its pred.
  std::vector<std::pair<int32_t, int32_t>> stack{{0, 0}};
  while (!stack.empty()) {
    const auto [s, n] = stack.back();
    stack.pop_back();
    const MergeSource::Node& sn = src.nodes[static_cast<size_t>(s)];
    for (int32_t sc : sn.kids) {
      bool added = false;
      const int32_t c = t.child(n, src.nodes[static_cast<size_t>(sc)].tok, &added);
      counters.nodes_inserted += added ? 1 : 0;
      stack.emplace_back(sc, c);
    }
    if (sn.pred >= 0) {
      bool added = false;
      t.child(n, sn.pred, &added);
      counters.nodes_inserted += added ? 1 : 0;
    }
  }
  if (cap_ >= 0 && t.size() > cap_) {
    counters.evictions += 1;
    counters.nodes_evicted += t.evict_oldest();
  }
}

MergeSource Pool::from_draft(const DraftTree& d, int32_t id) {
  MergeSource src;
  // Pre-order copy; index map from draft id to source index.
  const std::vector<int32_t> order = d.subtree_preorder(id);
  std::vector<std::pair<int32_t, int32_t>> index;  // (draft id, src index), small: linear scan
  src.nodes.reserve(order.size());
  for (int32_t n : order) {
    const auto si = static_cast<int32_t>(src.nodes.size());
    src.nodes.push_back({d.tok(n), d.pred(n), {}});
    index.emplace_back(n, si);
    if (n != id) {
      const int32_t p = d.node(n).parent;
      for (auto it = index.rbegin(); it != index.rend(); ++it) {
        if (it->first == p) {
          src.nodes[static_cast<size_t>(it->second)].kids.push_back(si);
          break;
        }
      }
    }
  }
  return src;
}

MergeSource Pool::from_trie(const Trie& t, int32_t id) {
  MergeSource src;
  std::vector<std::pair<int32_t, int32_t>> stack{{id, -1}};  // (trie node, parent src index)
  while (!stack.empty()) {
    const auto [n, ps] = stack.back();
    stack.pop_back();
    const auto si = static_cast<int32_t>(src.nodes.size());
    src.nodes.push_back({t.tok(n), -1, {}});
    if (ps >= 0) src.nodes[static_cast<size_t>(ps)].kids.push_back(si);
    const auto& kids = t.node(n).kids;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.emplace_back(*it, si);
  }
  return src;
}

}  // namespace treespec::drafters::ptd
