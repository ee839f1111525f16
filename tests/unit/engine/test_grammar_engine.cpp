// Constrained output in the engine (docs/grammar.md): drafted tokens the grammar refuses
// are cut before the forward pass, every row is masked with the state after its own
// path, and the state follows the accepted tokens. Every drafter's output under a
// grammar equals plain decoding under it (greedy, and sampled with the same seed),
// alone and batched with unconstrained sequences; sampled tokens follow the masked
// distribution (chi-square).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/test_util.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/propd/propd_drafter.h"
#include "engine/engine.h"
#include "engine/grammar_step.h"
#include "model/batch.h"
#include "sampling/sampling.h"
#include "tokenizer/tokenizer.h"
#include "unit/verify/chi_square.h"

using namespace treespec;
using V = std::vector<int32_t>;

namespace {

std::unique_ptr<drafters::Drafter> make_drafter(const model::Model& m, const std::string& method, uint64_t seed) {
  drafters::SpecConfig cfg;
  cfg.method = method;
  cfg.params<drafters::MedusaParams>().heads_path = test::kKjvHeads;
  cfg.params<drafters::PropdParams>().heads_path = test::kKjvHeads;
  return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, seed});
}

// Words without punctuation (the model's own text has commas and colons everywhere).
const char* kWords = R"(root ::= (" " [a-zA-Z]+)+)";
// A short record that must end: only the end of generation is allowed after the '}'.
const char* kRecord = R"(root ::= " {\"who\": \"" [A-Za-z ]{1,24} "\", \"n\": " [1-9] [0-9]? "}")";

struct Fixture {
  std::unique_ptr<model::Model> m;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const grammar::TokenMask> mask;
  std::vector<V> prompts;

  Fixture() {
    m = model::Model::load(test::kKjvModel);
    tok = tokenizer::Tokenizer::from_gguf(m->gguf());
    mask = engine::make_token_mask(*tok);
    prompts = {tok->encode("And it came to pass, when the king", true, true),
               tok->encode("In the beginning God created", true, true),
               tok->encode("And the LORD spake unto Moses, saying", true, true)};
  }
  grammar::Constraint constraint(const char* gbnf) const { return {grammar::Grammar::parse(gbnf), mask}; }

  // Runs one sequence per params entry through one engine, all batched; entry i gets
  // prompt first + i.
  std::vector<V> run(const std::string& method, const std::vector<engine::SequenceParams>& params,
                     std::vector<engine::FinishReason>* reasons = nullptr, size_t first = 0) const {
    engine::EngineParams ep;
    ep.n_ctx = 256;
    ep.n_slots = static_cast<int32_t>(params.size());
    engine::Engine eng(*m, ep);
    std::vector<std::unique_ptr<engine::Sequence>> seqs;
    std::vector<engine::Sequence*> ptrs;
    for (size_t i = 0; i < params.size(); ++i) {
      seqs.push_back(std::make_unique<engine::Sequence>(prompts[(first + i) % prompts.size()], params[i],
                                                        make_drafter(*m, method, params[i].sampling.seed)));
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
    if (reasons) reasons->clear();
    for (auto* s : ptrs) {
      out.push_back(s->generated());
      if (reasons) reasons->push_back(s->finish_reason());
    }
    return out;
  }

  std::string text(const V& ids) const {
    std::string s;
    for (int32_t id : ids) s += mask->is_eog(id) ? "" : mask->piece(id);
    return s;
  }
};

engine::SequenceParams params(float temp, uint64_t seed, grammar::Constraint c) {
  engine::SequenceParams sp;
  sp.sampling.temp = temp;
  sp.sampling.seed = seed;
  sp.n_predict = 60;
  sp.grammar = std::move(c);
  return sp;
}

}  // namespace

TEST(GrammarEngine, CutKeepsAllowedCandidatesAndTheirAuxRows) {
  // 0: eos, 1: " a", 2: " b", 3: "!", 4: "{"
  auto mask = std::make_shared<const grammar::TokenMask>(std::vector<std::string>{"", " a", " b", "!", "{"}, V{0});
  grammar::Constraint c{grammar::Grammar::parse(R"(root ::= (" " [ab])+ "!")"), mask};
  tree::TokenTree t(1);                     // root " a" (already accepted)
  const int32_t n1 = t.add(2, 0);           // " b": kept
  t.add(4, 0);                              // "{": cut
  const int32_t n3 = t.add(3, n1);          // "!": kept
  t.add(1, n3);                             // after "!" nothing: cut
  t.add(0, n3);                             // eos after "!": kept (the grammar may end there)
  t.add(4, n1, 1.0f, tree::NodeKind::aux);  // aux rows are the drafter's business: kept
  const grammar::State s0 = mask->advance(grammar::State::initial(c.grammar), 1);
  engine::GrammarStep g;
  ASSERT_TRUE(g.cut(t, c, s0, false));
  const tree::TokenTree f = g.forwarded();
  EXPECT_EQ(f.tokens(), (V{1, 2, 3, 0, 4}));
  EXPECT_EQ(g.drafted_of(3), 5);
  EXPECT_EQ(g.forwarded_of(2), -1);
  EXPECT_EQ(g.forwarded_of(6), 4);
  // The row of node 3 ("!" accepted): only the end is allowed; the aux row is untouched.
  std::vector<float> row(5, 1.0f);
  g.mask_row(3, row.data(), false);
  EXPECT_EQ(row[0], 1.0f);
  for (size_t k = 1; k < row.size(); ++k) EXPECT_TRUE(std::isinf(row[k])) << k;
  std::vector<float> aux(5, 1.0f);
  g.mask_row(6, aux.data(), false);
  EXPECT_EQ(aux, std::vector<float>(5, 1.0f));
  // Greedy: a row whose argmax is allowed stays as it is; otherwise it is masked.
  std::vector<float> r1 = {0.0f, 0.0f, 3.0f, 1.0f, 0.0f};  // argmax " b": allowed after " b"
  g.mask_row(1, r1.data(), true);
  EXPECT_EQ(r1[4], 0.0f);
  std::vector<float> r2 = {0.0f, 0.0f, 0.0f, 1.0f, 5.0f};  // argmax "{": refused
  g.mask_row(1, r2.data(), true);
  EXPECT_TRUE(std::isinf(r2[4]));
  EXPECT_EQ(sampling::argmax(r2.data(), 5), 3);
}

TEST(GrammarEngine, EveryDrafterMatchesPlainGreedyUnderTheGrammarAloneAndBatched) {
  Fixture fx;
  engine::SequenceParams free = params(0.0f, 1, {});
  const std::vector<engine::SequenceParams> batch = {params(0.0f, 1, fx.constraint(kWords)),
                                                     params(0.0f, 1, fx.constraint(kRecord)), free};
  std::vector<engine::FinishReason> why;
  const std::vector<V> plain = fx.run("none", batch, &why);
  // The grammar matters and holds: no punctuation in the words; the record is complete
  // and ended by the end-of-generation token.
  const std::string words = fx.text(plain[0]);
  EXPECT_NE(plain[0], fx.run("none", {free})[0]);
  EXPECT_EQ(words.find_first_of(",.:;"), std::string::npos) << words;
  EXPECT_FALSE(grammar::State::initial(grammar::Grammar::parse(kWords)).advance(words).dead()) << words;
  const std::string record = fx.text(plain[1]);
  EXPECT_EQ(why[1], engine::FinishReason::eog) << record;
  EXPECT_TRUE(grammar::matches(grammar::Grammar::parse(kRecord), record)) << record;
  for (const std::string method : {"lookup", "lookahead", "ptd", "medusa", "propd"}) {
    EXPECT_EQ(fx.run(method, {batch[0]})[0], plain[0]) << method << " alone";
    EXPECT_EQ(fx.run(method, {batch[1]}, nullptr, 1)[0], plain[1]) << method << " alone";
    EXPECT_EQ(fx.run(method, batch), plain) << method << " batched";
  }
}

TEST(GrammarEngine, EveryDrafterSamplesThePlainTokensUnderTheGrammar) {
  // Coupled sampling (the default at temp > 0) draws each token from noise fixed by
  // (seed, position, token): with the same masked rows every drafter gives the plain tokens.
  Fixture fx;
  std::vector<engine::SequenceParams> batch = {params(0.9f, 7, fx.constraint(kWords)),
                                               params(0.9f, 8, fx.constraint(kRecord)), params(0.9f, 9, {})};
  for (auto& p : batch) p.sampling.top_k = 0;
  const std::vector<V> plain = fx.run("none", batch);
  EXPECT_EQ(fx.text(plain[0]).find_first_of(",.:;"), std::string::npos);
  for (const std::string method : {"lookup", "lookahead", "medusa"}) {
    EXPECT_EQ(fx.run(method, batch), plain) << method;
  }
}

TEST(GrammarEngine, SampledTokensFollowTheMaskedDistribution) {
  // The first token of the record grammar's free field: drawn with many seeds by the
  // engine (plain and lookup, coupled and lossless verification) against warp(masked logits).
  Fixture fx;
  const char* gbnf = R"(root ::= " " [a-z]+)";
  const V& prompt = fx.prompts[0];
  const auto n_vocab = fx.m->hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  {
    model::ForwardContext ctx(*fx.m, 1);
    kv::KvCache kv(fx.m->kv_shape(1, static_cast<int32_t>(prompt.size())));
    model::Batch b;
    b.add_chain(0, 0, prompt);
    const int32_t last[1] = {static_cast<int32_t>(prompt.size()) - 1};
    ASSERT_TRUE(kv.reserve(0, static_cast<int32_t>(prompt.size())).ok());
    ASSERT_TRUE(fx.m->forward(ctx, b, kv, last, logits.data()).ok());
  }
  sampling::SamplingParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  const grammar::Constraint c = fx.constraint(gbnf);
  std::vector<float> masked = logits;
  fx.mask->apply(grammar::State::initial(c.grammar), masked.data());
  const sampling::Distribution want = sampling::warp(masked.data(), n_vocab, p);
  const sampling::Distribution free = sampling::warp(logits.data(), n_vocab, p);
  double refused = 0.0;
  for (size_t i = 0; i < free.ids.size(); ++i)
    if (want.prob_of(free.ids[i]) == 0.0f) refused += free.p[i];
  ASSERT_GT(refused, 0.05) << "the grammar should refuse some of the free distribution";
  for (const auto& [method, mode] : {std::pair<std::string, verify::Mode>{"none", verify::Mode::coupled},
                                     {"lookup", verify::Mode::coupled},
                                     {"lookup", verify::Mode::lossless}}) {
    std::map<int32_t, int64_t> seen;
    const int n = 1500;
    engine::EngineParams ep;
    ep.n_ctx = 64;
    ep.prefix_cache = true;
    engine::Engine eng(*fx.m, ep);
    for (int i = 0; i < n; ++i) {
      engine::SequenceParams sp;
      sp.sampling = p;
      sp.sampling.seed = 5000 + static_cast<uint64_t>(i);
      sp.mode = mode;
      sp.n_predict = 1;
      sp.grammar = c;
      engine::Sequence s(prompt, sp, make_drafter(*fx.m, method, sp.sampling.seed));
      ASSERT_TRUE(eng.generate(s).ok());
      seen[s.generated().at(0)] += 1;
    }
    std::vector<int64_t> obs;
    std::vector<double> prob;
    int64_t outside = n;
    for (size_t i = 0; i < want.ids.size(); ++i) {
      if (want.p[i] <= 0.0f) continue;
      const int64_t k = seen.count(want.ids[i]) ? seen[want.ids[i]] : 0;
      obs.push_back(k);
      prob.push_back(want.p[i]);
      outside -= k;
    }
    EXPECT_EQ(outside, 0) << method << ": tokens the grammar refuses were drawn";
    const test::ChiSquare cs = test::chi_square(obs, prob);
    EXPECT_EQ(cs.impossible, 0) << method;
    EXPECT_GT(cs.p_value, 1e-4) << method << " chi2 " << cs.stat << " df " << cs.df;
  }
}

TEST(GrammarEngine, RefusesAConstraintForAnotherVocabulary) {
  Fixture fx;
  auto small = std::make_shared<const grammar::TokenMask>(std::vector<std::string>{"", "a"}, V{0});
  engine::SequenceParams sp = params(0.0f, 1, {grammar::Grammar::parse(kWords), small});
  engine::EngineParams ep;
  ep.n_ctx = 64;
  engine::Engine eng(*fx.m, ep);
  engine::Sequence s(fx.prompts[0], sp, nullptr);
  EXPECT_THROW(eng.add(s), InvalidArgument);
}
