// The budget policy of `--spec auto` (docs/auto.md): each step it picks ONE arm of the
// sequences' AutoDrafters (a method at a tree size) for the whole batch, the one with the
// highest predicted tokens per second at this batch size:
//
//   rate(a, b) = b * tok(a) / (t_fwd(b, b * rows(a), s) + overhead(a))
//
// - tok(a), rows(a): EMAs of the arm's ArmSamples per sequence and step; shadowed arms
//   (none, lookup, Medusa's sizes) are graded on every step they are ready for, whoever
//   drafted it, the others (PTD, the draft model) only on the steps they run. tok(a) is
//   the mean over the batch of each sequence's own estimate (Drafter::arm_acceptance)
//   shrunk towards the batch-wide EMA: acceptance depends on the text.
// - t_fwd: the verification forward's latency model (LatencyModel, as the ProPD budget
//   controller's), primed by the start-up sweep and fitted on every measured step.
// - overhead(a): EMA of the step's time beyond the forward (drafting, verification,
//   Medusa's heads) measured on the arm's own steps (plain decoding's until it has run).
//
// Arms that are not shadowed are explored by trials paid from a budget: every exploited
// step adds `explore` x its time, shared equally, to the credit of each of them; a trial
// (`trial_steps` consecutive steps) starts when its expected loss (time beyond what the
// best arm would take for the same tokens; for an arm never run, from its rows at the best
// arm's tokens) fits the arm's credit, and the measured loss is charged. Arms marked
// warm_up are tried once first. An arm never measured at this batch size starts from the
// nearest batch size's numbers. The arm for step s + 1 is chosen at step s, so the arm
// that drafts next can observe step s (Drafter::select_arm's hint).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/budget_controller.h"
#include "engine/engine.h"

namespace treespec::engine {

struct AutoPolicyParams {
  double explore = 0.01;    // share of decode time for trials
  int32_t trial_steps = 3;  // steps per trial
  double ema_alpha = 0.03;  // weight of a new sample (running mean while fewer)
  int32_t step_budget = 0;  // cap on tree nodes per step over the batch (0 = none; roots always fit)
  int32_t probe_max_nodes = 64;
  // Arms that must observe to be graded (Medusa's heads, ArmInfo::observes) are graded on
  // one sequence every shadow_every-th step, every 4 x shadow_every-th while none of them
  // is within 10% of the best arm.
  int32_t shadow_every = 4;
  LatencyModel::Options latency;
};

class AutoPolicy final : public BudgetPolicy {
 public:
  explicit AutoPolicy(AutoPolicyParams p);
  // The start-up latency sweep (probe_latency).
  void calibrate(Engine& eng);

  void plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) override;
  void observe(const StepReport& r) override;
  nlohmann::json stats_json() const override;

  struct ArmStat {
    int64_t n = 0;        // samples
    double tok = 0.0;     // EMA of tokens per sequence and step
    double rows = 0.0;    // EMA of rows per sequence and step
    int64_t runs = 0;     // steps it drafted
    double sec = 0.0;     // EMA of the seconds of its steps
    double ovh = 0.0;     // EMA of its steps' seconds beyond the forward
    int64_t picked = -1;  // policy step when last chosen
  };
  // The table of batch size b (created from the nearest batch size's on first use).
  const std::vector<ArmStat>& table(int32_t b);
  // For a batch size whose table exists: predicted seconds of a step of `arm`, its tokens
  // per second, and the arm with the highest predicted rate among those measured (-1
  // when none is).
  double predicted_time(int32_t b, int32_t arm) const;
  double rate(int32_t b, int32_t arm) const;
  int32_t best(int32_t b) const;
  const std::vector<drafters::ArmInfo>& arms() const { return arms_; }
  LatencyModel& latency() { return lat_; }
  void refit();  // after samples were added to latency() directly
  // Arm a's exploration savings (seconds).
  double credit(size_t a) const { return credit_[a]; }

 private:
  std::vector<ArmStat>& table_mut(int32_t b);
  bool measured(const ArmStat& s, size_t arm) const;
  // Decides the arm of the next step at batch size b (continues a trial in progress).
  int32_t decide(int32_t b);
  double expected_loss(int32_t b, int32_t arm, int32_t best) const;
  // Tokens per step of `arm` for the batch planned now (the sequences' own estimates
  // blended with the table's; the table's alone outside a plan), shrunk towards 1 while
  // the arm has few samples. t_arm: predicted_time(b, arm), when the caller has it.
  double tok_of(int32_t b, int32_t arm) const { return tok_of(b, arm, predicted_time(b, arm)); }
  double tok_of(int32_t b, int32_t arm, double t_arm) const;
  void blend_sequences(int32_t b, std::span<Sequence* const> seqs);

  AutoPolicyParams p_;
  LatencyModel lat_;
  LatencyModel::Coef global_{};                                      // lat_'s global fit (refit() after each sample)
  mutable std::map<std::pair<int32_t, int64_t>, double> fwd_cache_;  // (b, 8 x rows) -> predicted forward seconds
  int32_t kept_ = -1;                                                // the arm exploited last
  std::vector<drafters::ArmInfo> arms_;  // of the first auto sequence seen; arm 0 is none (plain decoding)
  std::map<int32_t, std::vector<ArmStat>> by_batch_;
  std::vector<double> credit_;   // per arm: exploration savings (seconds)
  double mean_ctx_ = 0.0;        // of the last measured step
  std::vector<double> now_tok_;  // tok_of for the batch planned now
  int32_t now_b_ = 0;
  int64_t step_ = 0;
  // Which sequence gets the shadow grade at this plan (-1: none).
  int32_t shadow_pick(int32_t b, size_t n_seqs) const;
  // The decision for the coming step and the trial it belongs to.
  int32_t next_arm_ = -1, next_b_ = 0;
  bool next_explore_ = false;
  double next_reserved_ = 0.0;  // credit reserved for the step (its expected loss)
  int32_t run_arm_ = -1, run_left_ = 0;
  double run_reserved_ = 0.0;
  // The step in flight.
  int32_t cur_arm_ = -1, cur_b_ = 0;
  bool cur_explore_ = false;
  double cur_reserved_ = 0.0;
  std::vector<Sequence*> cur_seqs_;           // its auto sequences (samples are taken from them)
  std::vector<drafters::ArmSample> samples_;  // scratch
  // Statistics.
  int64_t n_steps_ = 0, n_explore_ = 0, n_trials_ = 0, n_probe_ = 0, n_samples_ = 0;
  double probe_s_ = 0.0;
  bool probe_cached_ = false;  // the sweep came from the latency cache
};

}  // namespace treespec::engine
