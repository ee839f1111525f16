// Repetition penalties (sampling::apply_penalties, llama.cpp's formula) and the engine
// applying them to every tree row with that row's own history: every drafter's greedy
// output under penalties equals plain greedy under the same penalties, alone and
// batched, and sampled tokens follow the penalised distribution (chi-square).
#include <gtest/gtest.h>

#include <map>

#include "common/test_util.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/propd/propd_drafter.h"
#include "engine/engine.h"
#include "model/batch.h"
#include "sampling/sampling.h"
#include "tokenizer/tokenizer.h"
#include "unit/verify/chi_square.h"

using namespace treespec;
using V = std::vector<int32_t>;

namespace {

sampling::SamplingParams penalised(float temp) {
  sampling::SamplingParams p;
  p.temp = temp;
  p.repeat_penalty = 1.3f;
  p.repeat_last_n = 48;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.4f;
  return p;
}

std::unique_ptr<drafters::Drafter> make(const model::Model& m, const std::string& method, uint64_t seed) {
  drafters::SpecConfig cfg;
  cfg.method = method;
  cfg.params<drafters::MedusaParams>().heads_path = test::kKjvHeads;
  cfg.params<drafters::PropdParams>().heads_path = test::kKjvHeads;
  return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, seed});
}

}  // namespace

TEST(Penalties, LlamaCppFormulaOverTheWindow) {
  const std::vector<float> base = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  sampling::SamplingParams p;
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.5f;
  p.repeat_last_n = 4;
  const V prefix = {3, 0, 0, 1};
  const V tail = {1, 4, 9};  // 9 is outside the vocabulary: ignored
  std::vector<float> l = base;
  sampling::apply_penalties(l.data(), 6, prefix, tail, p);
  // Window = the last 4 of prefix + tail: {1, 1, 4, 9}: 1 twice, 4 once.
  EXPECT_FLOAT_EQ(l[1], -1.0f * 2.0f - 2 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[4], -2.0f * 2.0f - 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[0], 2.0f);  // only earlier in the prefix, outside the window
  EXPECT_FLOAT_EQ(l[3], 3.0f);
  EXPECT_FLOAT_EQ(l[2], 0.5f);
  EXPECT_FLOAT_EQ(l[5], 1.0f);
  // The whole context (-1): 0 twice, 1 twice, 3 once.
  p.repeat_last_n = -1;
  l = base;
  sampling::apply_penalties(l.data(), 6, prefix, tail, p);
  EXPECT_FLOAT_EQ(l[0], 1.0f - 2 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[3], 1.5f - 0.25f - 0.5f);
  // Off: window 0, or neutral values.
  p.repeat_last_n = 0;
  l = base;
  sampling::apply_penalties(l.data(), 6, prefix, tail, p);
  EXPECT_EQ(l, base);
  sampling::SamplingParams neutral;
  EXPECT_FALSE(neutral.penalized());
  sampling::apply_penalties(l.data(), 6, prefix, tail, neutral);
  EXPECT_EQ(l, base);
  // Range checks.
  using Edit = void (*)(sampling::SamplingParams&);
  for (Edit bad : {Edit([](sampling::SamplingParams& q) { q.repeat_penalty = 0.0f; }),
                   Edit([](sampling::SamplingParams& q) { q.repeat_last_n = -2; }),
                   Edit([](sampling::SamplingParams& q) { q.presence_penalty = 2.5f; }),
                   Edit([](sampling::SamplingParams& q) { q.frequency_penalty = -3.0f; })}) {
    sampling::SamplingParams q;
    bad(q);
    EXPECT_THROW(q.validate(), InvalidArgument);
  }
}

TEST(Penalties, EveryDrafterMatchesPlainGreedyAloneAndBatched) {
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const std::vector<V> prompts = {tok->encode("And it came to pass, when the king", true, true),
                                  tok->encode("In the beginning God created", true, true),
                                  tok->encode("And the LORD spake unto Moses, saying", true, true)};
  engine::SequenceParams sp;
  sp.sampling = penalised(0.0f);
  sp.n_predict = 80;
  sp.ignore_eog = true;
  auto run = [&](const std::string& method, size_t n_seqs) {
    engine::EngineParams ep;
    ep.n_ctx = 256;
    ep.n_slots = static_cast<int32_t>(n_seqs);
    engine::Engine eng(*m, ep);
    std::vector<std::unique_ptr<engine::Sequence>> seqs;
    std::vector<engine::Sequence*> ptrs;
    for (size_t i = 0; i < n_seqs; ++i) {
      seqs.push_back(std::make_unique<engine::Sequence>(prompts[i], sp, make(*m, method, 1)));
      EXPECT_TRUE(eng.add(*seqs.back()).ok());
      ptrs.push_back(seqs.back().get());
    }
    for (bool busy = true; busy;) {
      std::vector<engine::Sequence*> live;
      for (auto* s : ptrs)
        if (!s->finished()) live.push_back(s);
      busy = !live.empty();
      if (busy) eng.step(live);
    }
    std::vector<V> out;
    for (auto* s : ptrs) out.push_back(s->generated());
    return out;
  };
  const std::vector<V> plain = run("none", 3);
  // The penalties matter here: without them the text differs.
  {
    engine::SequenceParams no = sp;
    no.sampling = sampling::SamplingParams{};
    no.sampling.temp = 0.0f;
    engine::EngineParams ep;
    ep.n_ctx = 256;
    engine::Engine eng(*m, ep);
    engine::Sequence s(prompts[0], no, make(*m, "none", 1));
    ASSERT_TRUE(eng.generate(s).ok());
    EXPECT_NE(s.generated(), plain[0]);
  }
  for (const std::string method : {"lookup", "lookahead", "ptd", "medusa", "propd"}) {
    EXPECT_EQ(run(method, 1)[0], plain[0]) << method << " alone";
    EXPECT_EQ(run(method, 3), plain) << method << " batched";
  }
}

TEST(Penalties, SampledTokensFollowThePenalisedDistribution) {
  // The first token after a repetitive prompt, drawn with many seeds by the engine (plain
  // and lookup), against warp(apply_penalties(the model's logits)).
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const V prompt = tok->encode("the king of Israel and the king of Judah and the king of", true, true);
  const auto n_vocab = m->hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  {
    model::ForwardContext ctx(*m, 1);
    kv::KvCache kv(m->kv_shape(1, static_cast<int32_t>(prompt.size())));
    model::Batch b;
    b.add_chain(0, 0, prompt);
    const int32_t last[1] = {static_cast<int32_t>(prompt.size()) - 1};
    ASSERT_TRUE(kv.reserve(0, static_cast<int32_t>(prompt.size())).ok());
    ASSERT_TRUE(m->forward(ctx, b, kv, last, logits.data()).ok());
  }
  sampling::SamplingParams p = penalised(1.0f);
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  std::vector<float> pen = logits;
  sampling::apply_penalties(pen.data(), n_vocab, prompt, {}, p);
  const sampling::Distribution want = sampling::warp(pen.data(), n_vocab, p);
  const sampling::Distribution unpenalised = sampling::warp(logits.data(), n_vocab, p);
  ASSERT_GT(std::abs(want.prob_of(unpenalised.top()) - unpenalised.prob_of(unpenalised.top())), 0.05)
      << "penalties should matter here";
  for (const std::string method : {"none", "lookup"}) {
    std::map<int32_t, int64_t> seen;
    const int n = 2000;
    engine::EngineParams ep;
    ep.n_ctx = 64;
    ep.prefix_cache = true;  // one prefill; each draw is one step
    engine::Engine eng(*m, ep);
    for (int i = 0; i < n; ++i) {
      engine::SequenceParams sp;
      sp.sampling = p;
      sp.sampling.seed = 1000 + static_cast<uint64_t>(i);
      sp.n_predict = 1;
      sp.ignore_eog = true;
      engine::Sequence s(prompt, sp, make(*m, method, sp.sampling.seed));
      ASSERT_TRUE(eng.generate(s).ok());
      seen[s.generated().at(0)] += 1;
    }
    std::vector<int64_t> obs;
    std::vector<double> prob;
    for (size_t i = 0; i < want.ids.size(); ++i) {
      obs.push_back(seen.count(want.ids[i]) ? seen[want.ids[i]] : 0);
      prob.push_back(want.p[i]);
    }
    const test::ChiSquare c = test::chi_square(obs, prob);
    EXPECT_EQ(c.impossible, 0) << method;
    EXPECT_GT(c.p_value, 1e-4) << method << " chi2 " << c.stat << " df " << c.df;
  }
}
