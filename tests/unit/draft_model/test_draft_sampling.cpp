// Lossless sampling with a real draft model: the emitted tokens keep the target's
// distribution exactly.
//
// A tiny random target and a draft (another tiny random model with the same vocabulary,
// or a one-layer subset of the target) generate 2 tokens from a fixed prompt, N times
// with different seeds, through the engine with the lossless verifier
// (common/two_token_sampling.h). Chains draw every draft token from the draft's warped
// distribution q and report q (min(1, p/q) with the residual max(p - q, 0)); trees add
// deterministic branches (point masses). Chi-square tests at significance 1e-3 with fixed
// seeds; power: the same drafts verified against a WRONG q (uniform) are biased, and the
// test must reject them at the same significance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "common/two_token_sampling.h"
#include "drafters/draft_model/draft_model_drafter.h"
#include "drafters/factory.h"
#include "engine/engine.h"

using namespace treespec;

namespace {

constexpr double kAlpha = 1e-3;
constexpr int32_t kV = 16;
constexpr int32_t kSamples = 30000;

struct Models {
  std::unique_ptr<model::Model> target;
  std::string dir;
};

Models make_setup() {
  Models s;
  s.dir = test::temp_dir();
  test::TinyModelConfig t;
  t.n_vocab = kV;
  t.n_layer = 2;
  t.weight_scale = 1.0f;  // peaked enough that drafts are often accepted, not always
  t.eos_id = 2;
  t.seed = 11;
  test::write_tiny_model(s.dir + "/target.gguf", t);
  test::TinyModelConfig d = t;
  d.seed = 12;
  d.n_layer = 1;
  test::write_tiny_model(s.dir + "/draft.gguf", d);
  s.target = model::Model::load(s.dir + "/target.gguf");
  return s;
}

using Result = test::TwoTokenResult;

// n sequences with seeds derived from `seed`, `batch` of them decoding together (one
// forward pass for all: a row's result must not depend on the others).
// outputs (if given): the two tokens of every sample, in seed order.
Result simulate(const model::Model& target, const drafters::SpecConfig& cfg, const sampling::SamplingParams& sp0,
                int32_t n, uint64_t seed, bool wrong_q, int32_t batch = 1, verify::Mode mode = verify::Mode::lossless,
                std::vector<int32_t>* outputs = nullptr) {
  test::TwoTokenRun run;
  run.n = n;
  run.seed = seed;
  run.wrong_q = wrong_q;
  run.batch = batch;
  run.mode = mode;
  run.sampled_counter = "draft_sampled_nodes";
  run.outputs = outputs;
  const auto make = [&](uint64_t s) { return drafters::make_drafter(cfg, drafters::DrafterEnv{&target, {}, s}); };
  return test::simulate_two_tokens(target, make, sp0, run);
}

drafters::SpecConfig cfg_of(const std::string& model_path, const std::string& layers, bool tree) {
  drafters::SpecConfig c;
  c.method = "draft";
  c.params<drafters::DraftModelParams>().model_path = model_path;
  c.params<drafters::DraftModelParams>().layers = layers;
  c.params<drafters::DraftModelParams>().tree = tree;
  c.params<drafters::DraftModelParams>().n_draft_max = 3;  // only the first two tokens are counted
  c.params<drafters::DraftModelParams>().p_min = 0.0f;     // always draft: every step exercises the verifier
  return c;
}

drafters::SpecConfig pruned(drafters::SpecConfig c) {
  c.prune.enabled = true;
  c.prune.layer = 1;
  c.prune.top_k = 1;
  return c;
}

sampling::SamplingParams params(float temp, int32_t top_k, float top_p, float min_p) {
  return test::sampling_params(temp, top_k, top_p, min_p);
}

struct Case {
  const char* name;
  drafters::SpecConfig cfg;
  sampling::SamplingParams sp;
  double min_mal;  // the drafts were really verified and accepted
  int32_t batch = 1;
};

// The exactness checks of one case run with n samples: chi-square of the first token and
// of pairs, nothing the warped target excludes, drafts accepted and sampled, and pruning
// really pruning.
void expect_exact(const char* verifier, const Case& c, const Result& r, int32_t n) {
  std::printf("%s%s: first chi2 %.1f df %d p %.3g; pairs chi2 %.1f df %d p %.3g; mean accepted length %.3f\n", verifier,
              c.name, r.first.stat, r.first.df, r.first.p_value, r.pairs.stat, r.pairs.df, r.pairs.p_value,
              r.mean_accepted_length);
  EXPECT_EQ(r.first.impossible, 0) << "emitted a token the warped target excludes";
  EXPECT_EQ(r.pairs.impossible, 0);
  EXPECT_GT(r.first.p_value, kAlpha);
  EXPECT_GT(r.pairs.p_value, kAlpha);
  EXPECT_GT(r.mean_accepted_length, c.min_mal);
  EXPECT_GT(r.sampled_nodes, 0) << "no draft token was sampled";
  if (c.cfg.prune.enabled) {
    EXPECT_GT(r.pruned, n / 10) << "the pruned cases must really prune sampled children";
  }
}

}  // namespace

TEST(DraftSampling, EmittedTokensKeepTheTargetDistribution) {
  const Models s = make_setup();
  // An unrelated random draft is accepted rarely; a layer of the target often.
  const Case cases[] = {
      {"second model, chain, temp 1", cfg_of(s.dir + "/draft.gguf", "", false), params(1.0f, 0, 1.0f, 0.0f), 1.03},
      {"second model, tree, temp 1", cfg_of(s.dir + "/draft.gguf", "", true), params(1.0f, 0, 1.0f, 0.0f), 1.03},
      {"layer 0 of the target, chain, temp 1", cfg_of("", "0", false), params(1.0f, 0, 1.0f, 0.0f), 1.3},
      {"layer 0 of the target, tree, temp 1", cfg_of("", "0", true), params(1.0f, 0, 1.0f, 0.0f), 1.3},
      {"layer 0, chain, temp 0.8 top-k 6 top-p 0.9 min-p 0.05", cfg_of("", "0", false), params(0.8f, 6, 0.9f, 0.05f),
       1.3},
      {"layer 0, tree, temp 1.3 top-p 0.8", cfg_of("", "0", true), params(1.3f, 0, 0.8f, 0.0f), 1.2},
      {"layer 0, chain, temp 1, batch 3", cfg_of("", "0", false), params(1.0f, 0, 1.0f, 0.0f), 1.3, 3},
      {"second model, tree, temp 0.9 top-k 8, batch 4", cfg_of(s.dir + "/draft.gguf", "", true),
       params(0.9f, 8, 1.0f, 0.0f), 1.03, 4},
      // Early pruning after layer 1 at k 1 (the logit lens keeps only its argmax): most
      // sampled children are pruned, and each must still be tested at its parent.
      {"layer 0, chain, temp 1, pruned after layer 1 at k 1", pruned(cfg_of("", "0", false)),
       params(1.0f, 0, 1.0f, 0.0f), 1.05},
      {"layer 0, tree, temp 1, pruned, batch 3", pruned(cfg_of("", "0", true)), params(1.0f, 0, 1.0f, 0.0f), 1.05, 3},
  };
  uint64_t seed = 1;  // fixed seeds: the test is deterministic
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Result r = simulate(*s.target, c.cfg, c.sp, kSamples, seed++, false, c.batch);
    expect_exact("", c, r, kSamples);
  }
}

TEST(DraftSampling, AWrongDraftDistributionIsDetected) {
  // Power of the test above: the same chains verified with a wrong q (uniform instead of
  // the distribution they were drawn from) are biased and must be rejected.
  const Models s = make_setup();
  const Result r =
      simulate(*s.target, cfg_of(s.dir + "/draft.gguf", "", false), params(1.0f, 0, 1.0f, 0.0f), kSamples, 99, true);
  std::printf("wrong q: first chi2 %.1f df %d p %.3g; pairs chi2 %.1f df %d p %.3g\n", r.first.stat, r.first.df,
              r.first.p_value, r.pairs.stat, r.pairs.df, r.pairs.p_value);
  EXPECT_LT(std::min(r.first.p_value, r.pairs.p_value), kAlpha) << "a biased verifier went undetected";
}

// The coupled verifier (Gumbel-max coupling, docs/sampling.md): the same exactness
// checks, and more: every sample equals plain coupled sampling (method none) with the
// same seed, token for token, alone and batched, chain, tree and pruned. The draft
// model proposes with the verifier's own noise, so it is accepted at least as often as
// with independent draws.
TEST(DraftSampling, CoupledSamplesEqualPlainSamplingAndKeepTheTargetDistribution) {
  const Models s = make_setup();
  constexpr int32_t kN = 20000;
  const Case cases[] = {
      {"layer 0, chain, temp 1", cfg_of("", "0", false), params(1.0f, 0, 1.0f, 0.0f), 1.3},
      {"second model, tree, temp 0.9 top-k 8, batch 4", cfg_of(s.dir + "/draft.gguf", "", true),
       params(0.9f, 8, 1.0f, 0.0f), 1.03, 4},
      {"layer 0, chain, temp 0.8 top-k 6 top-p 0.9 min-p 0.05, batch 3", cfg_of("", "0", false),
       params(0.8f, 6, 0.9f, 0.05f), 1.3, 3},
      {"layer 0, tree, temp 1, pruned, batch 3", pruned(cfg_of("", "0", true)), params(1.0f, 0, 1.0f, 0.0f), 1.05, 3},
  };
  uint64_t seed = 31;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    drafters::SpecConfig none;
    std::vector<int32_t> want, got;
    simulate(*s.target, none, c.sp, kN, seed, false, 1, verify::Mode::coupled, &want);
    const Result r = simulate(*s.target, c.cfg, c.sp, kN, seed++, false, c.batch, verify::Mode::coupled, &got);
    ASSERT_EQ(got.size(), want.size());
    size_t n_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) n_diff += got[i] != want[i];
    EXPECT_EQ(n_diff, 0u) << "samples that differ from plain coupled sampling with the same seed";
    expect_exact("coupled ", c, r, kN);
  }
}
