// Tree verifiers: given a TokenTree and the target model's logits at its nodes, pick the
// accepted root-to-node path and the bonus token that follows it.
//
// - greedy: exact; the output equals plain greedy decoding token for token.
// - coupled: exact in distribution AND the same tokens as plain sampling with the same
//   seed (sampling::coupled_sample): the token after node i is the coupled sample of
//   i's logits at its absolute position, and the walk follows the child with that token,
//   exactly as greedy verification follows the argmax. The default at temp > 0.
// - lossless: SpecInfer-style multi-step speculative sampling; the emitted tokens have
//   exactly the target distribution (temperature / top-k / top-p / min-p applied).
//   Children are point-mass drafts (accept c with probability p(c), zero it and
//   renormalise on rejection), or, when the drafter supplies the distribution q its
//   children were drawn from, accept with min(1, p/q) and continue with the residual
//   norm(max(p - q, 0)).
// - typical: Medusa's typical acceptance, a fast LOSSY option for temp > 0.
// - ptd_reference: the PTD reference code's sampling walk, LOSSY, kept only so PTD's
//   lossless fix can be measured against it: point-mass acceptance with children tried
//   newest first, and the ARGMAX of the residual (not a sample) when every child is
//   rejected or at a leaf; a root without candidate children samples normally.
//
// Nodes whose logits pointer is null (pruned before the last layer) cannot be accepted
// as a path node. In the lossless walk a pruned child drawn from q is still tested at its
// parent (skipping it would bias the output toward tokens that survive pruning); if it
// passes, its token is the bonus and the walk stops there. Pruned point-mass children
// are skipped (they and their pruning are deterministic functions of the context).
// Each rejection costs O(|p|): q is looked up in a dense table, not searched.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "sampling/sampling.h"
#include "tree/token_tree.h"

namespace treespec::verify {

enum class Mode { greedy, coupled, lossless, typical, ptd_reference };
const char* mode_name(Mode m);

struct TypicalParams {
  float threshold = 0.09f;  // epsilon (Medusa posterior_threshold)
  float alpha = 0.3f;       // delta (Medusa posterior_alpha)
};

struct VerifyResult {
  std::vector<int32_t> path;  // accepted nodes, starting with the root 0
  int32_t bonus = -1;         // token after the last accepted node
  int32_t n_accepted() const { return static_cast<int32_t>(path.size()) - 1; }
};

// node_logits[i]: logits row of node i (n_vocab floats) or nullptr if node i was pruned.
VerifyResult verify_greedy(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab);

// pos0: absolute position of the token that follows the root (the sequence's context
// length); node i's successor is sampled at pos0 + depth(i).
VerifyResult verify_coupled(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                            const sampling::SamplingParams& params, int64_t pos0);

// q_of_children[i]: the distribution node i's children were sampled from, or nullptr for
// point-mass (deterministic) children. Empty span = all point masses.
VerifyResult verify_lossless(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                             const sampling::SamplingParams& params, core::Rng& rng,
                             std::span<const sampling::Distribution* const> q_of_children = {});

VerifyResult verify_typical(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                            const sampling::SamplingParams& params, const TypicalParams& typical, core::Rng& rng);

VerifyResult verify_ptd_reference(const tree::TokenTree& tree, std::span<const float* const> node_logits,
                                  int32_t n_vocab, const sampling::SamplingParams& params, core::Rng& rng);

// Dispatch: greedy whenever params.greedy(); otherwise coupled, typical or the PTD
// reference walk for those modes, else lossless (Mode::greedy with temp > 0 still samples
// losslessly: it never ignores temp). pos0 is used by the coupled walk only.
VerifyResult verify(Mode mode, const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                    const sampling::SamplingParams& params, const TypicalParams& typical, core::Rng& rng,
                    std::span<const sampling::Distribution* const> q_of_children = {}, int64_t pos0 = 0);

}  // namespace treespec::verify
