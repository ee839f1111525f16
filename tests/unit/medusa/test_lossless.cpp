// Lossless sampling through the Medusa path keeps the target distribution.
//
// A tiny random model at temperature 1 (no top-k/top-p/min-p) generates 3 tokens from a
// fixed prompt, N times with different seeds. Step 1 is the root alone; steps 2 and 3
// verify Medusa trees (point-mass drafts; the static best-first tree and the
// per-step dynamic tree) with the lossless verifier. The empirical
// distributions of the 2nd and 3rd emitted tokens are compared with the exact marginals
// (summed over the earlier tokens with the model's own softmax) by a chi-square test at
// significance 0.001 (bins with expected count < 5 merged). The same counts must reject
// a slightly different distribution (temperature 1.25), so the test has power.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/medusa/medusa_heads.h"
#include "engine/engine.h"
#include "train/medusa_train.h"

using namespace treespec;

namespace {

// Wilson-Hilferty approximation of the chi-square quantile for upper tail 0.001.
double chi2_crit_001(int df) {
  const double z = 3.090232;
  const double k = static_cast<double>(df);
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct Chi2 {
  double stat = 0.0;
  int df = 0;
};

Chi2 chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  Chi2 r;
  double other_obs = 0.0, other_exp = 0.0;
  int bins = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e < 5.0) {
      other_obs += static_cast<double>(counts[i]);
      other_exp += e;
      continue;
    }
    r.stat += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++bins;
  }
  if (other_exp > 0.0) {
    r.stat += (other_obs - other_exp) * (other_obs - other_exp) / std::max(other_exp, 1e-9);
    ++bins;
  }
  r.df = bins - 1;
  return r;
}

// Softmax of the model's logits after `ctx` (all tokens fed as one chain), at temperature t.
std::vector<double> next_dist(const model::Model& m, const std::vector<int32_t>& ctx, double t) {
  model::ForwardContext fc(m, 1);
  kv::KvCache kv(m.kv_shape(1, 32));
  model::Batch b;
  b.add_chain(0, 0, ctx);
  const int32_t V = m.hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(V));
  const int32_t last = static_cast<int32_t>(ctx.size()) - 1;
  EXPECT_TRUE(m.forward(fc, b, kv, std::span<const int32_t>(&last, 1), logits.data()).ok());
  double mx = logits[0];
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p(static_cast<size_t>(V));
  double s = 0.0;
  for (int32_t v = 0; v < V; ++v) s += p[static_cast<size_t>(v)] = std::exp((logits[static_cast<size_t>(v)] - mx) / t);
  for (auto& x : p) x /= s;
  return p;
}

}  // namespace

TEST(MedusaLossless, EmittedTokensKeepTheTargetDistribution) {
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/tiny.gguf";
  test::TinyModelConfig cfg;
  cfg.weight_scale = 0.8f;
  cfg.eos_id = 63;  // an end token is just another token here: generation runs to -n
  test::write_tiny_model(path, cfg);
  auto m = model::Model::load(path);
  const int32_t V = m->hparams().n_vocab;

  // Heads trained briefly on the tiny model, so trees are often (not always) accepted.
  train::MedusaTrainParams tp;
  tp.n_heads = 3;
  tp.samples = 24;
  tp.seq_len = 24;
  tp.steps = 60;
  tp.batch = 64;
  tp.seed = 2;
  std::shared_ptr<const drafters::MedusaHeads> heads = train::train_medusa_heads(*m, tp);
  const tree::AcceptanceTable table = drafters::calibration_table(*heads, 10);
  const std::vector<int32_t> prompt = {1, 7, 11};
  engine::EngineParams ep;
  ep.n_ctx = 16;
  engine::Engine eng(*m, ep);
  eng.set_eog_ids({});

  // Exact marginals of tokens 2 and 3 (and the same at temperature 1.25 for the power check).
  auto marginals = [&](double t) {
    std::vector<double> m2(static_cast<size_t>(V), 0.0), m3(static_cast<size_t>(V), 0.0);
    const auto p1 = next_dist(*m, prompt, t);
    for (int32_t a = 0; a < V; ++a) {
      auto ctx = prompt;
      ctx.push_back(a);
      const auto p2 = next_dist(*m, ctx, t);
      for (int32_t b = 0; b < V; ++b) {
        const double pab = p1[static_cast<size_t>(a)] * p2[static_cast<size_t>(b)];
        m2[static_cast<size_t>(b)] += pab;
        if (pab < 1e-7) continue;  // contributes < N * 1e-7 * V expected counts in total
        auto ctx3 = ctx;
        ctx3.push_back(b);
        const auto p3 = next_dist(*m, ctx3, t);
        for (int32_t c = 0; c < V; ++c) m3[static_cast<size_t>(c)] += pab * p3[static_cast<size_t>(c)];
      }
    }
    return std::make_pair(m2, m3);
  };
  const auto [m2, m3] = marginals(1.0);
  const auto [w2, w3] = marginals(1.25);

  // The static best-first tree and this step's dynamic tree (dynamic_tree.h).
  for (const char* tree_spec : {"auto:12", "dynamic:12"}) {
    SCOPED_TRACE(tree_spec);
    drafters::MedusaParams mp;
    mp.tree = tree_spec;
    const tree::TreeShape shape = drafters::resolve_medusa_tree(mp, *heads);
    const int64_t N = 20000;
    std::vector<int64_t> c2(static_cast<size_t>(V), 0), c3(static_cast<size_t>(V), 0);
    int64_t accepted = 0, drafted = 0;
    for (int64_t i = 0; i < N; ++i) {
      engine::SequenceParams sp;
      sp.sampling.temp = 1.0f;
      sp.sampling.top_k = 0;
      sp.sampling.top_p = 1.0f;
      sp.sampling.min_p = 0.0f;
      sp.sampling.seed = static_cast<uint64_t>(i) * 7919 + 1;
      sp.mode = verify::Mode::lossless;
      sp.n_predict = 3;
      engine::Sequence seq(prompt, sp, std::make_unique<drafters::MedusaDrafter>(heads, shape, mp, nullptr, table));
      ASSERT_TRUE(eng.generate(seq).ok());
      ASSERT_EQ(seq.generated().size(), 3u);
      ++c2[static_cast<size_t>(seq.generated()[1])];
      ++c3[static_cast<size_t>(seq.generated()[2])];
      accepted += seq.stats().n_accepted;
      drafted += seq.stats().n_draft_tokens;
    }
    // The tree path was exercised: drafted tokens were accepted in a good share of runs.
    EXPECT_GT(accepted, N / 5) << "accepted " << accepted << " of " << drafted << " drafted";
    for (const auto& [name, counts, exact] : {std::tuple{"token 2", &c2, &m2}, std::tuple{"token 3", &c3, &m3}}) {
      const Chi2 r = chi_square(*counts, *exact, N);
      const double crit = chi2_crit_001(r.df);
      std::printf("%s %s: chi2 %.1f, df %d, critical (0.001) %.1f\n", tree_spec, name, r.stat, r.df, crit);
      EXPECT_LT(r.stat, crit) << name;
    }
    const Chi2 wrong = chi_square(c2, w2, N);
    std::printf("%s token 2 against temperature 1.25: chi2 %.1f, df %d\n", tree_spec, wrong.stat, wrong.df);
    EXPECT_GT(wrong.stat, chi2_crit_001(wrong.df)) << "the test cannot tell a different distribution apart";
  }
}

TEST(MedusaLossless, TypicalAcceptanceRunsAndAccepts) {
  // Typical acceptance is lossy by design (not tested for the distribution); it must run
  // through the Medusa path and accept drafts.
  const std::string dir = test::temp_dir();
  const std::string path = dir + "/tiny.gguf";
  test::TinyModelConfig cfg;
  cfg.weight_scale = 0.8f;
  test::write_tiny_model(path, cfg);
  auto m = model::Model::load(path);
  train::MedusaTrainParams tp;
  tp.n_heads = 2;
  tp.samples = 16;
  tp.seq_len = 24;
  tp.steps = 40;
  tp.batch = 64;
  std::shared_ptr<const drafters::MedusaHeads> heads = train::train_medusa_heads(*m, tp);
  drafters::MedusaParams mp;
  mp.tree = "auto:8";
  const auto shape = drafters::resolve_medusa_tree(mp, *heads);
  engine::EngineParams ep;
  ep.n_ctx = 128;
  engine::Engine eng(*m, ep);
  eng.set_eog_ids({});
  int64_t accepted = 0;
  for (int i = 0; i < 20; ++i) {
    engine::SequenceParams sp;
    sp.sampling.temp = 0.7f;
    sp.sampling.seed = static_cast<uint64_t>(i);
    sp.mode = verify::Mode::typical;
    sp.n_predict = 40;
    engine::Sequence seq({1, 5}, sp,
                         std::make_unique<drafters::MedusaDrafter>(heads, shape, mp, nullptr,
                                                                   drafters::calibration_table(*heads, 10)));
    ASSERT_TRUE(eng.generate(seq).ok());
    EXPECT_EQ(seq.generated().size(), 40u);
    accepted += seq.stats().n_accepted;
  }
  EXPECT_GT(accepted, 0);
}
