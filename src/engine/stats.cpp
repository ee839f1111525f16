#include "engine/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace treespec::engine {

double SpecStats::mean_accepted_length() const {
  return n_steps ? static_cast<double>(n_accepted + n_steps) / static_cast<double>(n_steps) : 0.0;
}

double SpecStats::mean_acceptance_length() const {
  return n_drafts ? 1.0 + static_cast<double>(n_accepted) / static_cast<double>(n_drafts) : 1.0;
}

double SpecStats::acceptance_rate() const {
  return n_draft_tokens ? static_cast<double>(n_accepted) / static_cast<double>(n_draft_tokens) : 0.0;
}

double SpecStats::rows_per_step() const {
  return n_steps ? static_cast<double>(n_rows) / static_cast<double>(n_steps) : 0.0;
}

double SpecStats::tokens_per_s() const {
  const double t = t_decode();
  return t > 0.0 ? static_cast<double>(n_generated) / t : 0.0;
}

void SpecStats::record_step(int32_t tree_rows, int32_t max_candidate_depth, int32_t n_candidates, int32_t accepted) {
  n_steps += 1;
  n_rows += tree_rows;
  if (n_candidates > 0) {
    n_drafts += 1;
    n_draft_tokens += n_candidates;
  }
  n_accepted += accepted;
  const auto need = static_cast<size_t>(std::max(max_candidate_depth, accepted));
  if (accepted_per_pos.size() < need) accepted_per_pos.resize(need, 0);
  if (drafted_per_pos.size() < need) drafted_per_pos.resize(need, 0);
  for (int32_t d = 0; d < max_candidate_depth; ++d) drafted_per_pos[static_cast<size_t>(d)] += 1;
  for (int32_t d = 0; d < accepted; ++d) accepted_per_pos[static_cast<size_t>(d)] += 1;
}

void SpecStats::record_prune(int32_t tree_rows, int32_t n_pruned_rows, int32_t layer, int32_t n_layer) {
  n_prune_steps += 1;
  n_prune_rows += tree_rows;
  n_pruned += n_pruned_rows;
  if (n_layer > 0)
    pruned_row_layers += static_cast<double>(n_pruned_rows) * static_cast<double>(n_layer - layer) / n_layer;
}

double SpecStats::pruned_fraction() const {
  return n_prune_rows ? static_cast<double>(n_pruned) / static_cast<double>(n_prune_rows) : 0.0;
}

double SpecStats::compute_saved_fraction() const {
  return n_rows ? pruned_row_layers / static_cast<double>(n_rows) : 0.0;
}

void SpecStats::merge(const SpecStats& o) {
  n_prompt += o.n_prompt;
  n_generated += o.n_generated;
  n_steps += o.n_steps;
  n_forwards += o.n_forwards;
  n_drafts += o.n_drafts;
  n_draft_tokens += o.n_draft_tokens;
  n_accepted += o.n_accepted;
  n_rows += o.n_rows;
  n_prune_steps += o.n_prune_steps;
  n_prune_rows += o.n_prune_rows;
  n_pruned += o.n_pruned;
  pruned_row_layers += o.pruned_row_layers;
  if (accepted_per_pos.size() < o.accepted_per_pos.size()) accepted_per_pos.resize(o.accepted_per_pos.size(), 0);
  if (drafted_per_pos.size() < o.drafted_per_pos.size()) drafted_per_pos.resize(o.drafted_per_pos.size(), 0);
  for (size_t i = 0; i < o.accepted_per_pos.size(); ++i) accepted_per_pos[i] += o.accepted_per_pos[i];
  for (size_t i = 0; i < o.drafted_per_pos.size(); ++i) drafted_per_pos[i] += o.drafted_per_pos[i];
  t_prompt += o.t_prompt;
  t_draft += o.t_draft;
  t_forward += o.t_forward;
  t_verify += o.t_verify;
  t_commit += o.t_commit;
}

nlohmann::json SpecStats::to_json() const {
  nlohmann::json j;
  j["n_prompt_tokens"] = n_prompt;
  j["n_generated_tokens"] = n_generated;
  j["prompt_s"] = t_prompt;
  j["generation_s"] = t_decode();
  j["prompt_tokens_per_s"] = t_prompt > 0 ? static_cast<double>(n_prompt) / t_prompt : 0.0;
  j["tokens_per_s"] = tokens_per_s();
  j["steps"] = n_steps;
  j["forward_passes"] = n_forwards;
  j["num_drafts"] = n_drafts;
  j["num_draft_tokens"] = n_draft_tokens;
  j["num_accepted_tokens"] = n_accepted;
  j["acceptance_rate"] = acceptance_rate();
  j["mean_accepted_length"] = mean_accepted_length();
  j["mean_acceptance_length"] = mean_acceptance_length();
  j["rows_per_step"] = rows_per_step();
  j["rows_fed"] = n_rows;
  j["accepted_per_pos"] = accepted_per_pos;
  j["drafted_per_pos"] = drafted_per_pos;
  std::vector<double> by_depth, per_pos;
  for (size_t d = 0; d < accepted_per_pos.size(); ++d) {
    const int64_t drafted = d < drafted_per_pos.size() ? drafted_per_pos[d] : 0;
    by_depth.push_back(drafted ? static_cast<double>(accepted_per_pos[d]) / static_cast<double>(drafted) : 0.0);
    per_pos.push_back(n_drafts ? static_cast<double>(accepted_per_pos[d]) / static_cast<double>(n_drafts) : 0.0);
  }
  j["acceptance_by_depth"] = by_depth;
  j["per_pos_acceptance_rate"] = per_pos;
  if (n_prune_steps > 0) {
    j["pruning"] = {{"steps", n_prune_steps},
                    {"rows", n_prune_rows},
                    {"rows_pruned", n_pruned},
                    {"late_rows_removed_fraction", pruned_fraction()},
                    {"row_layers_saved_fraction", compute_saved_fraction()}};
  }
  j["time_s"] = {{"draft", t_draft}, {"forward", t_forward}, {"verify", t_verify}, {"commit", t_commit}};
  return j;
}

std::string SpecStats::summary() const {
  return fmt::format(
      "prompt {} tok in {:.3f} s | generated {} tok in {:.3f} s, {:.1f} tok/s | {} steps, {:.2f} tok/step, "
      "{:.1f} rows/step | {} drafts, {} drafted, {} accepted ({:.1f}%) | time draft {:.0f}% forward {:.0f}% "
      "verify {:.0f}% commit {:.0f}%",
      n_prompt, t_prompt, n_generated, t_decode(), tokens_per_s(), n_steps, mean_accepted_length(), rows_per_step(),
      n_drafts, n_draft_tokens, n_accepted, 100.0 * acceptance_rate(),
      t_decode() > 0 ? 100.0 * t_draft / t_decode() : 0.0, t_decode() > 0 ? 100.0 * t_forward / t_decode() : 0.0,
      t_decode() > 0 ? 100.0 * t_verify / t_decode() : 0.0, t_decode() > 0 ? 100.0 * t_commit / t_decode() : 0.0);
}

}  // namespace treespec::engine
