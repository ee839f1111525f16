#include "engine/auto_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/assert.h"
#include "engine/budget.h"

namespace treespec::engine {

namespace {
// Prior cost of an arm never measured: a row costs this share of the best arm's step
// (16 rows = 1.8x; the measured 1 B Q8_0 expansion is 1.6-1.9x, docs/kernels.md), and it
// emits the best arm's tokens.
constexpr double kPriorRowShare = 0.05;
// An arm's credit never exceeds this many of the best arm's steps.
constexpr double kCreditCapSteps = 64.0;
// The smallest expected loss of a step of another arm, as a share of the best arm's step.
constexpr double kMinLossShare = 0.02;
}  // namespace

AutoPolicy::AutoPolicy(AutoPolicyParams p) : p_(p) {
  TREESPEC_ASSERT(p_.trial_steps >= 1 && p_.explore >= 0.0 && p_.ema_alpha > 0.0 && p_.ema_alpha <= 1.0, "auto policy: bad parameters");
}

const std::vector<AutoPolicy::ArmStat>& AutoPolicy::table(int32_t b) {
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
      t[a].last = t[a].picked = -1;
    }
  }
  return by_batch_.emplace(b, std::move(t)).first->second;
}

int32_t AutoPolicy::best(int32_t b) {
  const auto& t = table(b);
  int32_t best = -1;
  for (size_t a = 0; a < t.size(); ++a) {
    if (t[a].n > 0 && (best < 0 || t[a].rate() > t[static_cast<size_t>(best)].rate())) best = static_cast<int32_t>(a);
  }
  return best;
}

double AutoPolicy::expected_loss(const std::vector<ArmStat>& t, int32_t arm, int32_t best) const {
  const ArmStat& bs = t[static_cast<size_t>(best)];
  const ArmStat& s = t[static_cast<size_t>(arm)];
  double per_step = 0.0;
  if (s.n > 0) {
    per_step = s.sec - s.tok / bs.rate();
  } else {
    const double rows = std::max(0, arms_[static_cast<size_t>(arm)].max_nodes - 1);
    per_step = bs.sec * kPriorRowShare * rows;
  }
  // At least a small share of a step: arms that tie with the best are re-tried now and
  // then, not all the time.
  return std::max(kMinLossShare * bs.sec, per_step) * p_.trial_steps;
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
  auto& t = by_batch_[b];
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
    if (arms_[a].warm_up && t[a].n == 0 && t[a].picked < 0) {
      return start_trial(static_cast<int32_t>(a), bst >= 0 ? expected_loss(t, static_cast<int32_t>(a), bst) : 0.0);
    }
  }
  if (bst < 0) return 0;
  // Exploration: each other arm saves its share of the credit; the least recently tried
  // arm whose savings cover a trial's expected loss is tried.
  int32_t pick = -1;
  double pick_loss = 0.0;
  if (p_.explore > 0.0) {
    for (size_t a = 0; a < t.size(); ++a) {
      const auto ai = static_cast<int32_t>(a);
      if (ai == bst) continue;
      const double loss = expected_loss(t, ai, bst);
      if (loss > credit_[a]) continue;
      if (pick < 0 || t[a].picked < t[static_cast<size_t>(pick)].picked) {
        pick = ai;
        pick_loss = loss;
      }
    }
  }
  if (pick >= 0) return start_trial(pick, pick_loss);
  t[static_cast<size_t>(bst)].picked = step_;
  return bst;
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
  if (!mine.empty()) {
    const auto b = static_cast<int32_t>(seqs.size());
    (void)table(b);
    if (next_arm_ < 0 || next_b_ != b) {
      next_arm_ = decide(b);
      next_b_ = b;
    }
    cur_arm_ = next_arm_;
    cur_b_ = b;
    cur_explore_ = next_explore_;
    cur_reserved_ = next_reserved_;
    next_arm_ = decide(b);  // one step ahead, so the arm that drafts next can observe this step
    for (size_t i : mine) {
      seqs[i]->drafter().select_arm(cur_arm_, next_arm_);
      budgets[i] = std::min(budgets[i], std::max(1, arms_[static_cast<size_t>(cur_arm_)].max_nodes));
    }
  }
  if (p_.step_budget > 0) StepBudgetPolicy::split(p_.step_budget, budgets);
}

void AutoPolicy::observe(const StepReport& r) {
  if (cur_arm_ < 0) return;
  double tokens = 0.0;
  for (const auto& s : r.seqs) tokens += 1.0 + s.n_accepted;
  auto& t = by_batch_[cur_b_];
  const int32_t bst = best(cur_b_);
  const auto n_arms = static_cast<double>(arms_.size());
  auto& mine = credit_[static_cast<size_t>(cur_arm_)];
  if (cur_explore_) {
    ++n_explore_;
    if (bst >= 0 && bst != cur_arm_) {
      const double loss = r.t_step - tokens / t[static_cast<size_t>(bst)].rate();
      mine -= loss - cur_reserved_;  // the reservation made at the trial's start becomes the measured loss
    } else {
      mine += cur_reserved_;
    }
  } else if (n_arms > 1.0) {
    for (size_t a = 0; a < credit_.size(); ++a) {
      if (static_cast<int32_t>(a) != cur_arm_) credit_[a] += p_.explore * r.t_step / (n_arms - 1.0);
    }
  }
  ArmStat& s = t[static_cast<size_t>(cur_arm_)];
  s.n += 1;
  const double a = std::max(p_.ema_alpha, 1.0 / static_cast<double>(s.n));
  s.tok += a * (tokens - s.tok);
  s.sec += a * (r.t_step - s.sec);
  s.rows += a * (r.n_rows - s.rows);
  s.last = step_;
  ++step_;
  ++n_steps_;
  const int32_t b2 = best(cur_b_);
  if (b2 >= 0) {
    for (double& c : credit_) c = std::min(c, kCreditCapSteps * t[static_cast<size_t>(b2)].sec);
  }
  cur_arm_ = -1;
}

nlohmann::json AutoPolicy::stats_json() const {
  nlohmann::json j;
  j["policy"] = "auto";
  j["explore"] = p_.explore;
  j["trial_steps"] = p_.trial_steps;
  j["steps"] = n_steps_;
  j["explore_steps"] = n_explore_;
  j["trials"] = n_trials_;
  j["by_batch"] = nlohmann::json::array();
  for (const auto& [b, t] : by_batch_) {
    nlohmann::json e;
    e["batch"] = b;
    int32_t best = -1;
    e["arms"] = nlohmann::json::array();
    for (size_t a = 0; a < t.size(); ++a) {
      const ArmStat& s = t[a];
      if (s.n > 0 && (best < 0 || s.rate() > t[static_cast<size_t>(best)].rate())) best = static_cast<int32_t>(a);
      e["arms"].push_back({{"name", arms_[a].name}, {"steps", s.n}, {"tok_per_step", s.tok}, {"ms_per_step", 1e3 * s.sec},
                           {"tok_per_s", s.rate()}, {"rows", s.rows}, {"credit_ms", 1e3 * credit_[a]}});
    }
    e["best"] = best >= 0 ? arms_[static_cast<size_t>(best)].name : "";
    j["by_batch"].push_back(std::move(e));
  }
  return j;
}

}  // namespace treespec::engine
