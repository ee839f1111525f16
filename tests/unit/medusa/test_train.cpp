// Self-distillation training: the hand-written gradients match finite differences,
// training is deterministic for a seed (whatever the thread count), and a short run on
// stories260K lowers the held-out loss of every head and puts head 0 far above chance.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/medusa/medusa_heads.h"
#include "medusa_test_util.h"
#include "train/medusa_backprop.h"
#include "train/medusa_train.h"

using namespace treespec;
using train::HeadTensors;

namespace {

double loss_at(const HeadTensors& p, int32_t E, int32_t V, const std::vector<float>& h, int64_t M,
               const std::vector<int32_t>& tgt, const train::SoftTargets& soft, core::ThreadPool& pool) {
  HeadTensors g = p.like(0.0f);
  train::HeadScratch sc;
  return train::head_forward_backward(p, E, V, h.data(), M, tgt.data(), soft, g, sc, pool);
}

}  // namespace

TEST(MedusaTrain, GradientsMatchFiniteDifferences) {
  const int32_t E = 6, V = 9, R = 2;
  const int64_t M = 5;
  core::Rng rng(3);
  auto randv = [&](size_t n, float sd) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.normal()) * sd;
    return v;
  };
  HeadTensors p;
  for (int32_t r = 0; r < R; ++r) {
    p.w.push_back(randv(E * E, 0.5f));
    p.b.push_back(randv(E, 0.3f));
  }
  p.out = randv(static_cast<size_t>(V) * E, 0.7f);
  const std::vector<float> h = randv(static_cast<size_t>(M) * E, 1.0f);
  const std::vector<int32_t> tgt = {3, -1, 0, 8, 5};  // row 1 has no target
  // Soft targets: two entries per row.
  const std::vector<int32_t> sid = {3, 4, 0, 1, 0, 2, 8, 7, 5, 6};
  const std::vector<float> sp = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 0.6f, 0.4f, 0.8f, 0.2f};
  core::ThreadPool pool(2);
  for (float kl : {0.0f, 0.4f}) {
    SCOPED_TRACE(kl);
    const train::SoftTargets soft{sid.data(), sp.data(), 2, kl};
    HeadTensors g = p.like(0.0f);
    train::HeadScratch sc;
    train::head_forward_backward(p, E, V, h.data(), M, tgt.data(), soft, g, sc, pool);
    // Central differences on every parameter (f32 forward: tolerance accordingly).
    auto check = [&](std::vector<float>& param, const std::vector<float>& grad, const char* what) {
      for (size_t i = 0; i < param.size(); ++i) {
        const float keep = param[i];
        const float eps = 1e-2f;
        param[i] = keep + eps;
        const double lp = loss_at(p, E, V, h, M, tgt, soft, pool);
        param[i] = keep - eps;
        const double lm = loss_at(p, E, V, h, M, tgt, soft, pool);
        param[i] = keep;
        const double fd = (lp - lm) / (2.0 * eps);
        ASSERT_NEAR(grad[i], fd, 5e-4 + 3e-3 * std::fabs(fd)) << what << "[" << i << "]";
      }
    };
    for (int32_t r = 0; r < R; ++r) {
      check(p.w[static_cast<size_t>(r)], g.w[static_cast<size_t>(r)], "W");
      check(p.b[static_cast<size_t>(r)], g.b[static_cast<size_t>(r)], "b");
    }
    check(p.out, g.out, "out");
    // The same head with its vocab projection frozen (heads that share the model's output):
    // no gradient or Adam moments for it, the same block gradients bit for bit, and an
    // Adam step leaves it as it was.
    HeadTensors pf = p;
    pf.out_frozen = true;
    HeadTensors gf = pf.like(0.0f);
    EXPECT_TRUE(gf.out.empty());
    EXPECT_EQ(pf.n_params(), p.n_params() - p.out.size());
    train::HeadScratch sf;
    train::head_forward_backward(pf, E, V, h.data(), M, tgt.data(), soft, gf, sf, pool);
    EXPECT_EQ(gf.w, g.w);
    EXPECT_EQ(gf.b, g.b);
    train::AdamState st(pf);
    train::adam_update(pf, gf, st, 0.1f, 1, pool);
    EXPECT_EQ(pf.out, p.out);
    EXPECT_NE(pf.w, p.w);
  }
}

TEST(MedusaTrain, AdamStepsAgainstTheGradient) {
  HeadTensors p;
  p.out = {1.0f, -2.0f};
  HeadTensors g = p.like(0.0f);
  g.out = {0.5f, -0.5f};
  train::AdamState st(p);
  core::ThreadPool pool(1);
  train::adam_update(p, g, st, 0.1f, 1, pool);
  // First bias-corrected Adam step moves each weight by lr against the gradient's sign.
  EXPECT_NEAR(p.out[0], 0.9f, 1e-5);
  EXPECT_NEAR(p.out[1], -1.9f, 1e-5);
}

TEST(MedusaTrain, DeterministicForASeedWhateverTheThreads) {
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/tiny.gguf";
  test::write_tiny_model(path, {});
  auto m = model::Model::load(path);
  train::MedusaTrainParams p;
  p.n_heads = 2;
  p.samples = 6;
  p.seq_len = 24;
  p.steps = 12;
  p.batch = 32;
  p.kl_weight = 0.3f;
  p.gen_batch = 4;
  p.eog_ids = {2};
  auto run = [&](uint64_t seed, int32_t threads) {
    p.seed = seed;
    p.n_threads = threads;
    auto h = train::train_medusa_heads(*m, p);
    const std::string out = dir + fmt::format("/h_{}_{}.gguf", seed, threads);
    h->write(out);
    return test::read_file(out);
  };
  const std::string a = run(5, 1);
  EXPECT_EQ(a, run(5, 1));
  EXPECT_EQ(a, run(5, 2));
  EXPECT_NE(a, run(6, 1));
}

TEST(MedusaTrain, RejectsBadParameters) {
  train::MedusaTrainParams p;
  p.n_heads = 0;
  EXPECT_THROW(p.validate(), InvalidArgument);
  p = {};
  p.seq_len = 3;  // shorter than heads + 2
  EXPECT_THROW(p.validate(), InvalidArgument);
  p = {};
  p.samples = 1;
  EXPECT_THROW(p.validate(), InvalidArgument);
  p = {};
  p.kl_weight = 2.0f;
  EXPECT_THROW(p.validate(), InvalidArgument);
}

TEST(MedusaTrain, StoriesTrainingLowersHeldOutLossAndBeatsChance) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ts = test::trained_stories_with_report();
  const auto& r = ts.report;
  const int32_t K = ts.params.n_heads;
  const double chance = 1.0 / ts.m.model->hparams().n_vocab;
  ASSERT_EQ(r.after.loss.size(), static_cast<size_t>(K));
  EXPECT_GT(r.heldout_positions, 500);
  for (int32_t k = 0; k < K; ++k) {
    const auto ks = static_cast<size_t>(k);
    const float top1 = r.after.topk_acc[ks * 10];
    std::printf("head %d: held-out loss %.3f -> %.3f, top-1 %.3f, top-10 %.3f (chance top-1 %.4f)\n", k,
                r.before.loss[ks], r.after.loss[ks], top1, r.after.topk_acc[ks * 10 + 9], chance);
    EXPECT_LT(r.after.loss[ks], r.before.loss[ks] - 0.3) << "head " << k;
    for (int32_t j = 1; j < 10; ++j) EXPECT_GE(r.after.topk_acc[ks * 10 + j], r.after.topk_acc[ks * 10 + j - 1]);
  }
  // Head 0 predicts 2 ahead: far above chance (1/512), and better than the farther heads.
  EXPECT_GT(r.after.topk_acc[0], 0.25);
  EXPECT_GT(r.after.topk_acc[0], 100 * chance);
  EXPECT_GT(r.after.topk_acc[0], r.after.topk_acc[static_cast<size_t>(K - 1) * 10]);
  // The calibration table went into the heads' metadata.
  EXPECT_EQ(ts.heads->info().calibration, r.after.topk_acc);
  EXPECT_EQ(ts.heads->info().calib_top_k, 10);
}

// With a draft vocabulary the calibration ranks a target among the draft tokens only: a
// target outside it is never a hit, one inside ranks among fewer tokens.
TEST(MedusaTrain, CalibrationRanksAmongTheDraftVocabulary) {
  const std::string dir = test::temp_dir();
  test::write_tiny_model(dir + "/tiny.gguf", {});
  auto m = model::Model::load(dir + "/tiny.gguf");
  const int32_t E = m->hparams().n_embd, V = m->hparams().n_vocab;
  const auto base = test::random_heads(*m, 2, 1, 5, 0.3f);
  core::Rng rng(4);
  const int64_t n = 40;
  std::vector<float> h(static_cast<size_t>(n) * E);
  for (auto& x : h) x = static_cast<float>(rng.normal());
  std::vector<std::vector<int32_t>> even(2), odd(2);
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t k = 0; k < 2; ++k) {
      even[static_cast<size_t>(k)].push_back(static_cast<int32_t>(2 * ((i * 7 + k) % (V / 2))));
      odd[static_cast<size_t>(k)].push_back(even[static_cast<size_t>(k)].back() + 1);
    }
  }
  std::vector<int32_t> all(static_cast<size_t>(V)), evens;
  for (int32_t t = 0; t < V; ++t) {
    all[static_cast<size_t>(t)] = t;
    if (t % 2 == 0) evens.push_back(t);
  }
  const auto whole = test::with_draft_vocab(*base, *m, {});
  const auto every = test::with_draft_vocab(*base, *m, all);
  const auto half = test::with_draft_vocab(*base, *m, evens);
  core::ThreadPool pool(1);
  const int32_t K = static_cast<int32_t>(evens.size());  // top-|draft|: every target in it is a hit
  // All ids as the draft vocabulary: the same table as none.
  EXPECT_EQ(train::evaluate_heads(*every, h.data(), n, even, 10, &pool).topk_acc,
            train::evaluate_heads(*whole, h.data(), n, even, 10, &pool).topk_acc);
  // Targets outside it: no hits at any k; inside: all within top-|draft|.
  for (float a : train::evaluate_heads(*half, h.data(), n, odd, K, &pool).topk_acc) EXPECT_EQ(a, 0.0f);
  const auto in = train::evaluate_heads(*half, h.data(), n, even, K, &pool).topk_acc;
  EXPECT_EQ(in[static_cast<size_t>(K - 1)], 1.0f);
  EXPECT_EQ(in[static_cast<size_t>(2 * K - 1)], 1.0f);
}

TEST(MedusaTrain, CommandLine) {
  const std::string dir = test::temp_dir();
  const std::string model = dir + "/tiny.gguf";
  test::write_tiny_model(model, {});
  const std::string prompts = dir + "/prompts.txt";
  {
    FILE* f = std::fopen(prompts.c_str(), "w");
    std::fputs("t5 t6\n{\"turns\": [\"t7 t8 t9\"]}\n\n", f);
    std::fclose(f);
  }
  const std::string heads = dir + "/heads.gguf";
  const std::string merged = dir + "/merged.gguf";
  std::string out;
  const std::string cmd = test::treespec_binary() + " train-heads -m " + model + " -o " + heads + " --merged " +
                          merged + " --heads 2 --steps 5 --samples 8 --holdout 0.5 --seq-len 16 --batch 16 --prompts " +
                          prompts + " -s 3 -t 1 -q";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd << "\n" << out;
  EXPECT_NE(out.find("top-1"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote"), std::string::npos) << out;
  auto h = drafters::MedusaHeads::load(heads);
  EXPECT_EQ(h->n_heads(), 2);
  EXPECT_TRUE(h->info().has_calibration());
  EXPECT_TRUE(h->info().shared_output);  // the default: blocks only, the model's output matrix
  const std::vector<float> full_calibration = h->info().calibration;
  ASSERT_EQ(test::run_command(cmd + " --own-lm-head --blocks 1 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("own vocab projection"), std::string::npos) << out;
  h = drafters::MedusaHeads::load(heads);
  EXPECT_FALSE(h->info().shared_output);
  EXPECT_EQ(h->n_blocks(), 1);
  // A draft vocabulary of the 16 most frequent tokens of the training text.
  ASSERT_EQ(test::run_command(cmd + " --draft-vocab 16", &out), 0) << out;
  EXPECT_NE(out.find("draft vocabulary: the 16 most frequent tokens"), std::string::npos) << out;
  h = drafters::MedusaHeads::load(heads);
  ASSERT_EQ(h->info().draft_vocab.size(), 16u);
  EXPECT_TRUE(std::is_sorted(h->info().draft_vocab.begin(), h->info().draft_vocab.end()));
  EXPECT_NE(h->info().calibration, full_calibration);  // ranked among the 16 (CalibrationRanksAmong...)
  EXPECT_NE(test::run_command(cmd + " --draft-vocab 16 --own-lm-head 2>&1", &out), 0);
  EXPECT_NE(out.find("--draft-vocab"), std::string::npos) << out;
  auto mm = model::Model::load(merged);
  EXPECT_TRUE(drafters::MedusaHeads::present_in(mm->gguf()));
  // Bad flags fail with a message naming the flag.
  EXPECT_NE(test::run_command(test::treespec_binary() + " train-heads -m " + model + " -o " + heads + " --heads 0 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("--heads"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::treespec_binary() + " train-heads -m " + model + " -o " + heads +
                                  " --prompts /nonexistent 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("/nonexistent"), std::string::npos) << out;
}
