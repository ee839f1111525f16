#include "grammar/token_mask.h"

#include <algorithm>
#include <limits>

namespace treespec::grammar {

TokenMask::TokenMask(std::vector<std::string> pieces, const std::vector<int32_t>& eog_ids)
    : pieces_(std::move(pieces)), eog_(pieces_.size(), 0) {
  for (int32_t id : eog_ids) {
    if (id >= 0 && id < n_vocab()) {
      eog_[static_cast<size_t>(id)] = 1;
      eog_ids_.push_back(id);
    }
  }
  trie_.emplace_back();
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const std::string& p = pieces_[static_cast<size_t>(id)];
    if (p.empty() || eog_[static_cast<size_t>(id)]) continue;
    int32_t n = 0;
    for (const char ch : p) {
      const auto b = static_cast<uint8_t>(ch);
      auto& kids = trie_[static_cast<size_t>(n)].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, INT32_MIN));
      if (it != kids.end() && it->first == b) {
        n = it->second;
      } else {
        const auto fresh = static_cast<int32_t>(trie_.size());
        kids.insert(it, {b, fresh});
        trie_.emplace_back();  // invalidates `kids`: not used after this
        n = fresh;
      }
    }
    trie_[static_cast<size_t>(n)].tokens.push_back(id);
  }
}

bool TokenMask::allows(const State& s, int32_t tok) const {
  if (tok < 0 || tok >= n_vocab() || s.dead()) return false;
  if (eog_[static_cast<size_t>(tok)]) return s.can_end();
  const std::string& p = pieces_[static_cast<size_t>(tok)];
  return !p.empty() && !s.advance(p).dead();
}

State TokenMask::advance(const State& s, int32_t tok) const {
  if (is_eog(tok)) return s;
  return s.advance(pieces_[static_cast<size_t>(tok)]);
}

void TokenMask::walk(int32_t node, const State& s, std::vector<uint8_t>& out) const {
  for (const auto& [b, kid] : trie_[static_cast<size_t>(node)].kids) {
    const char ch = static_cast<char>(b);
    State next = s.advance(std::string_view(&ch, 1));
    if (next.dead()) continue;
    for (int32_t tok : trie_[static_cast<size_t>(kid)].tokens) out[static_cast<size_t>(tok)] = 1;
    walk(kid, next, out);
  }
}

std::vector<uint8_t> TokenMask::allowed(const State& s) const {
  std::vector<uint8_t> out(pieces_.size(), 0);
  if (!s.dead() && !s.must_end()) walk(0, s, out);
  const bool any = std::find(out.begin(), out.end(), uint8_t{1}) != out.end();
  if (s.can_end() || !any) {
    for (int32_t id : eog_ids_) out[static_cast<size_t>(id)] = 1;
  }
  return out;
}

void TokenMask::apply(const State& s, float* logits) const {
  const std::vector<uint8_t> ok = allowed(s);
  for (size_t i = 0; i < ok.size(); ++i) {
    if (!ok[i]) logits[i] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace treespec::grammar
