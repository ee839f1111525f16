// What Engine::step does to one sequence's tree rows besides verifying them: the logits
// processing each row gets with its own history (logit bias, then penalties), and the
// log-probabilities of the emitted tokens. Kept out of engine.cpp so the step loop only
// calls them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling.h"
#include "tree/token_tree.h"

namespace treespec::engine {

// sampling::process_logits on the row of tree node `node`, whose history is `context`
// (the committed tokens, the root included) followed by the tree tokens on the path from
// the root to the node: exactly what plain decoding computes at that position. `path` is
// scratch. No-op unless params.processes_logits().
void process_tree_row(float* row, int32_t n_vocab, const sampling::SamplingParams& params,
                      std::span<const int32_t> context, const tree::TokenTree& tree, int32_t node,
                      std::vector<int32_t>& path);

// Appends one entry per tokens[k], from the logits row of path[k] (the accepted path's
// node k; the bonus token comes from the last node), with n_top alternatives.
void append_logprobs(std::vector<sampling::TokenLogprob>& out, std::span<const float* const> node_logits,
                     std::span<const int32_t> path, std::span<const int32_t> tokens, int32_t n_vocab, int32_t n_top);

}  // namespace treespec::engine
