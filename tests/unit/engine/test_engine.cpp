// Engine properties on tiny random models: -n 0, end-of-generation, context limits,
// batching sequences with different drafters and lengths (== each alone), prompt errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "drafters/factory.h"
#include "drafters/lookahead/lookahead_drafter.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "treespec/status.h"

using namespace treespec;
using V = std::vector<int32_t>;

namespace {

struct Tiny {
  std::string path;
  std::unique_ptr<model::Model> m;
};

Tiny tiny(int32_t eos_id = 2, int32_t n_vocab = 48) {
  Tiny t;
  test::TinyModelConfig cfg;
  cfg.n_vocab = n_vocab;
  cfg.eos_id = eos_id;
  t.path = test::temp_dir() + "/tiny_eos" + std::to_string(eos_id) + ".gguf";
  test::write_tiny_model(t.path, cfg);
  t.m = model::Model::load(t.path);
  return t;
}

std::unique_ptr<drafters::Drafter> drafter(const std::string& method, int32_t n = 5, int32_t w = 7, int32_t g = 7) {
  drafters::SpecConfig cfg;
  cfg.method = method;
  cfg.params<drafters::LookaheadParams>().ngram = n;
  cfg.params<drafters::LookaheadParams>().window = w;
  cfg.params<drafters::LookaheadParams>().guess = g;
  return drafters::make_drafter(cfg, drafters::DrafterEnv{nullptr, {}, 1});
}

V random_prompt(int32_t n, int32_t n_vocab, uint64_t seed) {
  core::Rng rng(seed);
  V p;
  for (int32_t i = 0; i < n; ++i)
    p.push_back(3 + static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(n_vocab - 3))));
  return p;
}

engine::SequenceParams greedy(int32_t n_predict, bool ignore_eog = true) {
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = n_predict;
  sp.ignore_eog = ignore_eog;
  return sp;
}

// Generates alone in a fresh engine.
V generate_alone(const model::Model& m, const V& prompt, const engine::SequenceParams& sp,
                 std::unique_ptr<drafters::Drafter> d, int32_t n_ctx = 256, engine::FinishReason* why = nullptr) {
  engine::EngineParams ep;
  ep.n_ctx = n_ctx;
  engine::Engine eng(m, ep);
  engine::Sequence s(prompt, sp, std::move(d));
  EXPECT_TRUE(eng.generate(s).ok());
  if (why) *why = s.finish_reason();
  return s.generated();
}

}  // namespace

TEST(Engine, NPredictZeroProducesNothing) {
  const auto t = tiny();
  for (const char* method : {"none", "lookahead"}) {
    engine::EngineParams ep;
    engine::Engine eng(*t.m, ep);
    engine::Sequence s(random_prompt(6, 48, 1), greedy(0), drafter(method));
    int calls = 0;
    s.on_tokens = [&](std::span<const int32_t>) { ++calls; };
    ASSERT_TRUE(eng.generate(s).ok());
    EXPECT_TRUE(s.generated().empty());
    EXPECT_EQ(s.finish_reason(), engine::FinishReason::length);
    EXPECT_EQ(s.stats().n_steps, 0);
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(eng.free_slots(), 1);
  }
}

// The model's own likely token is made its end-of-generation token (same weights, eos id
// set in the GGUF): generation stops right before it, with every drafter.
TEST(Engine, EndOfGenerationStops) {
  const auto plain = tiny();
  const V prompt = random_prompt(7, 48, 2);
  const V free_run = generate_alone(*plain.m, prompt, greedy(40), drafter("none"));
  ASSERT_EQ(free_run.size(), 40u);
  // First token (after the first three) that did not occur before.
  size_t k = 3;
  while (k < free_run.size() && std::find(free_run.begin(), free_run.begin() + static_cast<ptrdiff_t>(k),
                                          free_run[k]) != free_run.begin() + static_cast<ptrdiff_t>(k)) {
    ++k;
  }
  ASSERT_LT(k, free_run.size()) << "random model produced no new token to use as EOS";
  const int32_t eos = free_run[k];
  const auto t = tiny(eos);
  for (const char* method : {"none", "lookup", "lookahead"}) {
    SCOPED_TRACE(method);
    engine::EngineParams ep;
    engine::Engine eng(*t.m, ep);
    ASSERT_NE(std::find(eng.eog_ids().begin(), eng.eog_ids().end(), eos), eng.eog_ids().end())
        << "EOS id read from the GGUF";
    engine::Sequence s(prompt, greedy(40, false), drafter(method));
    ASSERT_TRUE(eng.generate(s).ok());
    EXPECT_EQ(s.generated(), V(free_run.begin(), free_run.begin() + static_cast<ptrdiff_t>(k)));
    EXPECT_EQ(s.finish_reason(), engine::FinishReason::eog);
    EXPECT_EQ(eng.free_slots(), 1);
    // --ignore-eos keeps going.
    engine::Sequence s2(prompt, greedy(40, true), drafter(method));
    ASSERT_TRUE(eng.generate(s2).ok());
    EXPECT_EQ(s2.generated(), free_run);
  }
  // Sampling stops at EOS too, and never emits it.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    engine::EngineParams ep;
    engine::Engine eng(*t.m, ep);
    engine::SequenceParams sp;
    sp.sampling.temp = 0.8f;
    sp.sampling.seed = seed;
    sp.n_predict = 60;
    engine::Sequence s(prompt, sp, drafter("lookahead"));
    ASSERT_TRUE(eng.generate(s).ok());
    EXPECT_EQ(std::count(s.generated().begin(), s.generated().end(), eos), 0);
    if (s.generated().size() < 60u) {
      EXPECT_EQ(s.finish_reason(), engine::FinishReason::eog);
    }
  }
}

// Sequences of different prompt lengths, drafters and -n stepped together through one
// engine produce exactly what each produces alone (and what plain greedy produces).
TEST(Engine, BatchedSequencesEqualEachAlone) {
  const auto t = tiny();
  struct Job {
    int32_t prompt_len;
    std::string method;
    int32_t n_predict;
  };
  const std::vector<Job> jobs = {
      {3, "none", 20}, {9, "lookup", 37}, {17, "lookahead", 41}, {30, "lookahead", 25}, {1, "lookup", 12}};
  engine::EngineParams ep;
  ep.n_ctx = 128;
  ep.n_slots = static_cast<int32_t>(jobs.size());
  ep.n_threads = 2;
  engine::Engine eng(*t.m, ep);
  std::vector<std::unique_ptr<engine::Sequence>> seqs;
  std::vector<engine::Sequence*> ptrs;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& j = jobs[i];
    seqs.push_back(std::make_unique<engine::Sequence>(random_prompt(j.prompt_len, 48, 10 + i), greedy(j.n_predict),
                                                      j.method == "lookahead" && i == 3 ? drafter("lookahead", 3, 4, 3)
                                                                                        : drafter(j.method)));
    ASSERT_TRUE(eng.add(*seqs.back()).ok());
    ptrs.push_back(seqs.back().get());
  }
  for (int guard = 0; guard < 1000; ++guard) {
    bool all = true;
    for (auto* s : ptrs) all &= s->finished();
    if (all) break;
    eng.step(ptrs);
  }
  int64_t accepted = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(jobs[i].method + " #" + std::to_string(i));
    ASSERT_TRUE(seqs[i]->finished());
    EXPECT_EQ(static_cast<int32_t>(seqs[i]->generated().size()), jobs[i].n_predict);
    const V alone = generate_alone(*t.m, seqs[i]->prompt(), greedy(jobs[i].n_predict),
                                   i == 3 ? drafter("lookahead", 3, 4, 3) : drafter(jobs[i].method));
    EXPECT_EQ(seqs[i]->generated(), alone);
    const V plain = generate_alone(*t.m, seqs[i]->prompt(), greedy(jobs[i].n_predict), drafter("none"));
    EXPECT_EQ(seqs[i]->generated(), plain);
    accepted += seqs[i]->stats().n_accepted;
  }
  EXPECT_GT(accepted, 0) << "the drafters never speculated successfully: the batch test says little";
  EXPECT_EQ(eng.free_slots(), static_cast<int32_t>(jobs.size()));
}

// A sequence that reaches the end of its context finishes with reason `context` (not an
// error) after exactly n_ctx - n_prompt + 1 tokens, the same tokens a large context
// gives, whatever the drafter (trees are clamped to the free cells).
TEST(Engine, ContextFullFinishesTheSequence) {
  const auto t = tiny();
  const int32_t n_ctx = 24;
  for (int32_t plen : {1, 10, 23, 24}) {
    const V prompt = random_prompt(plen, 48, 30 + static_cast<uint64_t>(plen));
    const V big = generate_alone(*t.m, prompt, greedy(64), drafter("none"), 256);
    for (const char* method : {"none", "lookup", "lookahead"}) {
      SCOPED_TRACE(std::string(method) + " prompt " + std::to_string(plen));
      engine::FinishReason why = engine::FinishReason::none;
      const V got = generate_alone(*t.m, prompt, greedy(-1), drafter(method), n_ctx, &why);
      EXPECT_EQ(why, engine::FinishReason::context);
      ASSERT_EQ(static_cast<int32_t>(got.size()), n_ctx - plen + 1);
      EXPECT_EQ(got, V(big.begin(), big.begin() + static_cast<ptrdiff_t>(got.size())));
    }
  }
}

TEST(Engine, BadPromptsAreClearErrors) {
  const auto t = tiny();
  engine::EngineParams ep;
  ep.n_ctx = 16;
  engine::Engine eng(*t.m, ep);
  auto expect_invalid = [&](V prompt, const std::string& fragment) {
    engine::Sequence s(std::move(prompt), greedy(4), drafter("lookahead"));
    try {
      (void)eng.add(s);
      ADD_FAILURE() << "accepted a bad prompt (" << fragment << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_EQ(eng.free_slots(), 1);
  };
  expect_invalid(random_prompt(17, 48, 5), "context holds 16");
  expect_invalid(V{}, "empty");
  expect_invalid(V{1, 48}, "outside the vocabulary");
  expect_invalid(V{1, -2}, "outside the vocabulary");
  // All slots busy is a Status, not an exception.
  engine::Sequence a(random_prompt(4, 48, 6), greedy(4), nullptr), b(random_prompt(4, 48, 7), greedy(4), nullptr);
  ASSERT_TRUE(eng.add(a).ok());
  const Status st = eng.add(b);
  EXPECT_EQ(st.code(), StatusCode::no_slot);
}

// Stats of a real run are consistent with what was emitted.
TEST(Engine, StatsAddUp) {
  const auto t = tiny();
  for (const char* method : {"none", "lookahead"}) {
    SCOPED_TRACE(method);
    engine::EngineParams ep;
    engine::Engine eng(*t.m, ep);
    engine::Sequence s(random_prompt(9, 48, 3), greedy(50), drafter(method, 4, 4, 4));
    ASSERT_TRUE(eng.generate(s).ok());
    const auto& st = s.stats();
    EXPECT_EQ(st.n_generated, 50);
    EXPECT_EQ(st.n_prompt, 9);
    EXPECT_EQ(st.n_forwards, st.n_steps);
    // Every step emits accepted + 1 tokens, except the last may be cut by -n.
    EXPECT_GE(st.n_accepted + st.n_steps, st.n_generated);
    EXPECT_LT(st.n_accepted + st.n_steps - st.n_generated, 1 + 4);
    EXPECT_NEAR(st.mean_accepted_length(), static_cast<double>(st.n_accepted + st.n_steps) / st.n_steps, 1e-12);
    int64_t per_pos = 0;
    for (int64_t a : st.accepted_per_pos) per_pos += a;
    EXPECT_EQ(per_pos, st.n_accepted);
    EXPECT_GE(st.t_forward, 0.0);
    if (std::string(method) == "none") {
      EXPECT_EQ(st.n_rows, st.n_steps);
      EXPECT_EQ(st.n_drafts, 0);
      EXPECT_DOUBLE_EQ(st.mean_accepted_length(), 1.0);
    } else {
      // Aux window rows are fed but never drafted tokens.
      EXPECT_GT(st.n_rows, st.n_steps + st.n_draft_tokens);
    }
  }
}

namespace {
// Proposes the known continuation as a chain and declares no size limit (max_nodes 0).
class OracleChain final : public drafters::Drafter {
 public:
  explicit OracleChain(V full) : full_(std::move(full)) {}
  std::string name() const override { return "oracle"; }
  tree::TokenTree propose(const drafters::DraftInput& in) override {
    const size_t at = in.context.size();  // next token's index in full_
    V cont;
    for (size_t k = at; k < full_.size() && cont.size() < 6 && static_cast<int32_t>(cont.size()) + 1 < in.budget; ++k) {
      cont.push_back(full_[k]);
    }
    return tree::TokenTree::chain(in.context.back(), cont);
  }
  int32_t max_nodes() const override { return 0; }  // "no limit"

 private:
  V full_;
};
}  // namespace

// A drafter whose max_nodes() is 0 ("no limit") gets the free context as its budget, not
// a single node (bug: the engine clamped it to 1 and cut every tree to the root).
TEST(Engine, UnlimitedDrafterIsNotCutToTheRoot) {
  const auto t = tiny();
  const V prompt = random_prompt(5, 48, 44);
  const V plain = generate_alone(*t.m, prompt, greedy(30), drafter("none"));
  V full = prompt;
  full.insert(full.end(), plain.begin(), plain.end());
  engine::EngineParams ep;
  engine::Engine eng(*t.m, ep);
  engine::Sequence s(prompt, greedy(30), std::make_unique<OracleChain>(full));
  ASSERT_TRUE(eng.generate(s).ok());
  EXPECT_EQ(s.generated(), plain);
  EXPECT_EQ(s.stats().n_steps, 5);  // 7 tokens per step (6 guesses + bonus), 30 tokens
  EXPECT_EQ(s.stats().n_accepted, 4 * 6 + 2);
}

// Below the engine, a full cache is a Status: a forward whose tree rows do not fit and a
// commit past the end return context_full and change nothing.
TEST(Engine, FullCacheIsAStatusBelowTheEngine) {
  const auto t = tiny();
  model::ForwardContext fctx(*t.m, 1);
  kv::KvCache kv(t.m->kv_shape(1, 8));
  const V prompt = random_prompt(6, 48, 9);
  model::Batch b;
  b.add_chain(0, 0, prompt);
  std::vector<float> logits(prompt.size() * 48);
  ASSERT_TRUE(t.m->forward(fctx, b, kv, {}, logits.data()).ok());
  ASSERT_TRUE(kv.commit(0, V{0, 1, 2, 3, 4, 5}).ok());
  const auto tree = tree::TokenTree::chain(5, V{6, 7, 8});  // 4 rows, 2 cells free
  model::Batch tb;
  tb.add_tree(0, kv.n_past(0), tree);
  std::vector<float> tl(4 * 48);
  const Status st = t.m->forward(fctx, tb, kv, {}, tl.data());
  EXPECT_EQ(st.code(), StatusCode::context_full);
  EXPECT_EQ(kv.n_past(0), 6);
  EXPECT_EQ(kv.commit(0, V{0, 1, 2}).code(), StatusCode::context_full);
  EXPECT_EQ(kv.n_past(0), 6);
  EXPECT_TRUE(kv.commit(0, V{0, 1}).ok());
  EXPECT_EQ(kv.n_free(0), 0);
}

// A KV pool smaller than the slots' contexts: sequences compete for its blocks; when it
// runs out, the newest sequence is preempted and later resumed with its context
// recomputed (the driver below does what the server's scheduler does). Every output
// equals the sequence decoded alone, and every block comes back.
TEST(Engine, PreemptedSequencesResumeWithTheSameOutput) {
  const auto t = tiny();
  const int32_t n_predict = 60;
  const std::vector<V> prompts = {random_prompt(7, 48, 1), random_prompt(12, 48, 2), random_prompt(5, 48, 3)};
  for (const char* method : {"none", "lookahead"}) {
    SCOPED_TRACE(method);
    engine::EngineParams ep;
    ep.n_ctx = 96;
    ep.n_slots = 3;
    ep.n_kv_cells = 96;  // 6 blocks for three sequences of up to 72 cells each
    engine::Engine eng(*t.m, ep);
    std::vector<std::unique_ptr<engine::Sequence>> seqs;
    for (const V& p : prompts)
      seqs.push_back(std::make_unique<engine::Sequence>(p, greedy(n_predict), drafter(method)));
    for (auto& s : seqs) ASSERT_TRUE(eng.add(*s).ok());
    for (int guard = 0;; ++guard) {
      ASSERT_LT(guard, 10000) << "no progress";
      std::vector<engine::Sequence*> parked, running;
      for (auto& s : seqs) {
        if (!s->finished()) (s->preempted() ? parked : running).push_back(s.get());
      }
      if (parked.empty() && running.empty()) break;
      std::sort(parked.begin(), parked.end(), [](auto* a, auto* b) { return a->admitted() < b->admitted(); });
      for (engine::Sequence* s : parked) {
        const Status st = eng.add(*s);
        if (st.code() == StatusCode::kv_full) break;
        ASSERT_TRUE(st.ok()) << st.to_string();
        running.push_back(s);
      }
      eng.step(running);
    }
    EXPECT_GT(eng.n_preemptions(), 0) << "the pool never ran out: the test does not test preemption";
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(seqs[i]->finish_reason(), engine::FinishReason::length);
      EXPECT_EQ(seqs[i]->generated(), generate_alone(*t.m, prompts[i], greedy(n_predict), drafter(method), 96))
          << "sequence " << i;
    }
    EXPECT_EQ(eng.kv().n_free_blocks(), eng.kv().n_blocks());
  }
}

// add() of a prompt the pool cannot hold now is kv_full and takes no slot.
TEST(Engine, AddIsKvFullWhenThePoolLacksBlocks) {
  const auto t = tiny();
  engine::EngineParams ep;
  ep.n_ctx = 32;
  ep.n_slots = 2;
  ep.n_kv_cells = 32;
  engine::Engine eng(*t.m, ep);
  engine::Sequence a(random_prompt(20, 48, 4), greedy(4), drafter("none"));
  engine::Sequence b(random_prompt(20, 48, 5), greedy(4), drafter("none"));
  ASSERT_TRUE(eng.add(a).ok());
  const Status st = eng.add(b);
  EXPECT_EQ(st.code(), StatusCode::kv_full) << st.to_string();
  EXPECT_EQ(eng.free_slots(), 1);
  EXPECT_EQ(b.slot(), -1);
  engine::Sequence* one[] = {&a};
  while (!a.finished()) eng.step(one);
  EXPECT_TRUE(eng.add(b).ok());  // a's blocks came back when it finished
}

// The prefix cache: a prompt that starts with tokens a finished or running sequence has
// committed reuses every one of those cells (whole blocks shared, a partial last block
// copied), the output is the one without the cache, and cached blocks give way when the
// pool needs them.
TEST(Engine, PrefixCacheReusesEveryCommonCellAndKeepsTheOutput) {
  const auto t = tiny();
  const V system = random_prompt(40, 48, 7);  // two whole blocks and 8 cells
  V p1 = system, p2 = system;
  p1.insert(p1.end(), {5, 6, 7});
  p2.insert(p2.end(), {9, 10});
  engine::EngineParams ep;
  ep.n_ctx = 128;
  ep.n_slots = 2;
  ep.n_kv_cells = 160;  // 10 blocks
  ep.prefix_cache = true;
  engine::Engine eng(*t.m, ep);
  engine::Sequence a(p1, greedy(20), drafter("none"));
  ASSERT_TRUE(eng.generate(a).ok());
  EXPECT_EQ(a.stats().n_prompt_cached, 0);
  EXPECT_LT(eng.kv().n_free_blocks(), eng.kv().n_blocks()) << "a's blocks stay cached";
  engine::Sequence b(p2, greedy(20), drafter("lookahead"));
  ASSERT_TRUE(eng.generate(b).ok());
  EXPECT_EQ(b.stats().n_prompt_cached, 40);  // the system prompt, its partial third block copied
  EXPECT_EQ(b.generated(), generate_alone(*t.m, p2, greedy(20), drafter("lookahead"), 128));
  // From a running sequence: d's prompt is c's context so far.
  engine::Sequence c(random_prompt(20, 48, 8), greedy(40), drafter("none"));
  ASSERT_TRUE(eng.add(c).ok());
  engine::Sequence* one[] = {&c};
  while (static_cast<int32_t>(c.context().size()) < 52) eng.step(one);
  const V p4(c.context().begin(), c.context().begin() + 50);
  engine::Sequence d(p4, greedy(10), drafter("none"));
  ASSERT_TRUE(eng.add(d).ok());
  EXPECT_EQ(d.stats().n_prompt_cached, 49);  // all but the last token (the first step's root)
  engine::Sequence* both[] = {&c, &d};
  while (!c.finished() || !d.finished()) eng.step(both);
  EXPECT_EQ(d.generated(), generate_alone(*t.m, p4, greedy(10), drafter("none"), 128));
  EXPECT_EQ(eng.totals().n_prompt_cached, 40 + 49);
  // A sequence that needs the whole pool: cached prefixes are evicted, not kv_full.
  const int32_t cached_blocks = eng.kv().n_blocks() - eng.kv().n_free_blocks();
  ASSERT_GT(cached_blocks, eng.kv().n_blocks() - 8) << "too few cached blocks for the eviction check";
  engine::Sequence e(random_prompt(120, 48, 9), greedy(4), drafter("none"));
  ASSERT_TRUE(eng.generate(e).ok()) << "pool of " << eng.kv().n_blocks() << " blocks";
  EXPECT_EQ(e.stats().n_prompt_cached, 0);
}
