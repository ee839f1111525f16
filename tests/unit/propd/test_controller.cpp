// The budget controller: the latency fit recovers known coefficients from noisy synthetic
// timings; the decision picks smaller trees when step cost grows faster with the tree and
// larger ones when it is flat; the shared step budget goes where it buys the most; the
// factory's parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "drafters/factory.h"
#include "drafters/propd/propd_drafter.h"
#include "engine/budget_controller.h"
#include "engine/latency_profile.h"
#include "model/model.h"

using namespace treespec;
using engine::BudgetController;
using engine::ControllerParams;
using engine::LatencyModel;

namespace {

// E(n) of a best-first tree whose i-th node is accepted with probability 0.7 * 0.85^(i-1).
std::vector<double> concave_gain(int32_t cap, double p0 = 0.7, double decay = 0.85) {
  std::vector<double> e(static_cast<size_t>(cap), 0.0);
  double p = p0;
  for (int32_t n = 2; n <= cap; ++n) {
    e[static_cast<size_t>(n - 1)] = e[static_cast<size_t>(n - 2)] + p;
    p *= decay;
  }
  return e;
}

ControllerParams quiet_params(int32_t n_max = 64) {
  ControllerParams p;
  p.n_max = n_max;
  p.probe = false;
  p.explore_every = 0;
  return p;
}

// Prior samples of t = a + c * rows^power at batch b, context s.
void fill(BudgetController& c, double a, double per_row, double power, int32_t b = 1, double s = 64.0) {
  for (int32_t r = b; r <= 64 * b; r = r * 3 / 2 + 1)
    c.latency().add(b, r, s, a + per_row * std::pow(static_cast<double>(r), power), true);
}

}  // namespace

TEST(LatencyModel, GlobalFitRecoversKnownCoefficientsFromNoisyTimings) {
  // Coefficients of the model's scaled features, each term of a similar size over the
  // sampled range (a term far below the noise cannot be recovered by any fit).
  const LatencyModel::Coef truth = {2e-3, 3e-3, 1.5e-3, 2e-3, 4e-3};
  LatencyModel::Options o;
  o.max_samples = 8192;
  LatencyModel lm(o);
  core::Rng rng(11);
  for (int i = 0; i < 6000; ++i) {
    const double b = 1 + static_cast<double>(rng.uniform_int(8));
    const double r = b * (1 + static_cast<double>(rng.uniform_int(16)));
    const double s = static_cast<double>(rng.uniform_int(1024));
    const double t = LatencyModel::eval(truth, b, r, s);
    lm.add(b, r, s, t * (1.0 + 0.03 * rng.normal()));  // 3% multiplicative noise
  }
  const auto c = lm.fit_global();
  for (int k = 0; k < LatencyModel::kFeatures; ++k) {
    EXPECT_NEAR(c[static_cast<size_t>(k)], truth[static_cast<size_t>(k)], 0.1 * truth[static_cast<size_t>(k)] + 1e-5)
        << "coefficient " << k;
  }
  // Predictions (local fits) follow the truth within the noise.
  for (double r : {1.0, 8.0, 64.0, 300.0}) {
    const double want = LatencyModel::eval(truth, 4, r, 500);
    EXPECT_NEAR(lm.predict(4, r, 500), want, 0.08 * want) << "rows " << r;
  }
}

TEST(LatencyModel, RecentAndNearbySamplesWeighMore) {
  LatencyModel::Options o;
  o.half_life = 20;
  LatencyModel lm(o);
  // Old regime: 10 ms per step; then the machine got twice as fast.
  for (int i = 0; i < 100; ++i) {
    lm.add(1, 4, 64, 10e-3);
    lm.tick();
  }
  for (int i = 0; i < 100; ++i) {
    lm.add(1, 4, 64, 5e-3);
    lm.tick();
  }
  EXPECT_NEAR(lm.predict(1, 4, 64), 5e-3, 0.3e-3);
  // A knee: flat up to 16 rows, then linear. A local fit follows both sides; a global line cannot.
  LatencyModel knee;
  for (int r = 1; r <= 256; r *= 2) {
    for (int k = 0; k < 4; ++k) knee.add(1, r, 64, r <= 16 ? 1e-3 : 1e-3 * r / 16.0, true);
  }
  EXPECT_NEAR(knee.predict(1, 4, 64), 1e-3, 0.25e-3);
  EXPECT_NEAR(knee.predict(1, 128, 64), 8e-3, 1.5e-3);
  const auto g = knee.fit_global();
  EXPECT_LT(std::abs(knee.predict(1, 4, 64) - 1e-3),
            0.5 * std::abs(LatencyModel::eval(g, 1, 4, 64) - 1e-3));  // the global line misses the flat part
}

TEST(BudgetController, SmallerTreesWhenCostGrowsFasterLargerWhenFlat) {
  const auto gain = concave_gain(64);
  std::vector<int32_t> chosen;
  for (double per_row : {0.0, 2e-6, 2e-5, 2e-4, 1e-2}) {
    BudgetController c(quiet_params(), 5);
    fill(c, 1e-3, per_row, 1.0);
    const auto ch = c.choose(64, {gain}, {1.0});
    chosen.push_back(ch.budgets[0]);
    std::printf("per-row cost %.0e s: n* = %d (predicted %.3g s, %.2f tokens)\n", per_row, ch.budgets[0],
                ch.predicted_s, ch.expected_tokens);
  }
  EXPECT_EQ(chosen.front(), 64);  // flat: the largest tree
  EXPECT_EQ(chosen.back(), 1);    // a row costs as much as the step: plain decoding
  for (size_t i = 1; i < chosen.size(); ++i) EXPECT_LE(chosen[i], chosen[i - 1]);
  EXPECT_GT(chosen[2], 1);
  EXPECT_LT(chosen[2], 64);
  // Super-linear growth shrinks the tree further than linear growth of the same start.
  BudgetController lin(quiet_params(), 5), sup(quiet_params(), 5);
  fill(lin, 1e-3, 3e-5, 1.0);
  fill(sup, 1e-3, 3e-5, 1.6);
  EXPECT_LT(sup.choose(64, {gain}, {1.0}).budgets[0], lin.choose(64, {gain}, {1.0}).budgets[0]);
}

TEST(BudgetController, ValueFloorIsTheBreakEvenOfOneMoreNode) {
  // The floor a dynamic tree cuts at (DraftInput::min_value): none where rows are free;
  // where each row costs, near the value of the first node the plan did not grant (the
  // plan stops where one more node stops paying) and never above the last it granted.
  const auto gain = concave_gain(64);
  BudgetController flat(quiet_params(), 5);
  fill(flat, 1e-3, 0.0, 1.0);
  EXPECT_LT(flat.choose(64, {gain}, {1.0}).min_value, 1e-6);
  for (double per_row : {2e-5, 6e-5}) {
    BudgetController c(quiet_params(), 5);
    fill(c, 1e-3, per_row, 1.0);
    const auto ch = c.choose(64, {gain}, {1.0});
    const auto n = static_cast<size_t>(ch.budgets[0]);
    ASSERT_GT(n, 1u);
    ASSERT_LT(n, 64u);
    const double last = gain[n - 1] - gain[n - 2], next = gain[n] - gain[n - 1];
    std::printf("per-row %.0e s: n* = %zu, last node %.4f, floor %.4f, next node %.4f\n", per_row, n, last,
                ch.min_value, next);
    EXPECT_GT(ch.min_value, 0.8 * next);
    EXPECT_LE(ch.min_value, last);
  }
}

TEST(BudgetController, PruningMakesLargerTreesAffordable) {
  const auto gain = concave_gain(64);
  BudgetController c(quiet_params(), 5);
  fill(c, 1e-3, 4e-5, 1.0);
  // Observed: nodes beyond the first few rarely survive pruning.
  engine::StepReport r;
  engine::SeqStepReport s;
  std::vector<uint8_t> surv(64, 0);
  for (int i = 0; i < 4; ++i) surv[static_cast<size_t>(i)] = 1;
  s.survived = surv;
  s.prune_layer = 1;
  s.n_nodes = 64;
  s.n_late = 4;
  r.seqs = std::span<const engine::SeqStepReport>(&s, 1);
  r.n_seqs = 1;
  r.n_rows = 64;
  r.rows_eff = 16;
  r.t_step = 1.5e-3;
  for (int i = 0; i < 200; ++i) c.observe(r);
  EXPECT_LT(c.survival(40), 0.05);
  const int32_t unpruned = c.choose(64, {gain}, {1.0}).budgets[0];
  const int32_t pruned = c.choose(64, {gain}, {0.2}).budgets[0];  // 1 of 5 layers before the test
  EXPECT_GT(pruned, unpruned);
}

TEST(BudgetController, SharedStepBudgetGoesWhereItBuysMost) {
  BudgetController c(quiet_params(), 5);
  fill(c, 1e-3, 5e-5, 1.0, 2);
  const auto good = concave_gain(64, 0.9, 0.9);
  const auto poor = concave_gain(64, 0.2, 0.5);
  const auto ch = c.choose(64, {poor, good}, {1.0, 1.0});
  EXPECT_GT(ch.budgets[1], ch.budgets[0]);
  EXPECT_GE(ch.budgets[0], 1);
  // The marginal gain of the last node granted to either sequence is at least that of the
  // best node denied to the other (greedy by marginal gain).
  const auto marginal = [](const std::vector<double>& e, int32_t n) {
    return n < static_cast<int32_t>(e.size()) ? e[static_cast<size_t>(n)] - e[static_cast<size_t>(n - 1)] : 0.0;
  };
  if (ch.budgets[0] > 1) {
    EXPECT_GE(marginal(poor, ch.budgets[0] - 1) + 1e-12, marginal(good, ch.budgets[1]));
  }
  EXPECT_GE(marginal(good, ch.budgets[1] - 1) + 1e-12, marginal(poor, ch.budgets[0]));
}

TEST(BudgetController, StepBudgetCapsTheWholeBatch) {
  ControllerParams p = quiet_params();
  p.step_budget = 20;
  BudgetController c(p, 5);
  fill(c, 1e-3, 0.0, 1.0, 3);  // rows are free: without the cap every sequence gets 64
  const auto gain = concave_gain(64);
  const auto ch = c.choose(64, {gain, gain, gain}, {1.0, 1.0, 1.0});
  int32_t total = 0;
  for (int32_t n : ch.budgets) total += n;
  EXPECT_EQ(total, 20);
  for (int32_t n : ch.budgets) EXPECT_GE(n, 6);  // equal curves share it about equally
}

TEST(BudgetController, FactoryParsesBudgets) {
  test::TinyModelConfig cfg;
  const std::string path = test::temp_dir() + "/tiny_budget.gguf";
  test::write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  engine::EngineParams ep;
  ep.n_ctx = 128;
  ep.n_slots = 2;
  engine::Engine eng(*m, ep);
  drafters::SpecConfig sc;
  sc.method = "medusa";
  EXPECT_EQ(engine::make_budget_policy(sc, eng), nullptr);  // the drafter's own size
  // The training-free drafters (and eagle, propd below) are sized by the controller
  // unless --budget is given.
  for (const char* method : {"lookup", "lookahead", "ptd"}) {
    sc.method = method;
    EXPECT_NE(dynamic_cast<engine::BudgetController*>(engine::make_budget_policy(sc, eng).get()), nullptr) << method;
  }
  sc.method = "lookup";
  sc.budget.budget = "12";
  auto fixed = engine::make_budget_policy(sc, eng);
  ASSERT_NE(fixed, nullptr);
  std::vector<int32_t> b = {3, 40};
  fixed->plan({}, b);
  EXPECT_EQ(b, (std::vector<int32_t>{12, 12}));
  for (const char* v : {"dynamic", "auto"}) {
    sc.budget.budget = v;
    sc.budget.n_max = 16;
    auto ctl = engine::make_budget_policy(sc, eng);
    auto* bc = dynamic_cast<engine::BudgetController*>(ctl.get());
    ASSERT_NE(bc, nullptr);
    EXPECT_GT(bc->latency().n_prior(), 4u);  // the start-up sweep ran (1 and 2 sequences)
    EXPECT_EQ(ctl->stats_json().at("policy"), "controller");
  }
  for (const char* bad : {"0", "-3", "many", "12x"}) {
    sc.budget.budget = bad;
    EXPECT_THROW(engine::make_budget_policy(sc, eng), InvalidArgument) << bad;
  }
  sc.method = "propd";
  sc.budget.budget = "";
  sc.params<drafters::PropdParams>().static_tree = true;
  EXPECT_EQ(engine::make_budget_policy(sc, eng), nullptr);
  sc.params<drafters::PropdParams>().static_tree = false;
  EXPECT_NE(dynamic_cast<engine::BudgetController*>(engine::make_budget_policy(sc, eng).get()), nullptr);
  ControllerParams bad;
  bad.n_max = 0;
  EXPECT_THROW(BudgetController(bad, 4), InvalidArgument);
}

TEST(BudgetController, LearnsAcceptanceForDraftersWithoutAModel) {
  // A drafter without its own acceptance model: the controller sweeps the budget octaves
  // that could pay, then settles where the learned acceptance pays: nowhere for a useless
  // drafter, at the cap for a perfect one. For the useless one, the sweep stops at the
  // first octave where even one accepted token per step (twice the octave below's
  // nothing, at least one) could not beat plain decoding: with t(n) = 1 ms + 0.1 ms n,
  // 16 nodes (2 tokens in 2.6 ms) lose to 1 token in 1.1 ms, 8 nodes (2 in 1.8 ms) do not.
  class Plain final : public drafters::Drafter {
   public:
    std::string name() const override { return "plain-test"; }
    tree::TokenTree propose(const drafters::DraftInput& in) override { return tree::TokenTree(in.context.back()); }
    int32_t max_nodes() const override { return 16; }
  };
  for (const bool perfect : {false, true}) {
    engine::Sequence seq({1, 2, 3}, {}, std::make_unique<Plain>());
    ControllerParams p = quiet_params(16);
    p.interval = 1;
    BudgetController c(p, 4);
    fill(c, 1e-3, 1e-4, 1.0);
    std::vector<int32_t> seen;
    engine::Sequence* ptr[] = {&seq};
    for (int step = 0; step < 40; ++step) {
      std::vector<int32_t> b = {16};
      c.plan(ptr, b);
      seen.push_back(b[0]);
      engine::SeqStepReport s;
      s.seq = &seq;
      s.budget = b[0];
      s.n_nodes = b[0];
      s.n_late = b[0];
      s.n_accepted = perfect ? b[0] - 1 : 0;
      engine::StepReport r;
      r.seqs = std::span<const engine::SeqStepReport>(&s, 1);
      r.n_seqs = 1;
      r.n_rows = b[0];
      r.rows_eff = b[0];
      r.t_step = 1e-3 + 1e-4 * b[0];
      c.observe(r);
    }
    for (int32_t n : {2, 4, 8}) EXPECT_NE(std::find(seen.begin(), seen.end(), n), seen.end()) << n;
    EXPECT_EQ(std::find(seen.begin(), seen.end(), 16) != seen.end(), perfect) << "16 swept only where it may pay";
    EXPECT_EQ(seen.back(), perfect ? 16 : 1);
  }
}

// The start-up sweep is cached per machine, model, threads, KV and sweep settings
// (engine/latency_profile.h): a second controller on the same engine reads the first's
// points instead of measuring; a different sweep, a damaged file or TREESPEC_CACHE_DIR=off
// measure again.
TEST(BudgetController, StartUpSweepIsCachedPerMachineAndModel) {
  test::TinyModelConfig cfg;
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/tiny_sweep.gguf";
  test::write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  engine::EngineParams ep;
  ep.n_ctx = 128;
  ep.n_slots = 2;
  engine::Engine eng(*m, ep);
  const std::string cache = dir + "/latency_cache";
  const char* before = std::getenv("TREESPEC_CACHE_DIR");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("TREESPEC_CACHE_DIR", cache.c_str(), 1);
  ASSERT_EQ(engine::latency_cache_dir(), cache);
  auto sweep = [&](int32_t n_max, bool& cached) {
    ControllerParams p = quiet_params(n_max);
    p.probe = true;
    BudgetController c(p, m->hparams().n_layer);
    c.calibrate(eng);
    const auto cal = c.stats_json().at("calibration");
    cached = cal.at("cached").get<bool>();
    return std::make_pair(cal.at("points").get<int64_t>(), c.latency().fit_global());
  };
  bool cached = true;
  const auto first = sweep(16, cached);
  EXPECT_FALSE(cached);
  EXPECT_GT(first.first, 4);
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(cache), std::filesystem::directory_iterator()), 1);
  const auto second = sweep(16, cached);
  EXPECT_TRUE(cached);
  EXPECT_EQ(second.first, first.first);
  EXPECT_EQ(second.second, first.second);  // the same points, the same fit
  sweep(8, cached);                        // another sweep: its own profile
  EXPECT_FALSE(cached);
  for (const auto& e : std::filesystem::directory_iterator(cache)) std::ofstream(e.path()) << "{not json";
  sweep(16, cached);
  EXPECT_FALSE(cached);  // damaged: measured again (and rewritten)
  sweep(16, cached);
  EXPECT_TRUE(cached);
  ::setenv("TREESPEC_CACHE_DIR", "off", 1);
  EXPECT_EQ(engine::latency_cache_dir(), "");
  sweep(16, cached);
  EXPECT_FALSE(cached);
  if (before != nullptr) {
    ::setenv("TREESPEC_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TREESPEC_CACHE_DIR");
  }
}
