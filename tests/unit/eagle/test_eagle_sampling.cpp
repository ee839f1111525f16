// Lossless sampling with EAGLE drafts: the emitted tokens keep the target's distribution
// exactly (common/two_token_sampling.h: chi-square tests of the first token and of the
// first two tokens against the exact warped target, significance 1e-3, fixed seeds).
//
// A tiny random target (16 tokens) with an EAGLE layer trained on it for a few seconds.
// At temperature > 0 each expanded node gets one child drawn from the layer's warped
// distribution q, which the drafter reports, so the lossless verifier accepts it with
// min(1, p/q) and resamples from the residual. The negative control verifies the same
// drafts against a wrong (uniform) q and must be rejected. Under the coupled verifier every
// sample equals plain coupled sampling with the same seed, token for token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "common/two_token_sampling.h"
#include "drafters/eagle/eagle_drafter.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "train/eagle_train.h"

using namespace treespec;

namespace {

constexpr double kAlpha = 1e-3;
constexpr int32_t kV = 16;

struct Fixture {
  std::unique_ptr<model::Model> target;
  std::string layer;
};

const Fixture& fixture() {
  static Fixture s = [] {
    Fixture r;
    const std::string dir = test::temp_dir();
    test::TinyModelConfig t;
    t.n_vocab = kV;
    t.n_layer = 2;
    t.weight_scale = 1.0f;  // peaked enough that drafts are often accepted, not always
    t.seed = 11;
    test::write_tiny_model(dir + "/target.gguf", t);
    r.target = model::Model::load(dir + "/target.gguf");
    train::EagleTrainParams p;
    p.gen.samples = 48;
    p.gen.seq_len = 64;
    p.gen.temp = 1.0f;
    p.gen.bos_id = 1;
    p.steps = 150;
    p.window = 16;
    p.windows = 8;
    r.layer = dir + "/target.eagle.gguf";
    train::train_eagle(*r.target, p, r.layer);
    return r;
  }();
  return s;
}

struct Case {
  const char* name;
  int32_t nodes;  // tree budget incl. the root
  sampling::SamplingParams sp;
  int32_t batch = 1;
};

test::TwoTokenResult simulate(const Case& c, int32_t n, uint64_t seed, bool wrong_q, verify::Mode mode,
                              std::vector<int32_t>* outputs = nullptr) {
  const Fixture& s = fixture();
  drafters::SpecConfig cfg;
  cfg.method = "eagle";
  cfg.params<drafters::EagleParams>().path = s.layer;
  cfg.params<drafters::EagleParams>().n_nodes = c.nodes;
  test::TwoTokenRun run;
  run.n = n;
  run.seed = seed;
  run.wrong_q = wrong_q;
  run.batch = c.batch;
  run.mode = mode;
  run.sampled_counter = "eagle_sampled_nodes";
  run.outputs = outputs;
  const auto make = [&](uint64_t sd) {
    return drafters::make_drafter(cfg, drafters::DrafterEnv{s.target.get(), {}, sd});
  };
  return test::simulate_two_tokens(*s.target, make, c.sp, run);
}

void expect_exact(const char* verifier, const Case& c, const test::TwoTokenResult& r) {
  std::printf("%s%s: first chi2 %.1f df %d p %.3g; pairs chi2 %.1f df %d p %.3g; mean accepted length %.3f\n", verifier,
              c.name, r.first.stat, r.first.df, r.first.p_value, r.pairs.stat, r.pairs.df, r.pairs.p_value,
              r.mean_accepted_length);
  EXPECT_EQ(r.first.impossible, 0) << "emitted a token the warped target excludes";
  EXPECT_EQ(r.pairs.impossible, 0);
  EXPECT_GT(r.first.p_value, kAlpha);
  EXPECT_GT(r.pairs.p_value, kAlpha);
  EXPECT_GT(r.sampled_nodes, 0) << "no draft token was sampled";
  EXPECT_GT(r.mean_accepted_length, 1.1) << "the drafts were rarely accepted: the test exercises little";
}

const Case kCases[] = {
    {"chain of 3, temp 1", 4, test::sampling_params(1.0f, 0, 1.0f, 0.0f)},
    {"chain of 1, temp 0.8 top-k 6 top-p 0.9 min-p 0.05", 2, test::sampling_params(0.8f, 6, 0.9f, 0.05f)},
    {"chain of 5, temp 1.3 top-p 0.8, batch 3", 6, test::sampling_params(1.3f, 0, 0.8f, 0.0f), 3},
};

}  // namespace

TEST(EagleSampling, EmittedTokensKeepTheTargetDistribution) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    expect_exact("", c, simulate(c, 30000, seed++, false, verify::Mode::lossless));
  }
}

TEST(EagleSampling, AWrongDraftDistributionIsDetected) {
  const test::TwoTokenResult r = simulate(kCases[0], 30000, 99, true, verify::Mode::lossless);
  std::printf("wrong q: first chi2 %.1f df %d p %.3g; pairs chi2 %.1f df %d p %.3g\n", r.first.stat, r.first.df,
              r.first.p_value, r.pairs.stat, r.pairs.df, r.pairs.p_value);
  EXPECT_LT(std::min(r.first.p_value, r.pairs.p_value), kAlpha) << "a biased verifier went undetected";
}

TEST(EagleSampling, CoupledSamplesEqualPlainSamplingAndKeepTheTargetDistribution) {
  const Fixture& s = fixture();
  constexpr int32_t kN = 20000;
  uint64_t seed = 31;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::vector<int32_t> want, got;
    test::TwoTokenRun plain;
    plain.n = kN;
    plain.seed = seed;
    plain.mode = verify::Mode::coupled;
    plain.outputs = &want;
    drafters::SpecConfig none;
    test::simulate_two_tokens(
        *s.target,
        [&](uint64_t sd) {
          return drafters::make_drafter(none, drafters::DrafterEnv{s.target.get(), {}, sd});
        },
        c.sp, plain);
    const auto r = simulate(c, kN, seed++, false, verify::Mode::coupled, &got);
    ASSERT_EQ(got.size(), want.size());
    size_t n_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) n_diff += got[i] != want[i];
    EXPECT_EQ(n_diff, 0u) << "samples that differ from plain coupled sampling with the same seed";
    expect_exact("coupled ", c, r);
  }
}
