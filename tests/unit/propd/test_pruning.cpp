// Early pruning inside the engine's verification forward: what a pruned step accepts is
// a prefix of what the unpruned step accepts on the same tree and state; survivors are
// closed under ancestors; aux rows are never pruned; the probe leaves the cache alone.
#include <gtest/gtest.h>

#include <functional>

#include "common/golden.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "drafters/propd/prune_head.h"
#include "engine/engine.h"
#include "model/model.h"

using namespace treespec;

namespace {

// Proposes whatever tree `make` builds from the context (ignores the budget).
class ScriptedDrafter final : public drafters::Drafter {
 public:
  explicit ScriptedDrafter(std::function<tree::TokenTree(std::span<const int32_t>)> make) : make_(std::move(make)) {}
  std::string name() const override { return "scripted"; }
  tree::TokenTree propose(const drafters::DraftInput& in) override {
    last = make_(in.context);
    return last;
  }
  int32_t max_nodes() const override { return 0; }
  tree::TokenTree last;

 private:
  std::function<tree::TokenTree(std::span<const int32_t>)> make_;
};

// Records the per-sequence outcome of every step.
class Recorder final : public engine::BudgetPolicy {
 public:
  void plan(std::span<engine::Sequence* const>, std::span<int32_t>) override {}
  void observe(const engine::StepReport& r) override {
    for (const auto& s : r.seqs) {
      // Survivors are closed under ancestors (checked on the tree the drafter proposed).
      const auto* d = dynamic_cast<const ScriptedDrafter*>(&s.seq->drafter());
      if (d != nullptr && !s.survived.empty()) {
        EXPECT_EQ(s.survived.size(), static_cast<size_t>(d->last.size()));
        for (int32_t u = 1; u < d->last.size() && static_cast<size_t>(u) < s.survived.size(); ++u) {
          if (s.survived[static_cast<size_t>(u)])
            closed_ok = closed_ok && s.survived[static_cast<size_t>(d->last.parent(u))];
        }
      }
      survived.emplace_back(s.survived.begin(), s.survived.end());
      n_late.push_back(s.n_late);
      layers.push_back(s.prune_layer);
    }
    rows_eff.push_back(r.rows_eff);
    rows.push_back(r.n_rows);
  }
  std::vector<std::vector<uint8_t>> survived;
  std::vector<int32_t> n_late, layers, rows;
  std::vector<double> rows_eff;
  bool closed_ok = true;
};

// A random tree around the greedy continuation `truth` of the root: the true path for a
// random number of steps, a wrong token somewhere, random siblings and random subtrees.
tree::TokenTree random_tree(core::Rng& rng, int32_t root, const std::vector<int32_t>& truth, int32_t V,
                            int32_t n_nodes) {
  tree::TokenTree t(root);
  int32_t node = 0;
  const auto depth = static_cast<int32_t>(rng.uniform_int(truth.size() + 1));
  for (int32_t d = 0; d < depth; ++d) node = t.add(truth[static_cast<size_t>(d)], node);
  while (t.size() < n_nodes) {
    const auto parent = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size())));
    const auto tok = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
    if (t.find_child(parent, tok) < 0) t.add(tok, parent);
  }
  return t;
}

}  // namespace

TEST(Pruning, AcceptedTokensArePrefixOfTheUnprunedStep) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto goldens = test::load_goldens();  // all 10: the trial count below needs them
  const int32_t V = m.model->hparams().n_vocab;
  engine::EngineParams ep;
  ep.n_ctx = 320;
  engine::Engine full(*m.model, ep), pruned(*m.model, ep);
  core::Rng rng(5);
  int64_t trials = 0, shorter = 0, equal_nonzero = 0, pruned_rows = 0;
  for (const auto& g : goldens) {
    std::vector<int32_t> all = g.prompt_tokens;
    all.insert(all.end(), g.generated_tokens.begin(), g.generated_tokens.end());
    for (int trial = 0; trial < 24; ++trial) {
      // Context: the prompt plus a random part of the greedy continuation; the truth is
      // what greedy decoding produces next.
      const size_t cut = g.prompt_tokens.size() + rng.uniform_int(std::max<size_t>(1, g.generated_tokens.size() - 6));
      if (cut + 6 > all.size()) continue;
      const std::vector<int32_t> ctx(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(cut));
      const std::vector<int32_t> truth(all.begin() + static_cast<std::ptrdiff_t>(cut),
                                       all.begin() + static_cast<std::ptrdiff_t>(cut + 6));
      const auto t = random_tree(rng, ctx.back(), truth, V, 8 + static_cast<int32_t>(rng.uniform_int(40)));
      auto make = [t](std::span<const int32_t>) { return t; };
      engine::SequenceParams sp;
      sp.sampling.temp = 0.0f;
      sp.n_predict = 64;
      engine::Sequence a(ctx, sp, std::make_unique<ScriptedDrafter>(make));
      engine::Sequence b(ctx, sp, std::make_unique<ScriptedDrafter>(make));
      drafters::PruneSpec spec;
      spec.layer = 1 + static_cast<int32_t>(rng.uniform_int(4));  // lens after 1..4 layers
      spec.top_k = 1 + static_cast<int32_t>(rng.uniform_int(12));
      spec.head = drafters::PruneHead::logit_lens(spec.layer);
      b.drafter().set_prune(spec);
      ASSERT_TRUE(full.add(a).ok());
      ASSERT_TRUE(pruned.add(b).ok());
      engine::Sequence* pa[] = {&a};
      engine::Sequence* pb[] = {&b};
      full.step(pa);
      pruned.step(pb);
      const auto& ga = a.generated();
      const auto& gb = b.generated();
      // Emitted = accepted + bonus: the pruned step's tokens are a prefix of the unpruned
      // step's, and both follow the greedy truth.
      ASSERT_LE(gb.size(), ga.size());
      ASSERT_TRUE(std::equal(gb.begin(), gb.end(), ga.begin())) << "trial " << trials;
      ASSERT_LE(cut + ga.size(), all.size());
      ASSERT_TRUE(std::equal(ga.begin(), ga.end(), all.begin() + static_cast<std::ptrdiff_t>(cut)));
      shorter += gb.size() < ga.size() ? 1 : 0;
      equal_nonzero += (gb.size() == ga.size() && ga.size() > 1) ? 1 : 0;
      pruned_rows += b.stats().n_pruned;
      if (!a.finished()) full.release(a, engine::FinishReason::cancelled);
      if (!b.finished()) pruned.release(b, engine::FinishReason::cancelled);
      ++trials;
    }
  }
  std::printf("%lld trials: pruning shortened %lld, kept %lld non-trivial acceptances; %lld rows pruned\n",
              static_cast<long long>(trials), static_cast<long long>(shorter), static_cast<long long>(equal_nonzero),
              static_cast<long long>(pruned_rows));
  EXPECT_GT(trials, 150);
  EXPECT_GT(shorter, 0);         // pruning did cut accepted paths (the test can fail)...
  EXPECT_GT(equal_nonzero, 10);  // ...and kept others whole
  EXPECT_GT(pruned_rows, 1000);
}

TEST(Pruning, SurvivorsAreAncestorClosedAndAuxRowsStay) {
  test::TinyModelConfig cfg;
  cfg.n_layer = 4;
  const std::string path = test::temp_dir() + "/tiny.gguf";
  test::write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  engine::EngineParams ep;
  ep.n_ctx = 128;
  ep.n_slots = 2;
  engine::Engine eng(*m, ep);
  Recorder rec;
  eng.set_budget_policy(&rec);
  core::Rng rng(3);
  // Aux rows hang off the root (a lookahead window / PTD draft tree); candidates below.
  auto make = [&rng](std::span<const int32_t> ctx) {
    tree::TokenTree t(ctx.back());
    int32_t a = 0;
    for (int i = 0; i < 4; ++i) a = t.add(10 + i, a, 1.0f, tree::NodeKind::aux);
    while (t.size() < 40) {
      const auto p = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.size())));
      if (!t.is_candidate(p)) continue;
      const auto tok = static_cast<int32_t>(rng.uniform_int(64));
      if (t.find_child(p, tok) < 0) t.add(tok, p);
    }
    return t;
  };
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = 12;
  std::vector<std::unique_ptr<engine::Sequence>> seqs;
  std::vector<engine::Sequence*> ptrs;
  for (int32_t i = 0; i < 2; ++i) {
    seqs.push_back(std::make_unique<engine::Sequence>(std::vector<int32_t>{1, 5 + i, 7}, sp,
                                                      std::make_unique<ScriptedDrafter>(make)));
    drafters::PruneSpec spec;
    spec.layer = 1 + i;  // two sequences pruned at different layers in one batch
    spec.top_k = 2;
    spec.head = drafters::PruneHead::logit_lens(spec.layer);
    seqs.back()->drafter().set_prune(spec);
    ASSERT_TRUE(eng.add(*seqs.back()).ok());
    ptrs.push_back(seqs.back().get());
  }
  while (!seqs[0]->finished() || !seqs[1]->finished()) eng.step(ptrs);
  ASSERT_FALSE(rec.survived.empty());
  int64_t removed = 0;
  bool saw_layer[3] = {false, false, false};
  for (size_t k = 0; k < rec.survived.size(); ++k) {
    const auto& s = rec.survived[k];
    if (s.empty()) continue;
    saw_layer[rec.layers[k]] = true;
    EXPECT_EQ(s[0], 1);                                                        // the root
    for (int32_t i = 1; i <= 4; ++i) EXPECT_EQ(s[static_cast<size_t>(i)], 1);  // aux rows
    int32_t late = 0;
    for (uint8_t v : s) late += v;
    EXPECT_EQ(late, rec.n_late[k]);
    removed += static_cast<int64_t>(s.size()) - late;
  }
  EXPECT_TRUE(saw_layer[1] && saw_layer[2]);
  EXPECT_GT(removed, 0);
  for (size_t k = 0; k < rec.rows.size(); ++k) EXPECT_LE(rec.rows_eff[k], rec.rows[k] + 1e-9);
  EXPECT_TRUE(rec.closed_ok);
  EXPECT_EQ(seqs[0]->stats().n_pruned + seqs[1]->stats().n_pruned, removed);
}

TEST(Pruning, ProbeStepTimesAndLeavesTheCacheAlone) {
  test::TinyModelConfig cfg;
  cfg.n_layer = 3;
  const std::string path = test::temp_dir() + "/tiny_probe.gguf";
  test::write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  engine::EngineParams ep;
  ep.n_ctx = 64;
  ep.n_slots = 3;
  engine::Engine eng(*m, ep);
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = 4;
  engine::Sequence busy({1, 2, 3, 4}, sp, nullptr);
  ASSERT_TRUE(eng.add(busy).ok());
  const int32_t n_past = eng.kv().n_past(busy.slot());
  EXPECT_GT(eng.probe_step(2, 8, 16), 0.0);
  EXPECT_GT(eng.probe_step(1, 16, 8, 2, 5), 0.0);  // pruned variant
  EXPECT_LT(eng.probe_step(3, 4, 8), 0.0);         // only 2 free slots
  EXPECT_LT(eng.probe_step(1, 60, 16), 0.0);       // does not fit the cells
  EXPECT_EQ(eng.free_slots(), 2);
  EXPECT_EQ(eng.kv().n_past(busy.slot()), n_past);
  // The busy sequence still decodes exactly as it would have.
  engine::Engine ref(*m, ep);
  engine::Sequence same({1, 2, 3, 4}, sp, nullptr);
  ASSERT_TRUE(ref.generate(same).ok());
  ASSERT_TRUE([&] {
    engine::Sequence* p[] = {&busy};
    while (!busy.finished()) eng.step(p);
    return true;
  }());
  EXPECT_EQ(busy.generated(), same.generated());
}
