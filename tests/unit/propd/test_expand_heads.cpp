// Heads widened for a function-preserving expansion give identical logits on the padded
// hidden state; prune heads and recall tables follow the layer map. Through the CLI
// (`treespec expand --heads-in/--heads-out [--heads-only]`): the widened heads reproduce
// the source heads on the expanded model's own states, and greedy medusa / propd on the
// expanded model equal plain greedy.
#include <gtest/gtest.h>

#include "../medusa/medusa_test_util.h"
#include "common/golden.h"
#include "common/test_util.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/medusa/medusa_heads.h"
#include "drafters/propd/heads_file.h"
#include "drafters/propd/propd_drafter.h"
#include "engine/budget_controller.h"
#include "gguf/gguf.h"
#include "model/expand.h"
#include "propd_test_util.h"
#include "train/expand_heads.h"

using namespace treespec;

TEST(ExpandHeads, WidenedHeadsGiveIdenticalLogitsOnThePaddedState) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const int32_t n = ps.heads->n_embd(), V = ps.heads->n_vocab(), N = 4 * n, L = 22;
  const std::vector<int32_t> map = {2, 6, 11, 15, 19};  // docs/expand.md's 5 -> 22
  // Heads with their own vocab projections (files from before the shared output; shared
  // heads on a real expansion: ExpandHeads.Cli... below), so the widening of those is
  // checked too.
  const auto own = test::with_own_output(*ps.heads, *ps.m.model);
  auto own_prune = std::make_shared<drafters::PruneHeadSet>(*ps.prune);
  for (auto& [l, ph] : own_prune->heads) {
    std::vector<std::vector<float>> w, b;
    for (int32_t r = 0; r < ph->n_blocks(); ++r) {
      w.emplace_back(static_cast<size_t>(n) * n);
      ph->block(r).w.dequantize(w.back().data());
      b.push_back(ph->block(r).b);
    }
    std::vector<float> o(static_cast<size_t>(V) * n);
    ps.m.model->output().dequantize(o.data());
    ph = drafters::PruneHead::from_f32(l, n, V, std::move(w), std::move(b), std::move(o));
  }
  const auto e = train::expand_heads(*own, own_prune.get(), N, L, map, "fnv1a64:0123456789abcdef");
  EXPECT_FALSE(e.medusa->info().shared_output);
  ASSERT_EQ(e.medusa->n_embd(), N);
  EXPECT_EQ(e.medusa->info().hidden_layer, L);
  EXPECT_EQ(e.medusa->info().base_output_hash, "fnv1a64:0123456789abcdef");
  EXPECT_EQ(e.medusa->info().calibration, ps.heads->info().calibration);  // same predictions, same table
  core::Rng rng(9);
  const int32_t M = 7;
  std::vector<float> h(static_cast<size_t>(M) * n), hp(static_cast<size_t>(M) * N, 0.0f);
  for (int32_t r = 0; r < M; ++r) {
    for (int32_t i = 0; i < n; ++i)
      h[static_cast<size_t>(r * n + i)] = hp[static_cast<size_t>(r * N + i)] = static_cast<float>(rng.normal());
  }
  std::vector<float> work(2 * static_cast<size_t>(M) * N), a(static_cast<size_t>(M) * V), b(a.size());
  for (int32_t k = 0; k < ps.heads->n_heads(); ++k) {
    own->forward(k, h.data(), M, work.data(), a.data(), nullptr);
    e.medusa->forward(k, hp.data(), M, work.data(), b.data(), nullptr);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::abs(a[i]))) << "head " << k << " logit " << i;
  }
  // Prune heads: after l source layers -> after map[l-1] + 1 expanded layers.
  ASSERT_NE(e.prune, nullptr);
  EXPECT_EQ(e.prune->calib.head_layers, (std::vector<int32_t>{7, 12, 16}));  // source 2, 3, 4
  for (const auto& [src_l, nl] : std::vector<std::pair<int32_t, int32_t>>{{2, 7}, {3, 12}, {4, 16}}) {
    const auto& hs = *own_prune->heads.at(src_l);
    EXPECT_TRUE(ps.prune->heads.at(src_l)->shared_output());  // what train-heads writes
    const auto& he = *e.prune->heads.at(nl);
    EXPECT_EQ(he.layer(), nl);
    hs.logits_normed(*ps.m.model, h.data(), M, work.data(), a.data(), nullptr);
    he.logits_normed(*ps.m.model, hp.data(), M, work.data(), b.data(), nullptr);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::abs(a[i]))) << "prune head " << src_l;
    for (int32_t k = 1; k <= ps.prune->calib.top_k; ++k)
      EXPECT_EQ(e.prune->calib.head(nl, k), ps.prune->calib.head(src_l, k));
  }
  // Lens table: expanded layer l' holds the source row of the real layers below it.
  const auto& c0 = ps.prune->calib;
  const auto& c = e.prune->calib;
  EXPECT_EQ(c.lens_layers(), L);
  EXPECT_EQ(c.lens(0, 5), c0.lens(0, 5));
  EXPECT_EQ(c.lens(2, 5), c0.lens(0, 5));  // layers 0, 1 are pass-throughs
  EXPECT_EQ(c.lens(3, 5), c0.lens(1, 5));  // after real layer 0 (at 2)
  EXPECT_EQ(c.lens(7, 5), c0.lens(2, 5));
  EXPECT_EQ(c.lens(19, 5), c0.lens(4, 5));
  EXPECT_EQ(c.lens(20, 5), 1.0f);  // after the last real layer: the final state
  EXPECT_EQ(c.default_layer, c0.default_layer > 0 ? map[static_cast<size_t>(c0.default_layer - 1)] + 1 : 0);
  // Bad maps are refused.
  EXPECT_THROW(train::expand_heads(*ps.heads, nullptr, N, L, {2, 6, 11}, "x"), InvalidArgument);
  EXPECT_THROW(train::expand_heads(*ps.heads, nullptr, N, L, {2, 6, 6, 15, 19}, "x"), InvalidArgument);
  EXPECT_THROW(train::expand_heads(*ps.heads, nullptr, n / 2, L, map, "x"), InvalidArgument);
}

namespace {

// Residual stream after the first l layers for a token chain, [n, n_embd].
std::vector<float> residual_after(const model::Model& m, const std::vector<int32_t>& toks, int32_t l) {
  model::ForwardContext ctx(m, 1);
  kv::KvCache kv(m.kv_shape(1, 64));
  model::Batch b;
  b.add_chain(0, 0, toks);
  std::vector<float> x(toks.size() * static_cast<size_t>(m.hparams().n_embd));
  m.embed(b, x.data());
  EXPECT_TRUE(m.run_layers(ctx, b, 0, l, x.data(), kv).ok());
  return x;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float amax = 0.0f;
  for (float v : a) amax = std::max(amax, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * (1.0f + amax)) << what << " logit " << i;
}

}  // namespace

TEST(ExpandHeads, CliWidenedHeadsOnAnExpandedModelMatchTheSourceAndKeepGreedyOutput) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const std::string dir = test::temp_dir();
  const std::string src = test::stories_gguf(), heads = dir + "/h.gguf", big = dir + "/big.gguf";
  drafters::write_heads_file(heads, *ps.heads, ps.prune.get());
  // Width ratio 4 (bit-exact model), 9 layers: source layers at 0, 2, 4, 6, 8.
  const std::string shape = " --dim 256 --ffn 512 --layers 9";
  const std::string bin = test::treespec_binary() + " expand -m " + src + shape + " --heads-in " + heads;
  std::string out;
  ASSERT_EQ(test::run_command(bin + " -o " + big + " --heads-out " + dir + "/he.gguf", &out), 0) << out;
  EXPECT_NE(out.find("source layers at 0,2,4,6,8"), std::string::npos) << out;
  EXPECT_EQ(model::expanded_layer_positions(5, 9), (std::vector<int32_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(model::expanded_layer_positions(5, 22), (std::vector<int32_t>{2, 6, 11, 15, 19}));
  // --heads-only on the existing expansion writes the same file; a wrong shape is refused.
  ASSERT_EQ(test::run_command(bin + " -o " + big + " --heads-only --heads-out " + dir + "/he2.gguf", &out), 0) << out;
  EXPECT_EQ(test::read_file(dir + "/he.gguf"), test::read_file(dir + "/he2.gguf"));
  EXPECT_NE(test::run_command(test::treespec_binary() + " expand -m " + src +
                              " --dim 256 --ffn 512 --layers 10 --heads-in " + heads + " -o " + big +
                              " --heads-only --heads-out " + dir + "/x.gguf 2>/dev/null"),
            0);
  // --heads-type q8_0: the same heads with their block matrices in q8_0 (biases stay f32);
  // an unknown type is refused before any work.
  ASSERT_EQ(test::run_command(bin + " -o " + big + " --heads-only --heads-out " + dir + "/hq.gguf --heads-type q8_0",
                              &out),
            0)
      << out;
  {
    const auto q = gguf::GgufFile::open(dir + "/hq.gguf");
    ASSERT_NE(q->find_tensor(drafters::medusa_block_weight_name(0, 0)), nullptr);
    EXPECT_EQ(q->find_tensor(drafters::medusa_block_weight_name(0, 0))->type, tensor::DType::q8_0);
    EXPECT_EQ(q->find_tensor(drafters::medusa_block_bias_name(0, 0))->type, tensor::DType::f32);
    EXPECT_EQ(drafters::MedusaHeads::load(dir + "/hq.gguf")->info().shared_output, true);
  }
  EXPECT_NE(test::run_command(bin + " -o " + big + " --heads-only --heads-out " + dir + "/hx.gguf --heads-type q9 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("--heads-type"), std::string::npos) << out;

  const auto m = model::Model::load(big);
  const auto eh = drafters::MedusaHeads::load(dir + "/he.gguf");
  eh->bind(*m, big);
  EXPECT_TRUE(eh->info().shared_output);  // the expanded model's own output matrix serves them
  const auto ep =
      drafters::PruneHeadSet::from_gguf(std::shared_ptr<const gguf::GgufFile>(gguf::GgufFile::open(dir + "/he.gguf")));
  const std::vector<int32_t> map = {0, 2, 4, 6, 8};
  // The widened heads on the expanded model's own states = the source heads on the source's.
  const std::vector<int32_t> toks = {1, 403, 407, 261, 378, 267, 271, 280, 300, 290, 301, 500, 12, 99, 45};
  const int32_t T = static_cast<int32_t>(toks.size()), n = ps.heads->n_embd(), N = 256, V = ps.heads->n_vocab();
  std::vector<float> xs_n(static_cast<size_t>(T) * n), xb_n(static_cast<size_t>(T) * N),
      work(2 * static_cast<size_t>(T) * N);
  std::vector<float> a(static_cast<size_t>(T) * V), b(a.size());
  ps.m.model->final_norm(residual_after(*ps.m.model, toks, 5).data(), T, {}, xs_n.data());
  m->final_norm(residual_after(*m, toks, 9).data(), T, {}, xb_n.data());
  for (int32_t k = 0; k < ps.heads->n_heads(); ++k) {
    ps.heads->forward(k, xs_n.data(), T, work.data(), a.data(), nullptr);
    eh->forward(k, xb_n.data(), T, work.data(), b.data(), nullptr);
    expect_close(a, b, "medusa head " + std::to_string(k));
  }
  for (int32_t l : {2, 3, 4}) {
    const int32_t nl = map[static_cast<size_t>(l - 1)] + 1;
    ASSERT_TRUE(ep->heads.count(nl)) << "prune head of source layer " << l << " expected at " << nl;
    ps.prune->heads.at(l)->logits(*ps.m.model, residual_after(*ps.m.model, toks, l).data(), T, work.data(), a.data(),
                                  nullptr);
    ep->heads.at(nl)->logits(*m, residual_after(*m, toks, nl).data(), T, work.data(), b.data(), nullptr);
    expect_close(a, b, "prune head " + std::to_string(l));
  }

  // Greedy medusa and propd (dynamic trees grown by a flat controller, pruned by the
  // widened head of source layer 3) on the expanded model = plain greedy (the goldens).
  test::StoriesModel sm;
  sm.model = model::Model::load(big);
  sm.tok = tokenizer::Tokenizer::from_gguf(sm.model->gguf());
  drafters::SpecConfig mc;
  mc.method = "medusa";
  mc.params<drafters::MedusaParams>().heads_path = dir + "/he.gguf";
  mc.params<drafters::MedusaParams>().tree = "auto:32";
  auto make = [](const drafters::SpecConfig& c) {
    return [c](const model::Model& mm) { return drafters::make_drafter(c, drafters::DrafterEnv{&mm, {}, 1}); };
  };
  const auto sm_st = test::expect_goldens(sm, make(mc), 2);
  EXPECT_GT(sm_st.mean_accepted_length(), 1.5);  // the widened heads draft
  drafters::SpecConfig pc = mc;
  pc.method = "propd";
  pc.params<drafters::PropdParams>().n_max = 32;
  pc.prune.layer = map[2] + 1;
  pc.prune.top_k = 6;
  auto ctl = test::flat_controller(9, 32);
  const auto sp_st =
      test::expect_goldens(sm, make(pc), 2, 1, [&](engine::Engine& e) { e.set_budget_policy(ctl.get()); });
  std::printf("expanded model: medusa mean accepted length %.3f; propd %.3f, late rows removed %.1f%%\n",
              sm_st.mean_accepted_length(), sp_st.mean_accepted_length(), 100.0 * sp_st.pruned_fraction());
  EXPECT_GT(sp_st.mean_accepted_length(), 1.5);
  EXPECT_GT(sp_st.n_pruned, 0);
}
