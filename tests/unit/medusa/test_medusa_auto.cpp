// --spec auto (drafters::AutoDrafter with trained Medusa heads, lookup, PTD and a draft of
// the model's own first layers): greedy output equals plain greedy on every golden prompt
// with the real policy and with a policy that switches arms at random every step (hints
// right and wrong), alone and batched; sampled output with the coupled verifier equals
// plain decoding's for the same seed.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/golden.h"
#include "common/test_util.h"
#include "core/rng.h"
#include "drafters/draft_model/draft_model_drafter.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "engine/budget_controller.h"
#include "engine/engine.h"
#include "medusa_test_util.h"

using namespace treespec;

namespace {

// Picks a random arm every step; the hint is the next step's arm half of the time.
class RandomArms final : public engine::BudgetPolicy {
 public:
  explicit RandomArms(uint64_t seed) : rng_(seed) {}
  void plan(std::span<engine::Sequence* const> seqs, std::span<int32_t> budgets) override {
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto arms = seqs[i]->drafter().arms();
      ASSERT_FALSE(arms.empty());
      const auto n = static_cast<uint64_t>(arms.size());
      const auto cur = static_cast<int32_t>(rng_.uniform_int(n));
      const auto hint = static_cast<int32_t>(rng_.uniform_int(n));
      seqs[i]->drafter().select_arm(cur, hint, rng_.uniform() < 0.5);
      budgets[i] = std::min(budgets[i], arms[static_cast<size_t>(cur)].max_nodes);
      used_.push_back(cur);
    }
  }
  const std::vector<int32_t>& used() const { return used_; }

 private:
  core::Rng rng_;
  std::vector<int32_t> used_;
};

drafters::SpecConfig auto_config(const std::string& heads) {
  drafters::SpecConfig cfg;
  cfg.method = "auto";
  cfg.params<drafters::MedusaParams>().heads_path = heads;
  cfg.params<drafters::DraftModelParams>().layers = "0";
  return cfg;
}

std::string heads_file(const test::TrainedStories& ts) {
  const std::string path = test::temp_dir() + "/auto_stories_heads.gguf";
  ts.heads->write(path);
  return path;
}

}  // namespace

TEST(MedusaAuto, RandomArmSwitchingMatchesPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  const drafters::SpecConfig cfg = auto_config(heads_file(ts));
  auto make = [&](const model::Model& m) { return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1}); };
  {
    const auto d = make(*ts.m.model);  // its arms live in it
    std::vector<std::string> names;
    for (const auto& a : d->arms()) names.push_back(a.name);
    EXPECT_EQ(names, (std::vector<std::string>{"none", "lookup", "ptd", "medusa/2", "medusa/4", "medusa/8", "medusa/16",
                                               "draft"}));
  }
  for (int32_t n_seq : {1, 3}) {
    auto policy = std::make_shared<RandomArms>(11 + n_seq);
    const auto st =
        test::expect_goldens(ts.m, make, n_seq, 1, [policy](engine::Engine& e) { e.set_budget_policy(policy.get()); });
    EXPECT_GT(st.mean_accepted_length(), 1.1) << "the arms do accept drafts";
    std::vector<int64_t> per_arm(8, 0);
    for (int32_t a : policy->used()) per_arm[static_cast<size_t>(a)] += 1;
    for (size_t a = 0; a < per_arm.size(); ++a) EXPECT_GT(per_arm[a], 10) << "arm " << a << " used";
  }
}

TEST(MedusaAuto, PolicyChoiceMatchesPlainGreedyAloneAndBatched) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  const drafters::SpecConfig cfg = auto_config(heads_file(ts));
  auto make = [&](const model::Model& m) { return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1}); };
  for (int32_t n_seq : {1, 4}) {
    std::shared_ptr<engine::BudgetPolicy> policy;
    test::expect_goldens(ts.m, make, n_seq, 2, [&](engine::Engine& e) {
      policy = engine::make_budget_policy(cfg, e);
      e.set_budget_policy(policy.get());
    });
    ASSERT_NE(policy, nullptr);
    EXPECT_GT(policy->stats_json().at("steps").get<int64_t>(), 100);
  }
}

TEST(MedusaAuto, CoupledSamplingMatchesPlainSampling) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  const drafters::SpecConfig cfg = auto_config(heads_file(ts));
  const auto goldens = test::load_goldens();
  int compared = 0;
  for (size_t g = 0; g < goldens.size() && g < 6; ++g) {
    engine::SequenceParams sp;
    sp.sampling.temp = 0.8f;
    sp.sampling.top_k = 40;
    sp.sampling.seed = 100 + g;
    sp.mode = verify::Mode::coupled;
    sp.n_predict = 48;
    auto generate = [&](bool spec) {
      engine::EngineParams ep;
      ep.n_ctx = 256;
      engine::Engine eng(*ts.m.model, ep);
      drafters::SpecConfig c = cfg;
      if (!spec) c.method = "none";
      RandomArms policy(g);
      if (spec) eng.set_budget_policy(&policy);
      engine::Sequence s(goldens[g].prompt_tokens, sp,
                         drafters::make_drafter(c, drafters::DrafterEnv{ts.m.model.get(), {}, 1}));
      EXPECT_TRUE(eng.generate(s).ok());
      return s.generated();
    };
    EXPECT_EQ(generate(true), generate(false)) << "golden " << g;
    ++compared;
  }
  EXPECT_GE(compared, 3);
}

namespace {

// Always the same arm, a shadow grade asked for every step (so Medusa is graded
// everywhere); collects the drafters' samples.
class FixedArm final : public engine::BudgetPolicy {
 public:
  explicit FixedArm(int32_t arm) : arm_(arm) {}
  void plan(std::span<engine::Sequence* const> seqs, std::span<int32_t> budgets) override {
    seqs_.assign(seqs.begin(), seqs.end());
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i]->drafter().select_arm(arm_, arm_, true);
      budgets[i] = std::min(budgets[i], seqs[i]->drafter().arms()[static_cast<size_t>(arm_)].max_nodes);
    }
  }
  void observe(const engine::StepReport&) override {
    for (auto* s : seqs_) s->drafter().take_arm_samples(samples);
  }
  std::vector<drafters::ArmSample> samples;

 private:
  int32_t arm_;
  std::vector<engine::Sequence*> seqs_;
};

}  // namespace

// A shadow grade is what the arm gets when it drafts: graded on plain decoding's steps,
// lookup's and medusa/4's samples at every position equal their own steps' accepted
// tokens there (the heads see the same hidden state either way: the lossless contract).
TEST(MedusaAuto, ShadowGradesEqualTheArmsOwnSteps) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories();
  drafters::SpecConfig cfg = auto_config(heads_file(ts));
  // A static tree: a dynamic tree's shape also follows the heads' confidence, learned
  // from the positions where the heads ran, which differ between the two runs (every
  // position under plain decoding, only the steps' roots under medusa/4), so there the
  // shadow grade is the tree the shadow proposed, not the very tree the arm's own run did.
  cfg.params<drafters::MedusaParams>().tree = "auto:16";
  const auto goldens = test::load_goldens();
  const int32_t kLookup = 1, kMedusa4 = 4;
  int64_t compared = 0, accepted_drafts = 0;
  for (size_t g = 0; g < 4; ++g) {
    auto run = [&](int32_t arm) {
      engine::EngineParams ep;
      ep.n_ctx = 256;
      engine::Engine eng(*ts.m.model, ep);
      FixedArm policy(arm);
      eng.set_budget_policy(&policy);
      engine::SequenceParams sp;
      sp.sampling.temp = 0.0f;
      sp.n_predict = 64;
      engine::Sequence s(goldens[g].prompt_tokens, sp,
                         drafters::make_drafter(cfg, drafters::DrafterEnv{ts.m.model.get(), {}, 1}));
      EXPECT_TRUE(eng.generate(s).ok());
      return policy.samples;
    };
    const auto plain = run(0);
    for (int32_t arm : {kLookup, kMedusa4}) {
      std::map<int64_t, int32_t> shadow;  // position -> tokens, graded on plain steps
      for (const auto& smp : plain) {
        if (smp.arm == arm && !smp.ran) shadow[smp.position] = smp.tokens;
      }
      for (const auto& smp : run(arm)) {
        if (smp.arm != arm || !smp.ran) continue;
        const auto it = shadow.find(smp.position);
        if (it == shadow.end()) continue;  // first step (no heads yet) or the last few (text ended)
        EXPECT_EQ(it->second, smp.tokens) << "golden " << g << ", arm " << arm << ", position " << smp.position;
        ++compared;
        accepted_drafts += smp.tokens - 1;
      }
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(accepted_drafts, 50) << "the comparison covers accepted drafts, not only misses";
}
