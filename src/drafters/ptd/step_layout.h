// One PTD decode step as a TokenTree (algorithms.md §3.3): the anchor x (the previous
// bonus token) is the root; then the draft tree in pre-order as aux rows, spine chained
// (spine[0] -> x, spine[k] -> spine[k-1], other draft nodes -> their tree parent); then
// the guess trie G (the pool's trie for x, minus its root) in pre-order as candidate rows
// (first-level nodes -> x, deeper nodes -> their trie parent).
//
// With position = n_past + TokenTree depth this reproduces the reference's positions:
// spine[k] at p+1+k, a draft node at tree depth d under spine[k] at p+d+k, a trie node at
// trie depth d at p+d; draft and trie rows never see each other.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tree/token_tree.h"

namespace treespec::drafters::ptd {

class DraftTree;
class Trie;

// How a step's rows are shared between the draft tree and the guess trie.
struct RowSplit {
  int32_t draft = 0;  // draft rows allowed (the tree is trimmed to this before emission)
  int32_t trie = 0;   // trie rows emitted
};

// Splits `budget` (max tree nodes including the root) between draft and trie rows:
// shares proportional to the configured maxima (draft_max : trie_max), each capped by
// its maximum and by what that side has, and any share one side cannot use goes to the
// other. Always draft + trie <= budget - 1.
RowSplit split_rows(int32_t budget, int32_t draft_max, int32_t trie_max, int32_t draft_have, int32_t trie_have);

struct StepLayout {
  tree::TokenTree tree;
  std::vector<int32_t> draft_id;  // per tree node: draft node id, or -1
  std::vector<int32_t> trie_id;   // per tree node: trie node id, or -1
  int32_t n_draft = 0;
  int32_t n_trie = 0;
};

// Builds the step tree. `trie_nodes` (ids of `trie`, ancestor-closed, any order) are the
// trie rows to emit; they are emitted in pre-order. trie may be nullptr (no guesses).
StepLayout build_step(int32_t anchor, const DraftTree& draft, const Trie* trie, std::span<const int32_t> trie_nodes);

}  // namespace treespec::drafters::ptd
