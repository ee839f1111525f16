// PTD on stories260K: greedy output equals plain greedy decoding exactly on every golden
// prompt, alone and batched (4 sequences per forward), with the fixes on and in the
// reference configuration, and under a budget controller that keeps changing the budget
// (PTD must never propose more rows than it is given). `treespec run --spec ptd --json`
// reports the drafter's counters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/test_util.h"
#include "drafters/factory.h"
#include "drafters/ptd/ptd_drafter.h"

using namespace treespec;

namespace {

test::DrafterMaker ptd_maker(const test::StoriesModel& m, const drafters::PtdParams& p = {}) {
  const std::vector<int32_t> eog = m.tok->eog_ids();
  return [p, eog](const model::Model& model) {
    drafters::SpecConfig cfg;
    cfg.method = "ptd";
    cfg.params<drafters::PtdParams>() = p;
    return drafters::make_drafter(cfg, drafters::DrafterEnv{&model, eog, 1});
  };
}

double counter(const drafters::Drafter& d, const std::string& name) {
  for (const auto& [k, v] : d.counters()) {
    if (k == name) return v;
  }
  return -1.0;
}

// What BudgetChecker saw, over every sequence it wrapped.
struct BudgetRecord {
  int violations = 0;    // proposals larger than their budget
  int32_t max_seen = 0;  // largest proposal
};

// Wraps a drafter and records any proposal larger than the budget it was given.
class BudgetChecker final : public drafters::Drafter {
 public:
  BudgetChecker(std::unique_ptr<drafters::Drafter> inner, BudgetRecord* rec) : inner_(std::move(inner)), rec_(rec) {}
  std::string name() const override { return inner_->name(); }
  void begin(std::span<const int32_t> prompt) override { inner_->begin(prompt); }
  tree::TokenTree propose(const drafters::DraftInput& in) override {
    tree::TokenTree t = inner_->propose(in);
    if (t.size() > in.budget) ++rec_->violations;
    rec_->max_seen = std::max(rec_->max_seen, t.size());
    return t;
  }
  void observe(const drafters::StepFeedback& fb) override { inner_->observe(fb); }
  int32_t max_nodes() const override { return inner_->max_nodes(); }

 private:
  std::unique_ptr<drafters::Drafter> inner_;
  BudgetRecord* rec_;
};

// A stand-in for the ProPD controller: a budget that cycles through 1..23 rows.
class CyclingBudget final : public engine::BudgetPolicy {
 public:
  void plan(std::span<engine::Sequence* const> seqs, std::span<int32_t> budgets) override {
    for (size_t i = 0; i < seqs.size(); ++i) budgets[i] = 1 + static_cast<int32_t>((step_ * 7 + i * 3) % 23);
    ++step_;
  }

 private:
  int64_t step_ = 0;
};

}  // namespace

TEST(PtdGolden, GreedyMatchesPlainDecodingBatch1) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto st = test::expect_goldens(m, ptd_maker(m), 1);
  // It does speculate: trie tokens are accepted and the tree rows are what PTD feeds.
  EXPECT_GT(st.mean_accepted_length(), 1.1);
  EXPECT_GT(st.rows_per_step(), 5.0);
  EXPECT_LE(st.rows_per_step(), 1 + drafters::PtdParams{}.max_draft_rows + drafters::PtdParams{}.max_trie_rows);
}

TEST(PtdGolden, GreedyMatchesPlainDecodingBatch4) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto st = test::expect_goldens(m, ptd_maker(m), 4);
  EXPECT_GT(st.n_accepted, 0);
}

TEST(PtdGolden, ReferenceConfigurationAlsoMatches) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  drafters::PtdParams p;
  p.real_eos = false;
  p.reinsert = false;
  p.live_feedback = false;
  test::expect_goldens(m, ptd_maker(m, p), 1);
  test::expect_goldens(m, ptd_maker(m, p), 4);
}

TEST(PtdGolden, FollowsAChangingBudgetAndStaysExact) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  CyclingBudget policy;
  BudgetRecord rec;
  const auto ptd = ptd_maker(m);
  test::expect_goldens(
      m, [&](const model::Model& model) { return std::make_unique<BudgetChecker>(ptd(model), &rec); }, 4, 1,
      [&](engine::Engine& eng) { eng.set_budget_policy(&policy); });
  EXPECT_EQ(rec.violations, 0);
  EXPECT_LE(rec.max_seen, 23);
}

TEST(PtdGolden, DrafterCountersDescribeTheSteps) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto g = test::load_goldens()[1];
  engine::EngineParams ep;
  ep.n_ctx = 256;
  engine::Engine eng(*m.model, ep);
  eng.set_eog_ids(m.tok->eog_ids());
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = g.n_predict();
  engine::Sequence seq(g.prompt_tokens, sp, ptd_maker(m)(*m.model));
  ASSERT_TRUE(eng.generate(seq).ok());
  EXPECT_EQ(seq.generated(), g.generated_tokens);
  const auto& d = seq.drafter();
  const auto& st = seq.stats();
  // Draft + trie rows + the anchor = the engine's rows.
  EXPECT_EQ(counter(d, "steps"), static_cast<double>(st.n_steps));
  EXPECT_EQ(counter(d, "draft_rows") + counter(d, "trie_rows") + counter(d, "steps"), static_cast<double>(st.n_rows));
  EXPECT_EQ(counter(d, "trie_rows"), static_cast<double>(st.n_draft_tokens));
  EXPECT_GT(counter(d, "draft_rows_per_step"), 0.0);
  EXPECT_GT(counter(d, "pool_keys"), 0.0);
  EXPECT_GT(counter(d, "draft_slides"), 0.0);
  EXPECT_GT(counter(d, "pool_insert_steps"), 0.0);
  EXPECT_LE(counter(d, "max_draft_rows"), drafters::PtdParams{}.max_draft_rows);
  EXPECT_LE(counter(d, "max_trie_rows"), drafters::PtdParams{}.max_trie_rows);
}

TEST(PtdGolden, RunJsonWithSpecPtd) {
  TREESPEC_REQUIRE_SHARED();
  const std::string model = test::stories_gguf();
  const auto g = test::load_goldens()[1];
  std::string out;
  const std::string cmd = test::treespec_binary() + " run -m " + model + " -p '" + g.prompt + "' -n " +
                          std::to_string(g.n_predict()) +
                          " --temp 0 -t 1 --json --spec ptd --ptd-draft-rows 40 --ptd-trie-rows 20";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), g.generated_tokens);
  const auto& d = j.at("stats").at("drafter");
  EXPECT_LE(d.at("max_draft_rows").get<double>(), 40.0);
  EXPECT_LE(d.at("max_trie_rows").get<double>(), 20.0);
  EXPECT_GT(d.at("draft_rows_per_step").get<double>(), 0.0);
  EXPECT_TRUE(d.contains("accepted_per_step"));
  EXPECT_EQ(j.at("stats").at("spec"), "ptd");
  // Bad parameters are clear errors naming the flag's parameter.
  std::string err;
  const int rc =
      test::run_command(test::treespec_binary() + " run -m " + model + " -p hi -n 2 --spec ptd --ptd-width 0 2>&1",
                        &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("ptd width"), std::string::npos) << err;
  // Sampled run with the reference verifier is accepted and labelled lossy.
  ASSERT_EQ(test::run_command(test::treespec_binary() + " run -m " + model +
                                  " -p hi -n 16 --temp 0.8 -s 3 --json --spec ptd --verify ptd-reference",
                              &out),
            0);
  EXPECT_EQ(nlohmann::json::parse(out).at("stats").at("verify"), "ptd-reference (lossy)");
}
