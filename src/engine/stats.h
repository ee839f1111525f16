// Speculative-decoding statistics with vLLM's definitions:
//   num_drafts          steps that verified at least one drafted token
//   num_draft_tokens    drafted (candidate, non-root) tokens verified
//   num_accepted_tokens drafted tokens accepted
//   accepted_per_pos[d] accepted tokens at draft position d (depth d + 1)
//   acceptance rate     = num_accepted_tokens / num_draft_tokens
//   mean acceptance length (vLLM) = 1 + num_accepted_tokens / num_drafts
//   per-position acceptance rate (vLLM) = accepted_per_pos[d] / num_drafts
// and ours, over every step (steps that drafted nothing count too, so this is the
// number that decides speed):
//   mean accepted length = (num_accepted_tokens + steps) / steps = tokens per step incl.
//                          the bonus token (before EOG / -n truncation)
//   acceptance by depth[d] = accepted_per_pos[d] / steps that drafted depth d + 1
// plus rows fed per step (aux rows included) and the time split
// draft / forward / verify / commit.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace treespec::engine {

struct SpecStats {
  int64_t n_prompt = 0;         // prompt tokens
  int64_t n_prompt_cached = 0;  // of them, cells reused from another sequence (prefix cache)
  int64_t n_generated = 0;      // tokens emitted
  int64_t n_steps = 0;          // verification steps (one per sequence per decode step)
  int64_t n_forwards = 0;       // decode forward passes (a batched pass counts once)
  int64_t n_drafts = 0;
  int64_t n_draft_tokens = 0;
  int64_t n_accepted = 0;
  int64_t n_rows = 0;  // tree rows fed to the model in decode steps
  // Early pruning (ProPD): steps whose tree went through the prune test, their rows, the
  // rows removed before the late layers, and rows x (layers skipped / n_layer) summed.
  int64_t n_prune_steps = 0;
  int64_t n_prune_rows = 0;
  int64_t n_pruned = 0;
  double pruned_row_layers = 0.0;
  std::vector<int64_t> accepted_per_pos;
  std::vector<int64_t> drafted_per_pos;  // steps that had a candidate at depth d + 1
  double t_prompt = 0.0;                 // seconds
  double t_draft = 0.0;
  double t_forward = 0.0;
  double t_verify = 0.0;
  double t_commit = 0.0;  // KV commit + drafter observe + bookkeeping

  double t_decode() const { return t_draft + t_forward + t_verify + t_commit; }
  double mean_accepted_length() const;    // tokens per decode step incl. bonus (all steps)
  double mean_acceptance_length() const;  // vLLM: 1 + accepted / num_drafts
  double acceptance_rate() const;
  double rows_per_step() const;
  double tokens_per_s() const;  // generated / decode time
  void record_step(int32_t tree_rows, int32_t max_candidate_depth, int32_t n_candidates, int32_t n_accepted);
  // One pruned tree: rows fed, rows pruned after `layer` of `n_layer` layers.
  void record_prune(int32_t tree_rows, int32_t n_pruned_rows, int32_t layer, int32_t n_layer);
  double pruned_fraction() const;         // late-layer rows removed / rows of pruned trees
  double compute_saved_fraction() const;  // row-layers skipped / row-layers of a full forward (all steps)
  void merge(const SpecStats& o);
  nlohmann::json to_json() const;
  std::string summary() const;  // one human line
};

}  // namespace treespec::engine
