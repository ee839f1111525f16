// The sampling fields beyond the penalties through the engine: logit bias and typical-p
// stay lossless under every drafter (greedy and coupled sampling, alone and batched),
// sampled tokens follow warp() with typical-p (chi-square, plain and with lookup), and
// the recorded log-probabilities are the same with every drafter as without, bit for
// bit, and are those of the processed (biased, penalised) logits.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
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

std::unique_ptr<drafters::Drafter> drafter_of(const model::Model& m, const std::string& method, uint64_t seed) {
  drafters::SpecConfig cfg;
  cfg.method = method;
  cfg.params<drafters::MedusaParams>().heads_path = test::kKjvHeads;
  cfg.params<drafters::PropdParams>().heads_path = test::kKjvHeads;
  return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, seed});
}

struct Decoded {
  V tokens;
  std::vector<sampling::TokenLogprob> logprobs;
};

// Decodes prompts[0..n) together (one engine, n slots), sequence i with seed + i.
std::vector<Decoded> decode(const model::Model& m, const std::vector<V>& prompts, size_t n,
                            const engine::SequenceParams& sp, const std::string& method) {
  engine::EngineParams ep;
  ep.n_ctx = 256;
  ep.n_slots = static_cast<int32_t>(n);
  engine::Engine eng(m, ep);
  std::vector<std::unique_ptr<engine::Sequence>> seqs;
  for (size_t i = 0; i < n; ++i) {
    engine::SequenceParams p = sp;
    p.sampling.seed = sp.sampling.seed + i;
    seqs.push_back(std::make_unique<engine::Sequence>(prompts[i], p, drafter_of(m, method, p.sampling.seed)));
    EXPECT_TRUE(eng.add(*seqs.back()).ok());
  }
  for (bool busy = true; busy;) {
    std::vector<engine::Sequence*> live;
    for (auto& s : seqs)
      if (!s->finished()) live.push_back(s.get());
    busy = !live.empty();
    if (busy) eng.step(live);
  }
  std::vector<Decoded> out;
  for (auto& s : seqs) out.push_back({s->generated(), s->logprobs()});
  return out;
}

// Bit for bit: the same tokens, log-probabilities and alternatives.
bool same_logprobs(const std::vector<sampling::TokenLogprob>& a, const std::vector<sampling::TokenLogprob>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].token != b[i].token || std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)) != 0) return false;
    if (a[i].top.size() != b[i].top.size()) return false;
    for (size_t k = 0; k < a[i].top.size(); ++k) {
      if (a[i].top[k].token != b[i].top[k].token ||
          std::memcmp(&a[i].top[k].logprob, &b[i].top[k].logprob, sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

void expect_same(const std::vector<Decoded>& got, const std::vector<Decoded>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << " sequence " << i;
    EXPECT_EQ(got[i].logprobs.size(), got[i].tokens.size()) << what << " sequence " << i;
    EXPECT_TRUE(same_logprobs(got[i].logprobs, want[i].logprobs)) << what << " sequence " << i;
  }
}

std::vector<V> three_prompts(const tokenizer::Tokenizer& tok) {
  return {tok.encode("And it came to pass, when the king", true, true),
          tok.encode("In the beginning God created", true, true),
          tok.encode("And the LORD spake unto Moses, saying", true, true)};
}

// The model's logits after `prompt` (one forward of the whole prompt, the KV cache as the
// engine keeps it): by the lossless contract, bit for bit what the engine computes there.
std::vector<float> last_logits(const model::Model& m, const V& prompt) {
  std::vector<float> logits(static_cast<size_t>(m.hparams().n_vocab));
  model::ForwardContext ctx(m, 1);
  engine::EngineParams ep;  // the engine's KV cache types (f16)
  ep.n_ctx = static_cast<int32_t>(prompt.size());
  kv::KvCache kv(engine::engine_kv_shape(m, ep));
  model::Batch b;
  b.add_chain(0, 0, prompt);
  const int32_t last[1] = {static_cast<int32_t>(prompt.size()) - 1};
  EXPECT_TRUE(kv.reserve(0, static_cast<int32_t>(prompt.size())).ok());
  EXPECT_TRUE(m.forward(ctx, b, kv, last, logits.data()).ok());
  return logits;
}

}  // namespace

TEST(SamplingFields, EveryDrafterMatchesPlainGreedyWithBiasAndLogprobs) {
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const std::vector<V> prompts = three_prompts(*tok);
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = 64;
  sp.ignore_eog = true;
  // Ban the most frequent token of the unbiased answer, favour another one.
  const V unbiased = decode(*m, prompts, 1, sp, "none")[0].tokens;
  std::map<int32_t, int> count;
  for (int32_t t : unbiased) count[t] += 1;
  const int32_t banned =
      std::max_element(count.begin(), count.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  sp.sampling.logit_bias = {{banned, -std::numeric_limits<float>::infinity()},
                            {tok->encode("Lord", false, false).at(0), 1.5f}};
  sp.sampling.repeat_penalty = 1.2f;
  sp.sampling.repeat_last_n = 32;
  sp.logprobs = true;
  sp.top_logprobs = 5;
  const std::vector<Decoded> plain = decode(*m, prompts, 3, sp, "none");
  EXPECT_NE(plain[0].tokens, unbiased);
  for (const Decoded& d : plain) EXPECT_EQ(std::count(d.tokens.begin(), d.tokens.end(), banned), 0);
  // The entries are the log-softmax of the processed logits: the greedy token is their
  // top alternative, and the first one is what the model's own logits give.
  ASSERT_EQ(plain[0].logprobs.size(), plain[0].tokens.size());
  for (const sampling::TokenLogprob& e : plain[0].logprobs) {
    ASSERT_EQ(e.top.size(), 5u);
    EXPECT_EQ(e.top[0].token, e.token);
    EXPECT_EQ(e.top[0].logprob, e.logprob);
    EXPECT_LE(e.logprob, 0.0f);
  }
  std::vector<float> first = last_logits(*m, prompts[0]);
  sampling::process_logits(first.data(), m->hparams().n_vocab, prompts[0], {}, sp.sampling);
  const sampling::TokenLogprob want =
      sampling::token_logprob(first.data(), m->hparams().n_vocab, plain[0].tokens[0], 5);
  EXPECT_EQ(plain[0].logprobs[0].logprob, want.logprob);
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(plain[0].logprobs[0].top[k].token, want.top[k].token) << k;
  // Not asked: nothing recorded.
  engine::SequenceParams quiet = sp;
  quiet.logprobs = false;
  quiet.top_logprobs = 0;
  const Decoded q = decode(*m, prompts, 1, quiet, "lookup")[0];
  EXPECT_EQ(q.tokens, plain[0].tokens);
  EXPECT_TRUE(q.logprobs.empty());
  for (const std::string method : {"lookup", "lookahead", "ptd", "medusa", "propd"}) {
    expect_same(decode(*m, prompts, 1, sp, method), {plain[0]}, method + " alone");
    expect_same(decode(*m, prompts, 3, sp, method), plain, method + " batched");
  }
}

TEST(SamplingFields, CoupledSpeculationWithTypicalPAndBiasEqualsPlainSampling) {
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const std::vector<V> prompts = three_prompts(*tok);
  engine::SequenceParams sp;
  sp.sampling.temp = 0.9f;
  sp.sampling.typical_p = 0.8f;
  sp.sampling.seed = 11;
  sp.sampling.logit_bias = {{tok->encode("the", false, false).at(0), -2.0f}};
  sp.n_predict = 48;
  sp.ignore_eog = true;
  sp.logprobs = true;
  sp.top_logprobs = 2;
  const std::vector<Decoded> plain = decode(*m, prompts, 3, sp, "none");
  engine::SequenceParams off = sp;
  off.sampling.typical_p = 1.0f;
  EXPECT_NE(decode(*m, prompts, 1, off, "none")[0].tokens, plain[0].tokens) << "typical_p should matter here";
  for (const std::string method : {"lookup", "lookahead", "ptd", "medusa"}) {
    expect_same(decode(*m, prompts, 1, sp, method), {plain[0]}, method + " alone");
    expect_same(decode(*m, prompts, 3, sp, method), plain, method + " batched");
  }
}

TEST(SamplingFields, SampledTokensFollowWarpWithTypicalP) {
  // The first token, drawn with many seeds by the engine (plain and lookup), against
  // warp() with typical_p of the model's logits.
  auto m = model::Model::load(test::kKjvModel);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const V prompt = tok->encode("And he said unto them,", true, true);
  const auto n_vocab = m->hparams().n_vocab;
  const std::vector<float> logits = last_logits(*m, prompt);
  sampling::SamplingParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.typical_p = 0.6f;
  const sampling::Distribution want = sampling::warp(logits.data(), n_vocab, p);
  sampling::SamplingParams full = p;
  full.typical_p = 1.0f;
  const sampling::Distribution all = sampling::warp(logits.data(), n_vocab, full);
  double kept = 0.0;
  for (int32_t id : want.ids) kept += all.prob_of(id);
  ASSERT_GE(want.ids.size(), 3u) << "a typical set of several tokens";
  ASSERT_LT(kept, 0.8) << "typical_p should drop a good part of the mass here";
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
      sp.sampling.seed = 5000 + static_cast<uint64_t>(i);
      sp.n_predict = 1;
      sp.ignore_eog = true;
      engine::Sequence s(prompt, sp, drafter_of(*m, method, sp.sampling.seed));
      ASSERT_TRUE(eng.generate(s).ok());
      seen[s.generated().at(0)] += 1;
    }
    std::vector<int64_t> obs;
    std::vector<double> prob;
    int64_t outside = n;
    for (size_t i = 0; i < want.ids.size(); ++i) {
      const int64_t c = seen.count(want.ids[i]) ? seen[want.ids[i]] : 0;
      obs.push_back(c);
      prob.push_back(want.p[i]);
      outside -= c;
    }
    EXPECT_EQ(outside, 0) << method << ": tokens outside the typical set were drawn";
    const test::ChiSquare c = test::chi_square(obs, prob);
    EXPECT_EQ(c.impossible, 0) << method;
    EXPECT_GT(c.p_value, 1e-4) << method << " chi2 " << c.stat << " df " << c.df;
  }
}

TEST(SamplingFields, OutOfVocabularyBiasIsRefusedNamingTheToken) {
  auto m = model::Model::load(test::kKjvModel);
  engine::EngineParams ep;
  ep.n_ctx = 32;
  engine::Engine eng(*m, ep);
  engine::SequenceParams sp;
  sp.sampling.logit_bias = {{m->hparams().n_vocab, 1.0f}};
  engine::Sequence s({1, 2, 3}, sp, nullptr);
  try {
    (void)eng.add(s);
    FAIL() << "an out-of-vocabulary bias was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(m->hparams().n_vocab)), std::string::npos) << e.what();
  }
}
