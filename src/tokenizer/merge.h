// Greedy pairwise merging shared by the SentencePiece-BPE tokenizer (highest score
// first) and the byte-level BPE tokenizer (lowest merge rank first): symbols form a
// linked list; the best adjacent pair is merged, its new neighbours are queued, stale
// queue entries are skipped. Ties go to the leftmost pair. Internal to the module.
#pragma once

#include <cstddef>
#include <optional>
#include <queue>
#include <vector>

namespace treespec::tokenizer {

// One symbol: input units [start, start + n) with links to its live neighbours
// (-1: none). n == 0 marks a symbol merged into its left neighbour.
struct MergeSymbol {
  int prev;
  int next;
  size_t start;
  size_t n;
};

// Merges `sym` in place. priority_of(l, r) -> std::optional<P>: the priority of merging
// symbols l and r, or nullopt if they cannot merge; better(a, b): priority a is merged
// before priority b. Walk the result with `for (i = 0; i >= 0; i = sym[i].next)`.
template <typename P, typename Better, typename PriorityOf>
void merge_symbols(std::vector<MergeSymbol>& sym, Better better, PriorityOf priority_of) {
  struct Bigram {
    int left;
    int right;
    P priority;
    size_t size;  // units of the merged symbol, to detect stale entries
  };
  // "a comes after b": worse priority, or equal priority and further right.
  auto after = [&](const Bigram& a, const Bigram& b) {
    return better(b.priority, a.priority) || (a.priority == b.priority && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(after)> queue(after);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const MergeSymbol& l = sym[static_cast<size_t>(left)];
    const MergeSymbol& r = sym[static_cast<size_t>(right)];
    if (std::optional<P> p = priority_of(l, r)) queue.push({left, right, *p, l.n + r.n});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i - 1), static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    MergeSymbol& l = sym[static_cast<size_t>(b.left)];
    MergeSymbol& r = sym[static_cast<size_t>(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size || l.next != b.right) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
}

}  // namespace treespec::tokenizer
