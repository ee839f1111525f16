// --spec auto's policy (engine::AutoPolicy) on simulated arms: each arm has a step time
// and a mean number of tokens per step, and the policy only sees what it measures. It
// must find the fastest arm, keep the cost of exploring within its share of the time,
// wait for credit before trying expensive arms (but try them eventually), follow a change
// of the best arm, choose per batch size, and hand out budgets and hints that match its
// choices. (Greedy equality of the real drafter: tests/unit/medusa/test_medusa_auto.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "drafters/factory.h"
#include "engine/auto_policy.h"
#include "engine/budget_controller.h"
#include "engine/engine.h"
#include "treespec/status.h"

using namespace treespec;
using drafters::ArmInfo;
using engine::AutoPolicy;
using engine::AutoPolicyParams;

namespace {

// A drafter with arms that records the policy's choices and proposes nothing.
class FakeArms final : public drafters::Drafter {
 public:
  explicit FakeArms(std::vector<ArmInfo> a) : arms_(std::move(a)) {}
  std::string name() const override { return "fake"; }
  tree::TokenTree propose(const drafters::DraftInput& in) override { return tree::TokenTree(in.context.back()); }
  int32_t max_nodes() const override { return 256; }
  std::span<const ArmInfo> arms() const override { return arms_; }
  void select_arm(int32_t arm, int32_t next) override {
    cur = arm;
    hint = next;
  }
  int32_t cur = -1, hint = -1;

 private:
  std::vector<ArmInfo> arms_;
};

// The usual arm set: none, lookup, PTD (not warm-up) and Medusa at four sizes.
std::vector<ArmInfo> usual_arms() {
  return {{"none", 1, true},      {"lookup", 33, true},   {"ptd", 125, false},   {"medusa/2", 2, false},
          {"medusa/4", 4, true},  {"medusa/8", 8, false}, {"medusa/16", 16, false}};
}

// Per arm: seconds per step and mean tokens per sequence and step.
struct World {
  std::vector<double> sec;
  std::vector<double> tok;
  double rate(size_t a, int32_t b) const { return b * tok[a] / sec[a]; }
  size_t best(int32_t b) const {
    size_t k = 0;
    for (size_t a = 1; a < sec.size(); ++a) {
      if (rate(a, b) > rate(k, b)) k = a;
    }
    return k;
  }
};

// none 50 ms / 1 token; medusa/4 is the best (31.7 tok/s); PTD accepts well but costs 3.4 steps.
World usual_world() {
  return {{0.050, 0.054, 0.170, 0.055, 0.060, 0.075, 0.095}, {1.0, 1.05, 1.8, 1.4, 1.9, 2.1, 2.3}};
}

struct Sim {
  explicit Sim(AutoPolicyParams p, int32_t b = 1, std::vector<ArmInfo> arms = usual_arms()) : policy(p) {
    resize(b, arms);
  }
  void resize(int32_t b, const std::vector<ArmInfo>& arms = usual_arms()) {
    seqs.clear();
    ptrs.clear();
    for (int32_t i = 0; i < b; ++i) {
      seqs.push_back(std::make_unique<engine::Sequence>(std::vector<int32_t>{1, 2}, engine::SequenceParams{},
                                                        std::make_unique<FakeArms>(arms)));
    }
    for (auto& s : seqs) ptrs.push_back(s.get());
  }
  FakeArms& fake(size_t i) { return static_cast<FakeArms&>(seqs[i]->drafter()); }

  // One step in world w; returns the arm used.
  int32_t step(const World& w) {
    std::vector<int32_t> budgets(ptrs.size(), 256);
    policy.plan(ptrs, budgets);
    const int32_t arm = fake(0).cur;
    last_budgets = budgets;
    hints.push_back(fake(0).hint);
    std::vector<engine::SeqStepReport> reps(ptrs.size());
    double tokens = 0.0;
    for (size_t i = 0; i < ptrs.size(); ++i) {
      EXPECT_EQ(fake(i).cur, arm) << "one arm per step for the whole batch";
      const double t = w.tok[static_cast<size_t>(arm)];
      const double whole = std::floor(t);
      const int32_t n = static_cast<int32_t>(whole) + (rng.uniform() < t - whole ? 1 : 0);
      reps[i].seq = ptrs[i];
      reps[i].n_accepted = n - 1;
      tokens += n;
    }
    engine::StepReport r;
    r.n_seqs = static_cast<int32_t>(ptrs.size());
    r.n_rows = static_cast<int32_t>(ptrs.size());
    r.t_step = w.sec[static_cast<size_t>(arm)];
    r.seqs = reps;
    policy.observe(r);
    total_s += r.t_step;
    total_tok += tokens;
    used.push_back(arm);
    return arm;
  }

  AutoPolicy policy;
  std::vector<std::unique_ptr<engine::Sequence>> seqs;
  std::vector<engine::Sequence*> ptrs;
  std::vector<int32_t> last_budgets;
  std::vector<int32_t> used, hints;
  double total_s = 0.0, total_tok = 0.0;
  core::Rng rng{7};
};

double share_of(const std::vector<int32_t>& used, size_t from, size_t to, int32_t arm) {
  int64_t n = 0;
  for (size_t s = from; s < to; ++s) n += used[s] == arm ? 1 : 0;
  return static_cast<double>(n) / static_cast<double>(to - from);
}

}  // namespace

TEST(AutoPolicy, FindsTheFastestArmAndStaysNearIt) {
  Sim sim(AutoPolicyParams{});
  const World w = usual_world();
  for (int s = 0; s < 2000; ++s) sim.step(w);
  const auto best = static_cast<int32_t>(w.best(1));
  ASSERT_EQ(sim.policy.arms()[static_cast<size_t>(best)].name, "medusa/4");
  EXPECT_GE(share_of(sim.used, 200, 2000, best), 0.8);
  const double rate = sim.total_tok / sim.total_s;
  EXPECT_GE(rate, 0.95 * w.rate(static_cast<size_t>(best), 1)) << "tok/s " << rate;
  const nlohmann::json j = sim.policy.stats_json();
  EXPECT_EQ(j.at("policy"), "auto");
  EXPECT_EQ(j.at("by_batch").at(0).at("best"), "medusa/4");
  EXPECT_EQ(j.at("steps").get<int64_t>(), 2000);
}

TEST(AutoPolicy, WarmUpTriesEveryWarmArmFirst) {
  AutoPolicyParams p;
  Sim sim(p);
  const World w = usual_world();
  for (int s = 0; s < 3 * p.trial_steps; ++s) sim.step(w);
  const std::vector<int32_t> want = {0, 0, 0, 1, 1, 1, 4, 4, 4};  // none, lookup, medusa/4, trial_steps each
  EXPECT_EQ(sim.used, want);
}

TEST(AutoPolicy, ExplorationCostStaysWithinItsShare) {
  for (double explore : {0.0, 0.03, 0.1}) {
    AutoPolicyParams p;
    p.explore = explore;
    Sim sim(p);
    const World w = usual_world();
    const size_t best = w.best(1);
    const double best_rate = w.rate(best, 1);
    // Time lost against always using the best arm, for the same tokens.
    double lost = 0.0;
    double warm_lost = 0.0;
    for (int s = 0; s < 4000; ++s) {
      const auto a = static_cast<size_t>(sim.step(w));
      const double l = w.sec[a] - w.tok[a] / best_rate;
      if (s < 3 * p.trial_steps) {
        warm_lost += l;
      } else {
        lost += l;
      }
    }
    // Within the share, plus one trial of the costliest arm (a trial may start on credit
    // that its measured loss then exceeds) and the noise of tokens per step.
    const double slack = p.trial_steps * (w.sec[2] - w.tok[2] / best_rate) + 0.05 * sim.total_s * 0.1;
    EXPECT_LE(lost, explore * sim.total_s + slack) << "explore " << explore << ", warm-up lost " << warm_lost;
    if (explore == 0.0) {
      EXPECT_GE(share_of(sim.used, 100, 4000, static_cast<int32_t>(best)), 0.97);
    }
  }
}

TEST(AutoPolicy, ExpensiveArmsWaitForCreditButAreTried) {
  Sim sim(AutoPolicyParams{});
  World w = usual_world();
  int first_ptd = -1;
  for (int s = 0; s < 8000 && first_ptd < 0; ++s) {
    if (sim.step(w) == 2) first_ptd = s;
  }
  // Its prior loss is 124 rows x 5% x a step x 3 steps = 18.6 steps; its credit grows by
  // 3% / 6 other arms of a step per step, so about 3,700 steps pass first.
  EXPECT_GT(first_ptd, 1500);
  EXPECT_GE(first_ptd, 0) << "PTD is never starved";

  // When PTD is in fact the best (8 tokens per step), one trial is enough to switch.
  Sim sim2(AutoPolicyParams{});
  w.tok[2] = 8.0;
  for (int s = 0; s < 8000; ++s) sim2.step(w);
  EXPECT_GE(share_of(sim2.used, 7000, 8000, 2), 0.8);
}

TEST(AutoPolicy, FollowsAChangeOfTheBestArm) {
  Sim sim(AutoPolicyParams{});
  World w = usual_world();
  for (int s = 0; s < 1000; ++s) sim.step(w);
  EXPECT_GE(share_of(sim.used, 500, 1000, 4), 0.8);
  // The heads stop predicting (new topic): every Medusa size drops to ~1 token per step.
  // Plain decoding is the best now; lookup and medusa/2 are within 3-5% of it, so they
  // are still re-tried now and then: what must hold is the throughput.
  for (size_t a = 3; a <= 6; ++a) w.tok[a] = 1.05;
  ASSERT_EQ(w.best(1), 0u);
  for (int s = 0; s < 500; ++s) sim.step(w);
  const double s0 = sim.total_s, t0 = sim.total_tok;
  for (int s = 0; s < 500; ++s) sim.step(w);
  EXPECT_GE((sim.total_tok - t0) / (sim.total_s - s0), 0.97 * w.rate(0, 1));
  EXPECT_LE(share_of(sim.used, 1500, 2000, 4), 0.1) << "medusa/4 is left";
}

TEST(AutoPolicy, ChoosesPerBatchSize) {
  Sim sim(AutoPolicyParams{});
  // Batch 1: medusa/4 best. Batch 4: rows are no longer free (4 x 4 rows), plain wins.
  const World w1 = usual_world();
  World w4 = w1;
  w4.sec = {0.060, 0.110, 0.900, 0.095, 0.120, 0.220, 0.420};
  for (int phase = 0; phase < 4; ++phase) {
    const bool batched = phase % 2 == 1;
    sim.resize(batched ? 4 : 1);
    const size_t from = sim.used.size();
    for (int s = 0; s < 600; ++s) sim.step(batched ? w4 : w1);
    const auto want = static_cast<int32_t>((batched ? w4 : w1).best(batched ? 4 : 1));
    EXPECT_EQ(want, batched ? 0 : 4);
    EXPECT_GE(share_of(sim.used, from + 300, from + 600, want), 0.8) << "phase " << phase;
  }
  EXPECT_EQ(sim.policy.stats_json().at("by_batch").size(), 2u);
}

TEST(AutoPolicy, BudgetsAndHintsMatchTheChoices) {
  AutoPolicyParams p;
  p.step_budget = 6;
  Sim sim(p, 4);
  const World w = usual_world();
  std::vector<int32_t> arms_at;
  for (int s = 0; s < 400; ++s) {
    const int32_t a = sim.step(w);
    int32_t sum = 0;
    for (int32_t bgt : sim.last_budgets) {
      EXPECT_GE(bgt, 1);
      EXPECT_LE(bgt, sim.policy.arms()[static_cast<size_t>(a)].max_nodes);
      sum += bgt;
    }
    EXPECT_LE(sum, std::max<int32_t>(6, 4)) << "the step budget caps the batch";
  }
  // The hint given with step s is the arm used at step s + 1.
  for (size_t s = 0; s + 1 < sim.used.size(); ++s) EXPECT_EQ(sim.hints[s], sim.used[s + 1]) << "step " << s;
}

TEST(AutoPolicy, FactoryAndErrors) {
  const std::string path = test::temp_dir() + "/auto_tiny.gguf";
  test::write_tiny_model(path, test::TinyModelConfig{});
  auto m = model::Model::load(path);
  engine::EngineParams ep;
  ep.n_ctx = 64;
  engine::Engine eng(*m, ep);
  drafters::SpecConfig cfg;
  cfg.method = "auto";
  auto pol = engine::make_budget_policy(cfg, eng);
  ASSERT_NE(dynamic_cast<AutoPolicy*>(pol.get()), nullptr);
  auto arm_names = [&](const drafters::SpecConfig& c) {
    const auto d = drafters::make_drafter(c, drafters::DrafterEnv{m.get(), {}, 1});  // the arms live in the drafter
    std::vector<std::string> names;
    for (const auto& a : d->arms()) names.push_back(a.name);
    return names;
  };
  std::vector<std::string> names = arm_names(cfg);
  EXPECT_EQ(names, (std::vector<std::string>{"none", "lookup", "ptd"})) << "training-free arms only without heads or -md";
  cfg.draft.layers = "0";
  EXPECT_EQ(arm_names(cfg).back(), "draft");

  auto error_of = [&](const drafters::SpecConfig& c, bool policy) -> std::string {
    try {
      if (policy) {
        (void)engine::make_budget_policy(c, eng);
      } else {
        (void)drafters::make_drafter(c, drafters::DrafterEnv{m.get(), {}, 1});
      }
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  drafters::SpecConfig bad = cfg;
  bad.budget.budget = "8";
  EXPECT_NE(error_of(bad, true).find("--budget 8 does not apply to --spec auto"), std::string::npos);
  bad = cfg;
  bad.automatic.explore = -0.1;
  EXPECT_NE(error_of(bad, true).find("--auto-explore"), std::string::npos);
  EXPECT_NE(error_of(bad, false).find("--auto-explore"), std::string::npos);
  bad = cfg;
  bad.automatic.arms = "none,lookahead";
  EXPECT_NE(error_of(bad, false).find("unknown method 'lookahead'"), std::string::npos);
  bad.automatic.arms = "lookup,lookup";
  EXPECT_NE(error_of(bad, false).find("'lookup' given twice"), std::string::npos);
  bad.automatic.arms = "lookup";
  EXPECT_EQ(arm_names(bad), (std::vector<std::string>{"none", "lookup"})) << "none is always an arm";
  bad.automatic.arms = "medusa";
  EXPECT_NE(error_of(bad, false).find("holds no Medusa heads"), std::string::npos);
}
