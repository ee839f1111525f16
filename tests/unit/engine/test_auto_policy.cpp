// --spec auto's policy (engine::AutoPolicy) on simulated arms: each arm has rows, a mean
// number of tokens per step and an overhead, the forward a latency in rows, and the policy
// only sees what it measures and the samples the drafter grades. It must find the fastest
// arm from the shadow grades without trials, keep the cost of trials within its share of
// the time, wait for credit before trying expensive arms (but try them eventually),
// follow a change of the best arm, choose per batch size, and hand out budgets and hints
// that match its choices. (Greedy equality of the real drafter: tests/unit/medusa/test_medusa_auto.cpp.)
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
#include "drafters/auto/auto_drafter.h"
#include "drafters/draft_model/draft_model_drafter.h"
#include "drafters/factory.h"
#include "engine/auto_policy.h"
#include "engine/budget_controller.h"
#include "engine/engine.h"
#include "treespec/status.h"

using namespace treespec;
using drafters::ArmInfo;
using drafters::ArmSample;
using engine::AutoPolicy;
using engine::AutoPolicyParams;

namespace {

// A drafter with arms that records the policy's choices, proposes nothing and hands the
// policy the samples the simulation gives it.
class FakeArms final : public drafters::Drafter {
 public:
  explicit FakeArms(std::vector<ArmInfo> a) : arms_(std::move(a)) {}
  std::string name() const override { return "fake"; }
  tree::TokenTree propose(const drafters::DraftInput& in) override { return tree::TokenTree(in.context.back()); }
  int32_t max_nodes() const override { return 256; }
  std::span<const ArmInfo> arms() const override { return arms_; }
  void select_arm(int32_t arm, int32_t next, bool shadow) override {
    cur = arm;
    hint = next;
    shadows += shadow ? 1 : 0;
  }
  void take_arm_samples(std::vector<ArmSample>& out) override {
    for (const auto& smp : samples) {  // this sequence's own estimates, as AutoDrafter keeps them
      auto& n = own_n[static_cast<size_t>(smp.arm)];
      auto& tok = own_tok[static_cast<size_t>(smp.arm)];
      n += 1.0;
      tok += std::max(0.1, 1.0 / n) * (smp.tokens - tok);
    }
    out.insert(out.end(), samples.begin(), samples.end());
    samples.clear();
  }
  void arm_acceptance(std::span<double> tok, std::span<double> weight) const override {
    for (size_t a = 0; a < arms_.size(); ++a) {
      tok[a] = own_tok[a];
      weight[a] = std::min(own_n[a], 19.0);
    }
  }
  int32_t cur = -1, hint = -1, shadows = 0;
  std::vector<ArmSample> samples;
  std::vector<double> own_tok = std::vector<double>(16, 0.0), own_n = std::vector<double>(16, 0.0);

 private:
  std::vector<ArmInfo> arms_;
};

// The usual arm set: none, lookup, PTD (trials only) and Medusa at four sizes (shadowed,
// observing: their grades need a heads pass).
std::vector<ArmInfo> usual_arms() {
  return {{"none", 1, false, true},
          {"lookup", 33, false, true},
          {"ptd", 125, false, false},
          {"medusa/2", 2, false, true, true},
          {"medusa/4", 4, false, true, true},
          {"medusa/8", 8, false, true, true},
          {"medusa/16", 16, false, true, true}};
}

// Per arm: mean tokens and rows per sequence and step, seconds beyond the forward; the
// forward takes 45 ms + 5 ms per sequence + 1.9 ms per extra row.
struct World {
  std::vector<double> tok;
  std::vector<double> rows;
  std::vector<double> ovh;
  static double forward(int32_t b, double rows) { return 0.045 + 0.005 * b + 0.0019 * (rows - 1.0); }
  double sec(size_t a, int32_t b) const { return forward(b, b * rows[a]) + ovh[a]; }
  double rate(size_t a, int32_t b) const { return b * tok[a] / sec(a, b); }
  size_t best(int32_t b) const {
    size_t k = 0;
    for (size_t a = 1; a < tok.size(); ++a) {
      if (rate(a, b) > rate(k, b)) k = a;
    }
    return k;
  }
};

// medusa/4 is the best at batch 1 (32 tok/s, none 19.6); PTD accepts well but feeds 45 rows.
World usual_world() {
  return {{1.0, 1.05, 1.8, 1.4, 1.9, 2.0, 2.3},
          {1, 3, 45, 2, 4, 8, 16},
          {0.001, 0.001, 0.002, 0.003, 0.003, 0.003, 0.003}};
}

struct Sim {
  explicit Sim(AutoPolicyParams p, int32_t b = 1) : policy(p) {
    // The start-up sweep's prior: 1..64 rows at batch 1 and 4.
    for (int32_t bb : {1, 4}) {
      for (int32_t n = 1; n <= 64; n *= 2) policy.latency().add(bb, bb * n, 64, World::forward(bb, bb * n), true);
    }
    policy.refit();
    resize(b);
  }
  void resize(int32_t b) {
    seqs.clear();
    ptrs.clear();
    for (int32_t i = 0; i < b; ++i) {
      seqs.push_back(std::make_unique<engine::Sequence>(std::vector<int32_t>{1, 2}, engine::SequenceParams{},
                                                        std::make_unique<FakeArms>(usual_arms())));
    }
    for (auto& s : seqs) ptrs.push_back(s.get());
  }
  FakeArms& fake(size_t i) { return static_cast<FakeArms&>(seqs[i]->drafter()); }
  int32_t draw(double mean) {
    const double whole = std::floor(mean);
    return static_cast<int32_t>(whole) + (rng.uniform() < mean - whole ? 1 : 0);
  }

  // One step in world w; returns the arm used.
  int32_t step(const World& w) {
    std::vector<int32_t> budgets(ptrs.size(), 256);
    policy.plan(ptrs, budgets);
    const int32_t arm = fake(0).cur;
    const auto b = static_cast<int32_t>(ptrs.size());
    last_budgets = budgets;
    hints.push_back(fake(0).hint);
    std::vector<engine::SeqStepReport> reps(ptrs.size());
    double tokens = 0.0;
    const auto arms = usual_arms();
    for (size_t i = 0; i < ptrs.size(); ++i) {
      EXPECT_EQ(fake(i).cur, arm) << "one arm per step for the whole batch";
      const int32_t n = draw(w.tok[static_cast<size_t>(arm)]);
      reps[i].seq = ptrs[i];
      reps[i].n_accepted = n - 1;
      tokens += n;
      fake(i).samples.push_back({arm, n, static_cast<int32_t>(w.rows[static_cast<size_t>(arm)]), true});
      for (size_t a = 0; a < arms.size(); ++a) {  // the shadowed arms' grades
        if (arms[a].shadowed && static_cast<int32_t>(a) != arm) {
          fake(i).samples.push_back({static_cast<int32_t>(a), draw(w.tok[a]), static_cast<int32_t>(w.rows[a]), false});
        }
      }
    }
    engine::StepReport r;
    r.n_seqs = b;
    r.n_rows = static_cast<int32_t>(b * w.rows[static_cast<size_t>(arm)]);
    r.rows_eff = r.n_rows;
    r.mean_ctx = 64;
    r.t_forward = World::forward(b, r.n_rows);
    r.t_step = w.sec(static_cast<size_t>(arm), b);
    r.seqs = reps;
    policy.observe(r);
    total_s += r.t_step;
    total_tok += tokens;
    used.push_back(arm);
    return arm;
  }
  // Throughput over the next n steps.
  double rate_over(const World& w, int n) {
    const double s0 = total_s, t0 = total_tok;
    for (int s = 0; s < n; ++s) step(w);
    return (total_tok - t0) / (total_s - s0);
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

constexpr int32_t kPtd = 2, kMedusa4 = 4;

}  // namespace

TEST(AutoPolicy, FindsTheFastestArmAndStaysNearIt) {
  Sim sim(AutoPolicyParams{});
  const World w = usual_world();
  ASSERT_EQ(w.best(1), static_cast<size_t>(kMedusa4));
  const double rate = sim.rate_over(w, 2000);
  EXPECT_GE(share_of(sim.used, 100, 2000, kMedusa4), 0.8);
  EXPECT_GE(rate, 0.95 * w.rate(kMedusa4, 1)) << "tok/s " << rate;
  const nlohmann::json j = sim.policy.stats_json();
  EXPECT_EQ(j.at("policy"), "auto");
  EXPECT_EQ(j.at("by_batch").at(0).at("best"), "medusa/4");
  EXPECT_EQ(j.at("steps").get<int64_t>(), 2000);
  // Its predictions are those of the world.
  EXPECT_NEAR(sim.policy.predicted_time(1, kMedusa4), w.sec(kMedusa4, 1), 0.1 * w.sec(kMedusa4, 1));
}

TEST(AutoPolicy, ShadowedArmsNeedNoTrials) {
  Sim sim(AutoPolicyParams{});
  const World w = usual_world();
  for (int s = 0; s < 100; ++s) sim.step(w);
  EXPECT_EQ(sim.used[0], 0) << "plain decoding until something is graded";
  int first = -1;
  for (size_t s = 0; s < sim.used.size() && first < 0; ++s) first = sim.used[s] == kMedusa4 ? static_cast<int>(s) : -1;
  EXPECT_GE(first, 1);
  EXPECT_LE(first, 8) << "graded in the shadow from the first steps";
  EXPECT_EQ(sim.policy.stats_json().at("explore_steps").get<int64_t>(), 0) << "PTD cannot afford a trial yet";
}

TEST(AutoPolicy, ExplorationCostStaysWithinItsShare) {
  for (double explore : {0.0, 0.01, 0.1}) {
    AutoPolicyParams p;
    p.explore = explore;
    Sim sim(p);
    const World w = usual_world();
    const double best_rate = w.rate(w.best(1), 1);
    double lost = 0.0;  // time lost against always using the best arm, for the same tokens
    for (int s = 0; s < 4000; ++s) {
      const auto a = static_cast<size_t>(sim.step(w));
      if (s >= 10) lost += w.sec(a, 1) - w.tok[a] / best_rate;
    }
    // Within the share, plus one trial of PTD beyond its credit (a trial starts on credit
    // that its measured loss may exceed) and 2% for the noise of tokens per step.
    const double slack = p.trial_steps * (w.sec(kPtd, 1) - w.tok[kPtd] / best_rate) + 0.02 * sim.total_s;
    EXPECT_LE(lost, explore * sim.total_s + slack) << "explore " << explore;
    if (explore == 0.0) {
      EXPECT_EQ(share_of(sim.used, 10, 4000, kPtd), 0.0);
    }
  }
}

TEST(AutoPolicy, ExpensiveArmsWaitForCreditButAreTried) {
  Sim sim(AutoPolicyParams{});
  World w = usual_world();
  int first_ptd = -1;
  for (int s = 0; s < 6000 && first_ptd < 0; ++s) {
    if (sim.step(w) == kPtd) first_ptd = s;
  }
  // Its expected loss (125 rows at medusa/4's tokens) is ~0.68 s for a 3-step trial; its
  // credit grows by 1% of a 59 ms step per step: about 1,150 steps.
  EXPECT_GT(first_ptd, 600);
  EXPECT_GE(first_ptd, 0) << "PTD is never starved";
  EXPECT_LT(first_ptd, 2500);

  // When PTD is in fact the best (8 tokens per step), one trial is enough to switch.
  Sim sim2(AutoPolicyParams{});
  w.tok[kPtd] = 8.0;
  ASSERT_EQ(w.best(1), static_cast<size_t>(kPtd));
  for (int s = 0; s < 4000; ++s) sim2.step(w);
  EXPECT_GE(share_of(sim2.used, 3500, 4000, kPtd), 0.9);
}

TEST(AutoPolicy, FollowsAChangeOfTheBestArm) {
  Sim sim(AutoPolicyParams{});
  World w = usual_world();
  for (int s = 0; s < 1000; ++s) sim.step(w);
  EXPECT_GE(share_of(sim.used, 500, 1000, kMedusa4), 0.8);
  // The heads stop predicting (new topic): every Medusa size drops to ~1 token per step;
  // plain decoding is the best now, lookup within 2% of it.
  for (size_t a = 3; a <= 6; ++a) w.tok[a] = 1.02;
  ASSERT_EQ(w.best(1), 0u);
  // Within 4% of the oracle: PTD's trials (1%, plus credit carried over), and lookup,
  // 2% slower than plain, chosen now and then when its noisy estimate ties.
  for (int s = 0; s < 100; ++s) sim.step(w);
  EXPECT_GE(sim.rate_over(w, 500), 0.96 * w.rate(0, 1));
  EXPECT_LE(share_of(sim.used, 1100, 1600, kMedusa4), 0.05) << "medusa/4 is left";
}

TEST(AutoPolicy, AdaptsToEachSequence) {
  Sim sim(AutoPolicyParams{});
  const World w = usual_world();
  for (int s = 0; s < 600; ++s) sim.step(w);
  EXPECT_GE(share_of(sim.used, 300, 600, kMedusa4), 0.8);
  // The next request repeats itself: lookup gives 3 tokens per step there. Its own
  // estimate outweighs the 600 steps of history within a few steps.
  World rep = w;
  rep.tok[1] = 3.0;
  ASSERT_EQ(rep.best(1), 1u);
  sim.resize(1);
  for (int s = 0; s < 60; ++s) sim.step(rep);
  EXPECT_GE(share_of(sim.used, 615, 660, 1), 0.8);
}

TEST(AutoPolicy, HeadsPassesForShadowGradesAreRationed) {
  AutoPolicyParams p;
  p.shadow_every = 4;
  Sim sim(p, 4);
  World w = usual_world();
  for (int s = 0; s < 400; ++s) sim.step(w);
  // medusa/4 is the best: its heads run anyway; shadow grades: one sequence every 4th step.
  int total = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_GE(sim.fake(i).shadows, 20) << "round-robin over the batch";
    total += sim.fake(i).shadows;
  }
  EXPECT_LE(total, 101);
  // The heads stop predicting: Medusa is far from the best, graded 4x less often.
  for (size_t a = 3; a <= 6; ++a) w.tok[a] = 1.0;
  for (int s = 0; s < 200; ++s) sim.step(w);
  for (size_t i = 0; i < 4; ++i) sim.fake(i).shadows = 0;
  for (int s = 0; s < 800; ++s) sim.step(w);
  total = 0;
  for (size_t i = 0; i < 4; ++i) total += sim.fake(i).shadows;
  EXPECT_LE(total, 800 / 16 + 2);
  EXPECT_GE(total, 800 / 16 - 2);
}

TEST(AutoPolicy, ChoosesPerBatchSize) {
  Sim sim(AutoPolicyParams{});
  // Batch 1: medusa/4 is the best. Batch 4 (other prompts): the heads predict little, plain
  // decoding is 10% faster than medusa/2.
  const World w1 = usual_world();
  World w4 = w1;
  for (size_t a = 3; a <= 6; ++a) w4.tok[a] = 1.02;
  for (int phase = 0; phase < 4; ++phase) {
    const bool batched = phase % 2 == 1;
    sim.resize(batched ? 4 : 1);
    const World& w = batched ? w4 : w1;
    const size_t from = sim.used.size();
    for (int s = 0; s < 300; ++s) sim.step(w);
    const auto want = static_cast<int32_t>(w.best(batched ? 4 : 1));
    EXPECT_EQ(want, batched ? 0 : kMedusa4);
    EXPECT_GE(share_of(sim.used, from + 100, from + 300, want), 0.8) << "phase " << phase;
  }
  EXPECT_EQ(sim.policy.stats_json().at("by_batch").size(), 2u);
}

TEST(AutoPolicy, BudgetsAndHintsMatchTheChoices) {
  AutoPolicyParams p;
  p.step_budget = 6;
  p.explore = 0.2;  // PTD trials too
  Sim sim(p, 4);
  const World w = usual_world();
  for (int s = 0; s < 1500; ++s) {
    const int32_t a = sim.step(w);
    int32_t sum = 0;
    for (int32_t bgt : sim.last_budgets) {
      EXPECT_GE(bgt, 1);
      EXPECT_LE(bgt, sim.policy.arms()[static_cast<size_t>(a)].max_nodes);
      sum += bgt;
    }
    EXPECT_LE(sum, 6) << "the step budget caps the batch";
  }
  EXPECT_GT(share_of(sim.used, 0, 1500, kPtd), 0.0);
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
  EXPECT_EQ(names, (std::vector<std::string>{"none", "lookup", "ptd"}))
      << "training-free arms only without heads or -md";
  cfg.params<drafters::DraftModelParams>().layers = "0";
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
  bad.params<drafters::AutoParams>().explore = -0.1;
  EXPECT_NE(error_of(bad, true).find("--auto-explore"), std::string::npos);
  EXPECT_NE(error_of(bad, false).find("--auto-explore"), std::string::npos);
  bad = cfg;
  bad.params<drafters::AutoParams>().arms = "none,lookahead";
  EXPECT_NE(error_of(bad, false).find("unknown method 'lookahead'"), std::string::npos);
  bad.params<drafters::AutoParams>().arms = "lookup,lookup";
  EXPECT_NE(error_of(bad, false).find("'lookup' given twice"), std::string::npos);
  bad.params<drafters::AutoParams>().arms = "lookup";
  EXPECT_EQ(arm_names(bad), (std::vector<std::string>{"none", "lookup"})) << "none is always an arm";
  bad.params<drafters::AutoParams>().arms = "ptd,lookup,none";
  EXPECT_EQ(arm_names(bad), (std::vector<std::string>{"none", "ptd", "lookup"})) << "and always arm 0";
  bad.params<drafters::AutoParams>().arms = "medusa";
  EXPECT_NE(error_of(bad, false).find("holds no Medusa heads"), std::string::npos);
}

namespace {

// A drafter whose bigger trees cost more (as EAGLE's): it records the budget of every
// proposal and drafts a chain of tokens 1, 2, 3, ... as long as the budget allows.
class CostlyChain final : public drafters::Drafter {
 public:
  std::string name() const override { return "costly"; }
  bool drafting_grows_with_budget() const override { return true; }
  tree::TokenTree propose(const drafters::DraftInput& in) override {
    budgets.push_back(in.budget);
    tree::TokenTree t(in.context.back());
    for (int32_t i = 1; i < in.budget; ++i) t.add(i, i - 1);
    return t;
  }
  int32_t max_nodes() const override { return 8; }
  std::vector<int32_t> budgets;
};

}  // namespace

// EAGLE's arms: it observes every step, but drafts its largest tree only on the steps the
// policy asks for a shadow grade; otherwise the chosen arm's size, whose tree grades only
// the arms it covers.
TEST(AutoDrafter, CostlyMethodsDraftTheirLargestTreeOnlyWhenAsked) {
  drafters::AutoDrafter a;
  a.add(std::make_unique<drafters::NoneDrafter>(), false, false, {ArmInfo{"none", 1}});
  auto costly = std::make_unique<CostlyChain>();
  CostlyChain* c = costly.get();
  a.add(std::move(costly), true, true, {ArmInfo{"c/2", 2}, ArmInfo{"c/4", 4}, ArmInfo{"c/8", 8}});
  std::vector<int32_t> context = {0, 1, 2, 3};
  a.begin(context);
  // One step: propose with `arm`, the text continues with the chain's tokens 1, 2, then 9.
  auto step = [&](int32_t arm, bool shadow) {
    a.select_arm(arm, arm, shadow);
    drafters::DraftInput in;
    in.context = context;
    in.n_past = static_cast<int32_t>(context.size()) - 1;
    in.budget = 64;
    const tree::TokenTree t = a.propose(in);
    verify::VerifyResult r;
    r.path = {0};
    for (int32_t i = 1; i < t.size() && i <= 2; ++i) r.path.push_back(i);
    r.bonus = 9;
    for (size_t i = 1; i < r.path.size(); ++i) context.push_back(static_cast<int32_t>(i));
    context.push_back(9);
    const std::vector<int32_t> argmax(static_cast<size_t>(t.size()), -1);
    const std::vector<const float*> none(static_cast<size_t>(t.size()), nullptr);
    a.observe(drafters::StepFeedback{t, r, argmax, none, none, context});
    return t.size();
  };
  auto graded = [&] {
    std::vector<ArmSample> out;
    a.take_arm_samples(out);
    std::vector<int32_t> arms;
    for (const auto& s : out) {
      if (!s.ran) arms.push_back(s.arm);
    }
    return arms;
  };
  EXPECT_EQ(step(2, false), 4) << "c/4 drafts a 4-node tree";
  EXPECT_EQ(c->budgets, (std::vector<int32_t>{4})) << "not its largest: the policy did not ask";
  EXPECT_EQ(graded(), (std::vector<int32_t>{1})) << "the 4-node tree grades c/2 only";
  step(2, true);  // asked at this step: the next proposal is the largest tree
  EXPECT_EQ(c->budgets.back(), 4);
  (void)graded();
  EXPECT_EQ(step(2, false), 4) << "the arm still takes its own prefix";
  EXPECT_EQ(c->budgets.back(), 8);
  EXPECT_EQ(graded(), (std::vector<int32_t>{1, 3})) << "the largest tree grades the other arms";
  EXPECT_EQ(step(0, false), 1);
  EXPECT_EQ(c->budgets.size(), 3u) << "not drafted at all while another arm runs and no grade is asked";
}
