#include "engine/auto_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/assert.h"
#include "core/log.h"
#include "core/timer.h"
#include "engine/budget.h"

namespace treespec::engine {

namespace {
// An arm's credit never exceeds this many of its trials' expected loss.
constexpr double kCreditCapTrials = 1.5;
// The smallest expected loss of a trial step, as a share of the best arm's step: arms
// that tie with the best are re-tried now and then, not all the time.
constexpr double kMinLossShare = 0.02;
// The arm in use is kept unless another is predicted this much faster (no flapping
// between arms whose estimates differ by noise).
constexpr double kSwitchMargin = 0.01;
// A sequence's own acceptance estimate of an arm is shrunk towards the batch-wide one as
// if that were this many samples.
constexpr double kSeqPrior = 8.0;
// Arms that need a heads pass to be graded are graded 4x less often while their best is
// below this share of the best arm's rate.
constexpr double kShadowNear = 0.9;
}  // namespace

AutoPolicy::AutoPolicy(AutoPolicyParams p) : p_(p), lat_(p.latency) {
  TREESPEC_ASSERT(p_.trial_steps >= 1 && p_.explore >= 0.0 && p_.ema_alpha > 0.0 && p_.ema_alpha <= 1.0,
                  "auto policy: bad parameters");
}

void AutoPolicy::calibrate(Engine& eng) {
  const double t0 = core::now_s();
  const ControllerParams sweep;  // the ProPD controller's sweep settings
  n_probe_ += probe_latency(eng, lat_, p_.probe_max_nodes, sweep.probe_ctx, sweep.probe_max_ratio, sweep.probe_reps,
                            &probe_cached_);
  refit();
  probe_s_ += core::now_s() - t0;
  TS_LOG_INFO("spec auto: start-up latency sweep of {} points {} {:.3f} s", n_probe_,
              probe_cached_ ? "from the latency cache in" : "in", probe_s_);
}

void AutoPolicy::refit() {
  global_ = lat_.fit_global();
  fwd_cache_.clear();
}

std::vector<AutoPolicy::ArmStat>& AutoPolicy::table_mut(int32_t b) {
  auto it = by_batch_.find(b);
  if (it != by_batch_.end()) return it->second;
  std::vector<ArmStat> t(arms_.size());
  // Start from the nearest batch size measured (ties: the smaller), as a weak prior.
  const std::vector<ArmStat>* near = nullptr;
  int32_t dist = 0;
  for (const auto& [k, v] : by_batch_) {
    const int32_t d = std::abs(k - b);
    if (near == nullptr || d < dist) {
      near = &v;
      dist = d;
    }
  }
  if (near != nullptr) {
    for (size_t a = 0; a < t.size(); ++a) {
      t[a] = (*near)[a];
      t[a].n = std::min<int64_t>(t[a].n, 2);
      t[a].runs = std::min<int64_t>(t[a].runs, 2);
      t[a].picked = -1;
    }
  }
  return by_batch_.emplace(b, std::move(t)).first->second;
}

const std::vector<AutoPolicy::ArmStat>& AutoPolicy::table(int32_t b) { return table_mut(b); }

bool AutoPolicy::measured(const ArmStat& s, size_t arm) const { return arms_[arm].shadowed ? s.n > 0 : s.runs > 0; }

double AutoPolicy::predicted_time(int32_t b, int32_t arm) const {
  const auto& t = by_batch_.at(b);
  const ArmStat& s = t[static_cast<size_t>(arm)];
  const double rows = s.n > 0 ? s.rows : static_cast<double>(arms_[static_cast<size_t>(arm)].max_nodes);
  const double ovh = s.runs > 0 ? s.ovh : (t[0].runs > 0 ? t[0].ovh : 0.0);
  // The local fit weighs every sample: memoised per (batch, rows to 1/8) until the next refit.
  const double r = b * std::max(1.0, rows);
  const auto key = std::make_pair(b, static_cast<int64_t>(std::lround(8.0 * r)));
  auto it = fwd_cache_.find(key);
  if (it == fwd_cache_.end())
    it = fwd_cache_.emplace(key, lat_.predict(b, static_cast<double>(key.second) / 8.0, mean_ctx_, global_)).first;
  return it->second + ovh;
}

double AutoPolicy::rate(int32_t b, int32_t arm) const {
  const double t = predicted_time(b, arm);
  return b * tok_of(b, arm, t) / t;
}

double AutoPolicy::tok_of(int32_t b, int32_t arm, double t_arm) const {
  const ArmStat& s = by_batch_.at(b)[static_cast<size_t>(arm)];
  const double tok =
      now_b_ == b && static_cast<size_t>(arm) < now_tok_.size() ? now_tok_[static_cast<size_t>(arm)] : s.tok;
  // Few samples: the estimate counts as if more samples had given 1 token (no gain), as
  // many as the arm's step costs plain steps beyond one. One lucky first grade of a big
  // tree must not buy a step that costs several plain ones (at batch 4 on an AVX2 CPU,
  // five such steps were 8% of a 64-token run), while a cheap tree at batch 1 is taken
  // on its first grades.
  const auto n = static_cast<double>(s.n);
  if (arm == 0 || n <= 0.0) return tok;
  const double prior = std::max(0.0, t_arm / predicted_time(b, 0) - 1.0);
  return 1.0 + (tok - 1.0) * n / (n + prior);
}

void AutoPolicy::blend_sequences(int32_t b, std::span<Sequence* const> seqs) {
  const auto& t = table_mut(b);
  const size_t n = arms_.size();
  std::vector<double> tok(n), w(n);
  now_tok_.assign(n, 0.0);
  for (Sequence* s : seqs) {
    std::fill(tok.begin(), tok.end(), 0.0);
    std::fill(w.begin(), w.end(), 0.0);
    s->drafter().arm_acceptance(tok, w);
    for (size_t a = 0; a < n; ++a) {
      // The sequence's own estimate, shrunk towards the batch-wide one by kSeqPrior samples.
      const double prior = t[a].n > 0 ? kSeqPrior : 0.0;
      const double mix = w[a] + prior > 0.0 ? (w[a] * tok[a] + prior * t[a].tok) / (w[a] + prior) : 0.0;
      now_tok_[a] += mix / static_cast<double>(seqs.size());
    }
  }
  now_b_ = b;
}

int32_t AutoPolicy::best(int32_t b) const {
  const auto& t = by_batch_.at(b);
  int32_t best = -1;
  double best_rate = 0.0;
  for (size_t a = 0; a < t.size(); ++a) {
    if (!measured(t[a], a)) continue;
    const double r = rate(b, static_cast<int32_t>(a));
    if (best < 0 || r > best_rate) {
      best = static_cast<int32_t>(a);
      best_rate = r;
    }
  }
  return best;
}

double AutoPolicy::expected_loss(int32_t b, int32_t arm, int32_t best) const {
  const auto& t = by_batch_.at(b);
  const ArmStat& s = t[static_cast<size_t>(arm)];
  const double t_best = predicted_time(b, best);
  const double tok = s.n > 0 ? tok_of(b, arm) : tok_of(b, best);  // never measured: as good as the best
  const double per_step = predicted_time(b, arm) - b * tok / rate(b, best);
  return std::max(kMinLossShare * t_best, per_step) * p_.trial_steps;
}

int32_t AutoPolicy::decide(int32_t b) {
  next_explore_ = false;
  next_reserved_ = 0.0;
  if (run_left_ > 0) {  // a trial in progress
    --run_left_;
    next_explore_ = true;
    next_reserved_ = run_reserved_;
    return run_arm_;
  }
  auto& t = table_mut(b);
  auto start_trial = [&](int32_t arm, double reserve) {
    t[static_cast<size_t>(arm)].picked = step_;
    credit_[static_cast<size_t>(arm)] -= reserve;
    run_arm_ = arm;
    run_left_ = p_.trial_steps - 1;
    run_reserved_ = reserve / p_.trial_steps;
    next_explore_ = true;
    next_reserved_ = run_reserved_;
    ++n_trials_;
    return arm;
  };
  const int32_t bst = best(b);
  // Warm-up: every warm_up arm once, in order (its loss is charged once measured).
  for (size_t a = 0; a < t.size(); ++a) {
    if (arms_[a].warm_up && !arms_[a].shadowed && t[a].runs == 0 && t[a].picked < 0) {
      return start_trial(static_cast<int32_t>(a), bst >= 0 ? expected_loss(b, static_cast<int32_t>(a), bst) : 0.0);
    }
  }
  if (bst < 0) return 0;
  // Trials of the arms that are not shadowed: the least recently tried one whose savings
  // cover a trial's expected loss.
  int32_t pick = -1;
  double pick_loss = 0.0;
  if (p_.explore > 0.0) {
    for (size_t a = 0; a < t.size(); ++a) {
      const auto ai = static_cast<int32_t>(a);
      if (ai == bst || arms_[a].shadowed) continue;
      const double loss = expected_loss(b, ai, bst);
      if (loss > credit_[a]) continue;
      if (pick < 0 || t[a].picked < t[static_cast<size_t>(pick)].picked) {
        pick = ai;
        pick_loss = loss;
      }
    }
  }
  if (pick >= 0) return start_trial(pick, pick_loss);
  int32_t use = bst;
  if (kept_ >= 0 && kept_ != bst && measured(t[static_cast<size_t>(kept_)], static_cast<size_t>(kept_)) &&
      rate(b, kept_) >= (1.0 - kSwitchMargin) * rate(b, bst)) {
    use = kept_;
  }
  kept_ = use;
  t[static_cast<size_t>(use)].picked = step_;
  return use;
}

int32_t AutoPolicy::shadow_pick(int32_t b, size_t n_seqs) const {
  if (n_seqs == 0) return -1;
  // Rarely while no arm that needs a heads pass is close to the best one.
  const int32_t bst = best(b);
  bool close = bst < 0;
  for (size_t a = 0; a < arms_.size() && !close; ++a) {
    if (!arms_[a].observes) continue;
    const auto& s = by_batch_.at(b)[a];
    close = !measured(s, a) || rate(b, static_cast<int32_t>(a)) >= kShadowNear * rate(b, bst);
  }
  const int64_t every = static_cast<int64_t>(p_.shadow_every) * (close ? 1 : 4);
  if (step_ % every != 0) return -1;
  return static_cast<int32_t>((step_ / every) % static_cast<int64_t>(n_seqs));
}

void AutoPolicy::plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) {
  std::vector<size_t> mine;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto arms = seqs[i]->drafter().arms();
    if (arms.empty()) continue;
    if (arms_.empty()) {
      arms_.assign(arms.begin(), arms.end());
      credit_.assign(arms_.size(), 0.0);
    }
    if (arms.size() != arms_.size()) continue;  // a differently configured auto drafter keeps its own arm
    mine.push_back(i);
  }
  cur_arm_ = -1;
  cur_seqs_.clear();
  if (!mine.empty()) {
    const auto b = static_cast<int32_t>(seqs.size());
    (void)table_mut(b);
    for (size_t i : mine) cur_seqs_.push_back(seqs[i]);
    blend_sequences(b, cur_seqs_);
    if (next_arm_ < 0 || next_b_ != b) {
      kept_ = -1;
      next_arm_ = decide(b);
      next_b_ = b;
    }
    cur_arm_ = next_arm_;
    cur_b_ = b;
    cur_explore_ = next_explore_;
    cur_reserved_ = next_reserved_;
    next_arm_ = decide(b);  // one step ahead, so the arm that drafts next can observe this step
    const int32_t shadow = shadow_pick(b, mine.size());
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t i = mine[k];
      seqs[i]->drafter().select_arm(cur_arm_, next_arm_, static_cast<int32_t>(k) == shadow);
      budgets[i] = std::min(budgets[i], std::max(1, arms_[static_cast<size_t>(cur_arm_)].max_nodes));
    }
  }
  if (p_.step_budget > 0) StepBudgetPolicy::split(p_.step_budget, budgets);
}

void AutoPolicy::observe(const StepReport& r) {
  if (cur_arm_ < 0) return;
  const int32_t b = cur_b_;
  lat_.add(b, r.rows_eff > 0.0 ? r.rows_eff : r.n_rows, r.mean_ctx, r.t_forward);
  lat_.tick();
  refit();
  mean_ctx_ = r.mean_ctx;
  auto& t = table_mut(b);
  // What the sequences' drafters graded: their own step and the shadowed arms.
  samples_.clear();
  for (Sequence* s : cur_seqs_) s->drafter().take_arm_samples(samples_);
  for (const auto& smp : samples_) {
    if (smp.arm < 0 || static_cast<size_t>(smp.arm) >= t.size()) continue;
    ArmStat& s = t[static_cast<size_t>(smp.arm)];
    s.n += 1;
    const double a = std::max(p_.ema_alpha, 1.0 / static_cast<double>(s.n));
    s.tok += a * (smp.tokens - s.tok);
    s.rows += a * (smp.rows - s.rows);
    ++n_samples_;
  }
  double tokens = 0.0;
  for (const auto& s : r.seqs) tokens += 1.0 + s.n_accepted;
  const int32_t bst = best(b);
  auto& mine = credit_[static_cast<size_t>(cur_arm_)];
  if (cur_explore_) {
    ++n_explore_;
    if (bst >= 0 && bst != cur_arm_) {
      const double loss = r.t_step - tokens / rate(b, bst);
      mine -= loss - cur_reserved_;  // the reservation made at the trial's start becomes the measured loss
    } else {
      mine += cur_reserved_;
    }
  } else {
    int32_t n_trial_arms = 0;
    for (size_t a = 0; a < arms_.size(); ++a) n_trial_arms += !arms_[a].shadowed && static_cast<int32_t>(a) != cur_arm_;
    for (size_t a = 0; a < arms_.size() && n_trial_arms > 0; ++a) {
      if (!arms_[a].shadowed && static_cast<int32_t>(a) != cur_arm_) credit_[a] += p_.explore * r.t_step / n_trial_arms;
    }
  }
  ArmStat& c = t[static_cast<size_t>(cur_arm_)];
  c.runs += 1;
  const double a = std::max(p_.ema_alpha, 1.0 / static_cast<double>(c.runs));
  c.sec += a * (r.t_step - c.sec);
  c.ovh += a * (std::max(0.0, r.t_step - r.t_forward) - c.ovh);
  ++step_;
  ++n_steps_;
  // Savings never exceed what the arm's next trial is expected to cost (so a trial cannot
  // be followed by a burst of others when its estimate improves).
  const int32_t b2 = best(b);
  if (b2 >= 0) {
    for (size_t a = 0; a < credit_.size(); ++a) {
      if (!arms_[a].shadowed && static_cast<int32_t>(a) != b2) {
        credit_[a] = std::min(credit_[a], kCreditCapTrials * expected_loss(b, static_cast<int32_t>(a), b2));
      }
    }
  }
  cur_arm_ = -1;
  cur_seqs_.clear();
}

nlohmann::json AutoPolicy::stats_json() const {
  nlohmann::json j;
  j["policy"] = "auto";
  j["explore"] = p_.explore;
  j["trial_steps"] = p_.trial_steps;
  j["steps"] = n_steps_;
  j["explore_steps"] = n_explore_;
  j["trials"] = n_trials_;
  j["samples"] = n_samples_;
  j["probe_points"] = n_probe_;
  j["probe_s"] = probe_s_;
  j["probe_cached"] = probe_cached_;
  j["by_batch"] = nlohmann::json::array();
  for (const auto& [b, t] : by_batch_) {
    nlohmann::json e;
    e["batch"] = b;
    e["arms"] = nlohmann::json::array();
    for (size_t a = 0; a < t.size(); ++a) {
      const ArmStat& s = t[a];
      const bool m = measured(s, a);
      e["arms"].push_back({{"name", arms_[a].name},
                           {"shadowed", arms_[a].shadowed},
                           {"samples", s.n},
                           {"steps", s.runs},
                           {"tok_per_step", s.tok},
                           {"rows", s.rows},
                           {"ms_per_step", 1e3 * s.sec},
                           {"predicted_ms", m ? 1e3 * predicted_time(b, static_cast<int32_t>(a)) : 0.0},
                           {"predicted_tok_per_s", m ? rate(b, static_cast<int32_t>(a)) : 0.0},
                           {"credit_ms", 1e3 * credit_[a]}});
    }
    const int32_t bst = best(b);
    e["best"] = bst >= 0 ? arms_[static_cast<size_t>(bst)].name : "";
    j["by_batch"].push_back(std::move(e));
  }
  return j;
}

}  // namespace treespec::engine
