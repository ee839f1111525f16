// PTD: training-free progressive tree drafting inside the target model (Gao et al.,
// arXiv 2607.10661; algorithms.md §3). Each step one forward pass holds the anchor, the
// draft tree D (aux rows: only their argmax is used, to grow D) and the guess trie G =
// P[anchor] (candidate rows, verified by the engine's verifier). After the step the model's
// predictions grow D, feed back into the trie that was verified, and - once D is deep
// enough - D's paths are merged into the pool P under their first tokens.
//
// One PtdDrafter per sequence (its draft tree and pool are that request's own); the pool is
// cleared by begin(). See README.md in this folder for parameters and the differences from
// the reference code, and docs/ptd.md for the design decisions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "drafters/drafter.h"
#include "drafters/ptd/draft_tree.h"
#include "drafters/ptd/pool.h"
#include "drafters/ptd/step_layout.h"

namespace treespec::drafters {

struct PtdParams {
  // Reference defaults (configs/tree_config.json and cache_server.py of MINE-USTC/PTD).
  int32_t max_depth = 6;   // spine-subtree height that triggers sliding; D depth that enables pool insertion
  int32_t width = 4;       // W: children per draft node
  int32_t spine = 4;       // S: spine length
  int32_t init_depth = 2;  // seed chains have random length 1..init_depth
  int32_t n_seeds = 2;     // seed chains (spine nodes) at the start of a request
  int32_t trie_cap = 60;   // N_max: nodes per pool trie before the oldest branch is dropped
  int32_t eos_climb = 4;   // EOS pruning cuts the ancestor this many levels up (not past the spine)
  // Hard per-step row budgets (ours; the reference has none for D). The engine's budget
  // (DraftInput::budget) is split between the two, see split_rows().
  int32_t max_draft_rows = 64;
  int32_t max_trie_rows = 60;
  // Fixes over the reference code (algorithms.md §3.9); false reproduces the reference.
  // (The fourth fix, lossless sampling, is the verifier's: --verify lossless vs ptd-reference.)
  bool real_eos = true;       // EOS pruning at the model's end-of-generation ids, not id 2
  bool reinsert = true;       // re-insert every verified trie node's subtree under its own token
  bool live_feedback = true;  // guesses read from, and feedback applied to, the live trie by id

  static constexpr int32_t kReferenceEosId = 2;  // the reference's hard-coded Llama-2 EOS
  void validate() const;                         // InvalidArgument naming the parameter
};

class PtdDrafter final : public Drafter {
 public:
  // eog_ids: the model's end-of-generation ids (DrafterEnv::eog_ids); seed: DrafterEnv::seed;
  // n_vocab: for seeding when the prompt has too few distinct tokens (0 = off).
  PtdDrafter(const PtdParams& p, std::vector<int32_t> eog_ids, uint64_t seed, int32_t n_vocab);

  std::string name() const override { return "ptd"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  int32_t max_nodes() const override { return 1 + p_.max_draft_rows + p_.max_trie_rows; }
  std::vector<std::pair<std::string, double>> counters() const override;

  // For tests and diagnostics.
  const PtdParams& params() const { return p_; }
  ptd::DraftTree& draft() { return draft_; }
  ptd::Pool& pool() { return pool_; }
  const ptd::StepLayout& last_layout() const { return layout_; }
  // The end-of-generation ids EOS pruning uses (depends on real_eos).
  std::vector<int32_t> pruning_eos_ids() const;

 private:
  // Feedback F (and the re-insertion fix) for the trie verified this step.
  void feedback(const StepFeedback& fb);

  PtdParams p_;
  std::vector<int32_t> eog_ids_;
  uint64_t seed_;
  int32_t n_vocab_;
  core::Rng rng_;
  ptd::DraftTree draft_;
  ptd::Pool pool_;

  // Last proposed step.
  ptd::StepLayout layout_;
  int32_t anchor_ = -1;
  // Reference mode (live_feedback = false): the guess trie is the copy of P[y] taken where
  // the reference's cache server retrieves it, and verified from that copy next step.
  std::optional<ptd::Trie> ref_guess_;
  int32_t ref_guess_key_ = -1;
  // The trie the step's guess rows came from (copy in reference mode).
  std::optional<ptd::Trie> step_snapshot_;

  struct Stats {
    int64_t steps = 0;     // proposals
    int64_t observed = 0;  // steps with feedback
    int64_t draft_rows = 0;
    int64_t trie_rows = 0;
    int64_t max_draft_rows = 0;
    int64_t max_trie_rows = 0;
    int64_t accepted = 0;        // trie tokens accepted (excl. the bonus)
    int64_t budget_trimmed = 0;  // draft nodes dropped to fit the row budget
    int64_t grown = 0;
    int64_t slides = 0;
    int64_t eos_cuts = 0;
    int64_t insert_steps = 0;  // steps whose draft snapshot was merged into the pool
  } st_;
};

}  // namespace treespec::drafters
