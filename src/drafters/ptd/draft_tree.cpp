#include "drafters/ptd/draft_tree.h"

#include <algorithm>

#include "core/assert.h"
#include "drafters/ptd/slots.h"

namespace treespec::drafters::ptd {

int32_t DraftTree::add(int32_t tok, int32_t parent) {
  TREESPEC_ASSERT(parent == -1 || alive(parent), "draft tree: parent must be alive");
  const int32_t id = take_slot(nodes_, free_);
  DraftNode& n = nodes_[static_cast<size_t>(id)];
  n.tok = tok;
  n.parent = parent;
  n.pred = -1;
  n.kids.clear();
  n.born = ++clock_;
  n.alive = true;
  if (parent < 0) {
    spine_.push_back(id);
  } else {
    nodes_[static_cast<size_t>(parent)].kids.push_back(id);
  }
  ++n_alive_;
  return id;
}

int32_t DraftTree::remove_subtree(int32_t id) {
  TREESPEC_ASSERT(alive(id), "draft tree: removing a dead node");
  const int32_t parent = nodes_[static_cast<size_t>(id)].parent;
  auto& siblings = parent < 0 ? spine_ : nodes_[static_cast<size_t>(parent)].kids;
  siblings.erase(std::find(siblings.begin(), siblings.end(), id));
  int32_t removed = 0;
  std::vector<int32_t> stack{id};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    DraftNode& dn = nodes_[static_cast<size_t>(n)];
    stack.insert(stack.end(), dn.kids.begin(), dn.kids.end());
    dn.kids.clear();
    dn.alive = false;
    dn.parent = -1;
    free_.push_back(n);
    ++removed;
  }
  n_alive_ -= removed;
  return removed;
}

void DraftTree::clear() {
  nodes_.clear();
  free_.clear();
  spine_.clear();
  n_alive_ = 0;
}

int32_t DraftTree::find_child(int32_t id, int32_t t) const {
  for (int32_t c : node(id).kids) {
    if (tok(c) == t) return c;
  }
  return -1;
}

bool DraftTree::is_spine_token(int32_t t) const {
  return std::any_of(spine_.begin(), spine_.end(), [&](int32_t s) { return tok(s) == t; });
}

int32_t DraftTree::depth(int32_t id) const {
  int32_t d = 1;
  for (int32_t p = node(id).parent; p >= 0; p = node(p).parent) ++d;
  return d;
}

int32_t DraftTree::height(int32_t id) const {
  int32_t h = 0;
  for (int32_t c : node(id).kids) h = std::max(h, 1 + height(c));
  return h;
}

int32_t DraftTree::max_depth() const {
  int32_t d = 0;
  for (int32_t s : spine_) d = std::max(d, 1 + height(s));
  return d;
}

std::vector<int32_t> DraftTree::subtree_preorder(int32_t id) const {
  std::vector<int32_t> out;
  std::vector<int32_t> stack{id};
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    out.push_back(n);
    const auto& kids = node(n).kids;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
  }
  return out;
}

std::vector<int32_t> DraftTree::preorder() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n_alive_));
  for (int32_t s : spine_) {
    const auto sub = subtree_preorder(s);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void DraftTree::seed(std::span<const int32_t> prompt, int32_t n_seeds, int32_t init_depth, int32_t n_vocab,
                     core::Rng& rng) {
  if (init_depth <= 0) return;
  std::vector<int32_t> pool(prompt.begin(), prompt.end());
  auto draw_remove = [&](int32_t& out) {
    if (pool.empty()) {
      if (n_vocab <= 0) return false;
      out = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(n_vocab)));
      return true;
    }
    const auto i = static_cast<size_t>(rng.uniform_int(pool.size()));
    out = pool[i];
    pool.erase(pool.begin() + static_cast<ptrdiff_t>(i));
    return true;
  };
  for (int32_t s = 0; s < n_seeds; ++s) {
    // A distinct spine token (spine tokens are unique, as in the reference's dict of children).
    int32_t head = -1;
    bool ok = false;
    for (int attempt = 0; attempt < 64; ++attempt) {
      if (!draw_remove(head)) break;
      if (!is_spine_token(head)) {
        ok = true;
        break;
      }
    }
    if (!ok) return;
    int32_t cur = add(head, -1);
    const auto len = 1 + static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(init_depth)));
    for (int32_t j = 1; j < len; ++j) {
      // Drawn with replacement from what is left of the prompt.
      int32_t t;
      if (!pool.empty()) {
        t = pool[static_cast<size_t>(rng.uniform_int(pool.size()))];
      } else if (n_vocab > 0) {
        t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(n_vocab)));
      } else {
        break;
      }
      cur = add(t, cur);
    }
  }
}

int32_t DraftTree::grow(int32_t width) {
  int32_t added = 0;
  for (int32_t id : preorder()) {  // fixed before any child is added: new nodes wait a step
    const int32_t p = pred(id);
    if (p < 0 || find_child(id, p) >= 0) continue;
    if (static_cast<int32_t>(node(id).kids.size()) >= width) continue;
    add(p, id);
    ++added;
  }
  return added;
}

void DraftTree::maintain_spine(int32_t spine_size, int32_t fallback) {
  if (static_cast<int32_t>(spine_.size()) > spine_size) remove_subtree(spine_.front());
  if (static_cast<int32_t>(spine_.size()) >= spine_size) return;
  int32_t v = fallback;
  if (!spine_.empty()) {
    const int32_t last = spine_.back();
    v = pred(last);
    if (v < 0) return;
    if (const int32_t dup = find_child(last, v); dup >= 0) remove_subtree(dup);
  }
  if (v < 0 || is_spine_token(v)) return;
  add(v, -1);
}

int32_t DraftTree::slide(int32_t max_depth, int32_t width) {
  int32_t changed = 0;
  const std::vector<int32_t> spine_before = spine_;
  for (int32_t s : spine_before) {
    if (!alive(s) || height(s) < max_depth) continue;
    ++changed;
    int32_t heir = -1;
    for (int32_t c : node(s).kids) {
      if (!is_spine_token(tok(c))) {
        heir = c;
        break;
      }
    }
    if (heir < 0) {
      remove_subtree(s);
      continue;
    }
    // Drop the siblings, then lift the heir to the end of the spine.
    const std::vector<int32_t> kids = node(s).kids;
    for (int32_t c : kids) {
      if (c != heir) remove_subtree(c);
    }
    DraftNode& sn = nodes_[static_cast<size_t>(s)];
    sn.kids.clear();
    spine_.erase(std::find(spine_.begin(), spine_.end(), s));
    sn.alive = false;
    free_.push_back(s);
    --n_alive_;
    nodes_[static_cast<size_t>(heir)].parent = -1;
    spine_.push_back(heir);
  }
  // Width cap (normally a no-op: grow never exceeds it).
  for (int32_t id : preorder()) {
    while (alive(id) && static_cast<int32_t>(node(id).kids.size()) > width) remove_subtree(node(id).kids.back());
  }
  return changed;
}

int32_t DraftTree::prune_eos(std::span<const int32_t> eog, int32_t climb) {
  if (eog.empty()) return 0;
  int32_t cut = 0;
  for (int32_t id : preorder()) {
    // Nodes already cut with an earlier subtree are skipped (the reference walks stale
    // nodes too, which can cut a live ancestor twice; see README).
    if (!alive(id) || std::find(eog.begin(), eog.end(), tok(id)) == eog.end()) continue;
    int32_t a = id;
    for (int32_t i = 0; i < climb && node(a).parent >= 0; ++i) a = node(a).parent;
    remove_subtree(a);
    ++cut;
  }
  return cut;
}

int32_t DraftTree::trim_to(int32_t max_nodes) {
  int32_t removed = 0;
  while (n_alive_ > max_nodes) {
    // 1. The newest branch: a non-spine node that is not its parent's first child (the
    //    chains of first children are what grows into long pool paths).
    int32_t victim = -1;
    for (int32_t id = 0; id < static_cast<int32_t>(nodes_.size()); ++id) {
      const DraftNode& n = nodes_[static_cast<size_t>(id)];
      if (!n.alive || n.parent < 0 || node(n.parent).kids.front() == id) continue;
      if (victim < 0 || n.born > node(victim).born) victim = id;
    }
    // 2. The oldest spine subtree (as the spine overflow rule does).
    if (victim < 0 && spine_.size() > 1) victim = spine_.front();
    // 3. A single chain: its newest node (the leaf).
    if (victim < 0) {
      for (int32_t id = 0; id < static_cast<int32_t>(nodes_.size()); ++id) {
        if (alive(id) && (victim < 0 || node(id).born > node(victim).born)) victim = id;
      }
    }
    removed += remove_subtree(victim);
  }
  return removed;
}

}  // namespace treespec::drafters::ptd
