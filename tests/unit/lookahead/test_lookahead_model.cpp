// Lookahead on a tiny random model: every window row's logits equal those of decoding,
// alone and in position order, the sequence the reference implementation's mask lets it
// see (committed context, root, level-0 columns 0..c, its own column at levels 1..l);
// every guess row's logits equal decoding its n-gram prefix. Tolerance as in the model
// forward tests: max |difference| < 2e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/rng.h"
#include "drafters/lookahead/lookahead_drafter.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "model/model.h"

using namespace treespec;
using V = std::vector<int32_t>;

namespace {

constexpr float kTol = 2e-4f;

float max_abs_diff(const float* a, const float* b, int32_t n) {
  float d = 0.0f;
  for (int32_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST(LookaheadModel, WindowRowsSeeExactlyTheirJacobiContext) {
  const std::string path = test::temp_dir() + "/tiny.gguf";
  test::TinyModelConfig cfg;
  cfg.n_vocab = 32;  // small vocabulary: n-grams repeat, so the pool fills
  write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  const int32_t nv = m->hparams().n_vocab;

  // Run the drafter for a while through the engine so the window is full and the pool
  // holds n-grams.
  engine::EngineParams ep;
  ep.n_ctx = 128;
  engine::Engine eng(*m, ep);
  eng.set_eog_ids({});
  drafters::LookaheadParams lp;
  lp.ngram = 4;
  lp.window = 4;
  lp.guess = 4;
  auto owned = std::make_unique<drafters::LookaheadDrafter>(lp, 3);
  drafters::LookaheadDrafter* d = owned.get();
  core::Rng rng(8);
  V prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(nv))));
  engine::SequenceParams sp;
  sp.sampling.temp = 0.0f;
  sp.n_predict = 40;
  engine::Sequence seq(prompt, sp, std::move(owned));
  ASSERT_TRUE(eng.generate(seq).ok());
  ASSERT_TRUE(d->window_full());

  // Propose for the final context and forward the tree on slot 0.
  const V ctx = seq.context();
  const int32_t n_past = static_cast<int32_t>(ctx.size()) - 1;
  drafters::DraftInput in;
  in.context = ctx;
  in.n_past = n_past;
  in.budget = d->max_nodes();
  const auto t = d->propose(in);
  ASSERT_EQ(d->fed_columns(), lp.window);
  model::ForwardContext fctx(*m, 2);
  kv::KvCache kv(m->kv_shape(2, 256));
  auto prefill = [&](int32_t slot) {
    kv.clear(slot);
    model::Batch b;
    b.add_chain(slot, 0, std::span<const int32_t>(ctx).first(static_cast<size_t>(n_past)));
    std::vector<float> lg(static_cast<size_t>(n_past) * nv);
    ASSERT_TRUE(m->forward(fctx, b, kv, {}, lg.data()).ok());
    V all(static_cast<size_t>(n_past));
    for (int32_t i = 0; i < n_past; ++i) all[static_cast<size_t>(i)] = i;
    ASSERT_TRUE(kv.commit(slot, all).ok());
  };
  prefill(0);
  model::Batch tb;
  tb.add_tree(0, n_past, t);
  std::vector<float> tl(static_cast<size_t>(t.size()) * nv);
  ASSERT_TRUE(m->forward(fctx, tb, kv, {}, tl.data()).ok());

  // Decode a token sequence after the committed context on slot 1; logits of its last row.
  auto decode_alone = [&](const V& toks) {
    prefill(1);
    model::Batch b;
    b.add_chain(1, n_past, toks);
    std::vector<float> lg(toks.size() * static_cast<size_t>(nv));
    EXPECT_TRUE(m->forward(fctx, b, kv, {}, lg.data()).ok());
    return std::vector<float>(lg.end() - nv, lg.end());
  };

  const auto& lv = d->levels();
  int32_t checked = 0;
  for (int32_t l = 0; l < lp.ngram - 1; ++l) {
    for (int32_t c = 0; c < lp.window; ++c) {
      const int32_t node = d->window_node(l, c);
      ASSERT_GE(node, 0);
      // The reference mask's visible sequence, built from the window, not from the tree.
      V seen{ctx.back()};
      for (int32_t k = 1; k <= c; ++k) seen.push_back(lv[0][static_cast<size_t>(k - 1)]);
      for (int32_t k = 1; k <= l; ++k) seen.push_back(lv[static_cast<size_t>(k)][static_cast<size_t>(c)]);
      ASSERT_EQ(static_cast<int32_t>(seen.size()), 1 + l + c);
      const auto alone = decode_alone(seen);
      EXPECT_LT(max_abs_diff(tl.data() + static_cast<size_t>(node) * nv, alone.data(), nv), kTol)
          << "(" << l << ", " << c << ")";
      ++checked;
    }
  }
  EXPECT_EQ(checked, (lp.ngram - 1) * lp.window);
  // Guess rows: decoding their n-gram prefix alone.
  const int32_t first_guess = 1 + (lp.window - 1) + (lp.ngram - 2) * lp.window;
  ASSERT_EQ(t.size() - first_guess, d->n_trie_nodes());
  EXPECT_GT(d->n_trie_nodes(), 0) << "the pool should have n-grams for this root";
  for (int32_t i = first_guess; i < t.size(); ++i) {
    V seen;
    for (int32_t k : t.path_to(i)) seen.push_back(t.token(k));
    const auto alone = decode_alone(seen);
    EXPECT_LT(max_abs_diff(tl.data() + static_cast<size_t>(i) * nv, alone.data(), nv), kTol) << "guess node " << i;
  }
}
