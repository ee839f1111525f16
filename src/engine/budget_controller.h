// The budget controller: ProPD's dynamic tree generation (algorithms.md §2.4) made a
// tree-budget policy every drafter can use (docs/propd.md).
//
// Each planned step it picks how many tree nodes every sequence of the batch gets, to
// maximise expected tokens per second:
//
//   maximise  (b + c * sum_i E_i(n_i)) / t(b, rows_eff(n_1..n_b), s)
//
// - E_i(n): expected accepted drafted tokens of sequence i with an n-node tree: the
//   drafter's own acceptance model (Drafter::expected_accepted: ProPD / Medusa compute it
//   from their live per-(depth, rank) table over nested best-first trees) or, for drafters
//   without one, a curve learned from outcomes per budget octave (a cold octave is swept
//   once, where an optimistic acceptance says it may pay: sweep_may_pay). c corrects the
//   models by measured / predicted acceptance (EMA).
// - One step token budget is shared by the batch: nodes are handed out greedily by
//   marginal gain (optimal for concave E_i), and the total is chosen by the ratio above.
// - t: a latency model fitted by weighted least squares on measured steps (LatencyModel),
//   primed by a start-up sweep (calibrate). With early pruning, rows_eff counts a node
//   at l_p / L of a row plus (1 - l_p / L) times its survival probability, which is
//   learned per node index from the engine's pruning outcomes.
// Re-planned every `interval` steps and whenever the set of sequences changes; every
// `explore_every`-th plan tries a neighbouring total (twice / half) so the latency model
// keeps seeing both sides of the optimum.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace treespec::drafters {
class SpecConfig;
}

namespace treespec::engine {

// t(b, r, s) = c0 + c1 b + c2 r + c3 r s + c4 b s: fixed cost, per-sequence cost,
// per-row cost (weights / FFN / projections), attention over the context per row, and KV
// reads per sequence; b = sequences, r = effective rows (row-layers / n_layer), s = mean
// context. Fitted by weighted least squares: sample weights halve every `half_life`
// steps (recent samples weigh more), and a local fit around a query point weighs samples
// by their distance in log2(r) and log2(b) (nearby samples weigh more), shrunk towards
// the global fit where local data is thin. Start-up sweep samples are a prior: they keep
// `prior_weight` and never age.
class LatencyModel {
 public:
  static constexpr int kFeatures = 5;
  using Coef = std::array<double, kFeatures>;
  struct Options {
    double half_life = 200.0;  // steps
    double prior_weight = 0.25;
    double bandwidth_octaves = 1.0;  // local kernel width in log2(rows) and log2(batch)
    double local_shrink = 0.05;      // ridge towards the global fit, relative to the data's own scale
    int32_t max_samples = 256;       // online samples kept (oldest dropped)
  };

  LatencyModel() = default;
  explicit LatencyModel(Options o) : o_(o) {}

  static Coef features(double b, double r, double s);
  void add(double b, double r, double s, double seconds, bool prior = false);
  void tick() { ++now_; }  // one step passed (ages the online samples)
  size_t size() const { return online_.size() + prior_.size(); }
  size_t n_prior() const { return prior_.size(); }

  // Global fit (recency weights only).
  Coef fit_global() const;
  // The local fit evaluated at its own point, floored at a small positive time (`global`:
  // a fit_global() the caller already has).
  double predict(double b, double r, double s) const;
  double predict(double b, double r, double s, const Coef& global) const;
  static double eval(const Coef& c, double b, double r, double s);

 private:
  struct Sample {
    double b, r, s, t;
    int64_t at;
  };
  Coef solve(double b, double r, double s, bool local, const Coef* towards) const;

  Options o_;
  std::vector<Sample> online_;  // ring buffer of max_samples
  size_t next_ = 0;
  std::vector<Sample> prior_;
  int64_t now_ = 0;
};

// The start-up latency sweep: synthetic verification forwards (Engine::probe_step) of 1,
// 2, 4, ... n_max rows per sequence after `ctx` committed cells, for one sequence and for
// all free slots, each the fastest of `reps`, a batch size's sweep stopping past
// `max_ratio` x its one-row time; added to `lat` as prior samples. Returns the points.
// A sweep with the same key ran by an earlier process is reused from the latency cache
// (engine/latency_profile.h; *cached says so) instead of measured again.
int32_t probe_latency(Engine& eng, LatencyModel& lat, int32_t n_max, int32_t ctx, double max_ratio, int32_t reps,
                      bool* cached = nullptr);

struct ControllerParams {
  int32_t n_max = 64;            // largest tree per sequence (nodes incl. the root)
  int32_t interval = 8;          // re-plan every R steps (and when the batch changes)
  int32_t explore_every = 8;     // every k-th plan tries twice / half the chosen total (0 = never)
  bool probe = true;             // start-up latency sweep (calibrate)
  int32_t probe_ctx = 64;        // context of the sweep's synthetic steps
  double probe_max_ratio = 6.0;  // the sweep stops growing a batch size past this x one row's time
  int32_t probe_reps = 2;        // repetitions per sweep point (the minimum is kept)
  LatencyModel::Options latency;
  int32_t step_budget = 0;     // cap on tree nodes per step over the whole batch (0 = none; roots always fit)
  int32_t trace_steps = 2048;  // per-step trace kept for stats_json (0 = none)
  void validate() const;       // InvalidArgument naming the field
};

class BudgetController final : public BudgetPolicy {
 public:
  BudgetController(ControllerParams p, int32_t n_layer);

  // The start-up sweep: synthetic steps of 1, 2, 4, ... n_max rows per sequence for one
  // sequence and for as many as the engine has free slots (Engine::probe_step).
  void calibrate(Engine& eng);

  void plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) override;
  double min_node_value() const override { return min_value_; }
  void observe(const StepReport& r) override;
  nlohmann::json stats_json() const override;

  // The decision on plain numbers. gains[i][n-1] = E_i(n) (gains[i][0] = 0; the size of
  // gains[i] is sequence i's cap); f_early[i] = share of the layers every row runs (1 =
  // no pruning). Returns budgets (nodes incl. the root) and the prediction.
  struct Choice {
    std::vector<int32_t> budgets;
    double predicted_s = 0.0;
    double expected_tokens = 0.0;  // b + c * sum E_i
    double rows_eff = 0.0;
    // Break-even chance of acceptance of one more node at this size (drafter units):
    // score * (marginal seconds per node) / correction; 0 where extra rows cost nothing.
    double min_value = 0.0;
  };
  Choice choose(double mean_ctx, const std::vector<std::vector<double>>& gains, const std::vector<double>& f_early,
                int32_t force_extra = -1) const;

  const LatencyModel& latency() const { return latency_; }
  LatencyModel& latency() { return latency_; }
  const ControllerParams& params() const { return p_; }
  double acceptance_correction() const;
  // Survival probability of node index j under pruning (1 before any pruning is seen).
  double survival(int32_t node) const;

 private:
  // Learned E(n) per budget octave for drafters without their own model.
  struct Empirical {
    std::vector<double> acc;  // EMA of accepted per step, by octave floor(log2 n)
    std::vector<int64_t> cnt;
  };
  void curve_for(const Sequence& s, int32_t cap, std::vector<double>& out, bool& modelled);
  // Whether sweeping cold octave k (every sequence 2^k nodes) could beat `best` under an
  // optimistic acceptance bound (budget_controller.cpp); false = not worth its steps.
  bool sweep_may_pay(std::span<Sequence* const> seqs, std::span<const int32_t> caps,
                     const std::vector<std::vector<double>>& gains, const std::vector<bool>& modelled, int32_t k,
                     const Choice& best) const;
  static int32_t octave(int32_t n);

  ControllerParams p_;
  int32_t n_layer_;
  LatencyModel latency_;
  std::map<std::string, Empirical> empirical_;  // by drafter name
  std::vector<double> surv_;                    // [n_max] survival EMA per node index
  std::vector<int64_t> surv_cnt_;
  double acc_pred_ = 0.0, acc_meas_ = 0.0;  // EMAs for the acceptance correction
  // Per step shape (sequences, late rows x 4096 + rows): EMA of log seconds and count (outlier clipping).
  std::map<std::pair<int32_t, int64_t>, std::pair<double, int64_t>> step_log_time_;

  // Current plan.
  std::vector<const Sequence*> planned_seqs_;
  std::vector<int32_t> planned_budgets_;
  std::vector<double> planned_pred_;  // E_i at the planned budget (for the correction)
  double planned_t_ = 0.0;
  double planned_mean_ctx_ = 0.0;  // mean context of the last measured step
  double min_value_ = 0.0;         // the plan's node value floor (min_node_value)
  int64_t steps_since_plan_ = 0;
  int64_t interval_now_ = 1;  // steps the current plan holds
  // The last plan that was not an exploration, and its interval (R, doubled while plans
  // repeat, up to 8R).
  std::vector<int32_t> exploit_budgets_;
  int64_t exploit_interval_ = 1;
  int64_t n_plans_ = 0;
  bool exploring_ = false;

  // Statistics.
  int64_t n_steps_ = 0, n_explore_ = 0, n_probe_ = 0;
  double probe_s_ = 0.0;
  bool probe_cached_ = false;  // the sweep came from the latency cache
  double sum_pred_ = 0.0, sum_meas_ = 0.0, sum_abs_err_ = 0.0;
  int64_t n_pred_ = 0;
  double sum_nodes_ = 0.0, sum_tree_ = 0.0, sum_late_ = 0.0;  // granted budgets, proposed nodes, late rows
  int64_t n_seq_steps_ = 0;
  std::map<int32_t, int64_t> hist_;  // budget granted -> sequence-steps
  struct TraceRow {
    int32_t b;
    double nodes, late, pred, meas;
  };
  std::vector<TraceRow> trace_;
};

// A fixed budget for every sequence (`--budget N`).
class FixedBudgetPolicy final : public BudgetPolicy {
 public:
  explicit FixedBudgetPolicy(int32_t budget) : budget_(budget) {}
  void plan(std::span<Sequence* const>, std::span<int32_t> budgets) override;

 private:
  int32_t budget_;
};

// The one place run, bench and serve get their tree-budget policy from a SpecConfig:
// when every drafter uses its own size (the default), null, or with a `step_budget` the
// StepBudgetPolicy that splits it (the server's --step-budget); a FixedBudgetPolicy for
// `--budget N`, a calibrated BudgetController for `--budget dynamic` (alias `auto`) and
// for `--spec propd` unless `--propd-static-tree`, the AutoPolicy for `--spec auto`
// (which takes no --budget). `step_budget` (> 0) caps the nodes of a whole step for the
// controller and the auto policy (a server's shared step budget; the fixed budget
// ignores it). InvalidArgument on a bad value.
std::unique_ptr<BudgetPolicy> make_budget_policy(const drafters::SpecConfig& cfg, Engine& eng, int32_t step_budget = 0);

}  // namespace treespec::engine
