#include "engine/row_logits.h"

#include <algorithm>

#include "core/assert.h"

namespace treespec::engine {

void process_tree_row(float* row, int32_t n_vocab, const sampling::SamplingParams& params,
                      std::span<const int32_t> context, const tree::TokenTree& tree, int32_t node,
                      std::vector<int32_t>& path) {
  if (!params.processes_logits()) return;
  path.clear();
  if (params.penalized()) {
    for (int32_t k = node; k > 0; k = tree.parent(k)) path.push_back(tree.token(k));
    std::reverse(path.begin(), path.end());
  }
  sampling::process_logits(row, n_vocab, context, path, params);
}

void append_logprobs(std::vector<sampling::TokenLogprob>& out, std::span<const float* const> node_logits,
                     std::span<const int32_t> path, std::span<const int32_t> tokens, int32_t n_vocab, int32_t n_top) {
  TREESPEC_ASSERT(tokens.size() == path.size(), "logprobs: one emitted token per accepted path node");
  for (size_t k = 0; k < tokens.size(); ++k) {
    const float* row = node_logits[static_cast<size_t>(path[k])];
    TREESPEC_ASSERT(row != nullptr, "logprobs: an accepted node has logits");
    out.push_back(sampling::token_logprob(row, n_vocab, tokens[k], n_top));
  }
}

}  // namespace treespec::engine
