// The budget policy of `--spec auto` (docs/auto.md): each step it picks ONE arm of the
// sequences' AutoDrafters (a method at a tree size) for the whole batch, to maximise
// measured tokens per second at this batch size.
//
// Per batch size b and arm it keeps EMAs of the step's wall time and of the tokens the
// step emitted (every sequence's 1 + accepted); the arm with the highest ratio is used.
// Exploration is paid from a budget: every exploited step adds `explore` x its time,
// shared equally, to the credit of each other arm; a trial of an arm (`trial_steps`
// consecutive steps) starts only when its expected loss (time beyond what the best arm
// would take for the same tokens; for an arm never measured, a prior from its rows) fits
// its credit, and the measured loss is charged to it. So trying arms costs at most about
// `explore` of the decode time after the warm-up (which tries the arms marked warm_up
// once each), cheap arms are re-tried often and expensive ones rarely but surely. An arm never tried at this batch size starts from the nearest batch size's
// numbers. The choice for step s + 1 is made at step s, so the arm that will draft next
// can observe step s (Drafter::select_arm's hint).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace treespec::engine {

struct AutoPolicyParams {
  double explore = 0.03;     // share of decode time for exploration
  int32_t trial_steps = 3;   // steps per trial
  double ema_alpha = 0.1;    // weight of a new step (running mean while fewer samples)
  int32_t step_budget = 0;   // cap on tree nodes per step over the batch (0 = none; roots always fit)
};

class AutoPolicy final : public BudgetPolicy {
 public:
  explicit AutoPolicy(AutoPolicyParams p);
  void plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) override;
  void observe(const StepReport& r) override;
  nlohmann::json stats_json() const override;

  struct ArmStat {
    int64_t n = 0;        // steps measured
    double tok = 0.0;     // EMA of tokens per step (all sequences)
    double sec = 0.0;     // EMA of seconds per step
    double rows = 0.0;    // EMA of rows per step
    int64_t last = -1;    // policy step of the last measurement
    int64_t picked = -1;  // policy step when last chosen
    double rate() const { return n > 0 && sec > 0.0 ? tok / sec : 0.0; }
  };
  // The table of batch size b (created from the nearest batch size's on first use).
  const std::vector<ArmStat>& table(int32_t b);
  // The best measured arm of table b (-1 when none is measured).
  int32_t best(int32_t b);
  const std::vector<drafters::ArmInfo>& arms() const { return arms_; }
  // Arm a's exploration savings (seconds).
  double credit(size_t a) const { return credit_[a]; }

 private:
  // Decides the arm of the next step at batch size b (continues a trial in progress).
  int32_t decide(int32_t b);
  double expected_loss(const std::vector<ArmStat>& t, int32_t arm, int32_t best) const;

  AutoPolicyParams p_;
  std::vector<drafters::ArmInfo> arms_;           // of the first auto sequence seen
  std::map<int32_t, std::vector<ArmStat>> by_batch_;
  std::vector<double> credit_;                    // per arm: exploration savings (seconds)
  int64_t step_ = 0;
  // The decision for the coming step and the trial it belongs to.
  int32_t next_arm_ = -1, next_b_ = 0;
  bool next_explore_ = false;
  double next_reserved_ = 0.0;     // credit reserved for the step (its expected loss)
  int32_t run_arm_ = -1, run_left_ = 0;
  double run_reserved_ = 0.0;
  // The step in flight.
  int32_t cur_arm_ = -1, cur_b_ = 0;
  bool cur_explore_ = false;
  double cur_reserved_ = 0.0;
  // Statistics.
  int64_t n_steps_ = 0, n_explore_ = 0, n_trials_ = 0;
};

}  // namespace treespec::engine
