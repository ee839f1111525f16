// Prune heads: an untrained head is exactly the logit lens; training raises the recall of
// the final argmax; the heads file round trip; the fit check; defaults of resolve_prune_spec
// (the recall rule, the start-up lens calibration).
#include <gtest/gtest.h>

#include <cmath>

#include "common/golden.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/medusa/medusa_heads.h"
#include "drafters/propd/heads_file.h"
#include "drafters/propd/prune_spec.h"
#include "gguf/gguf.h"
#include "propd_test_util.h"

using namespace treespec;

TEST(PruneHead, UntrainedHeadIsTheLogitLens) {
  test::TinyModelConfig cfg;
  cfg.n_layer = 3;
  const std::string path = test::temp_dir() + "/tiny_lens.gguf";
  test::write_tiny_model(path, cfg);
  const auto m = model::Model::load(path);
  const int32_t E = m->hparams().n_embd, V = m->hparams().n_vocab;
  std::vector<float> out(static_cast<size_t>(V) * E);
  m->output().dequantize(out.data());
  auto init = drafters::PruneHead::from_f32(2, E, V, {std::vector<float>(static_cast<size_t>(E) * E, 0.0f)},
                                            {std::vector<float>(static_cast<size_t>(E), 0.0f)}, out);
  const auto lens = drafters::PruneHead::logit_lens(2);
  core::Rng rng(4);
  const int32_t n = 5;
  std::vector<float> x(static_cast<size_t>(n) * E), work(2 * static_cast<size_t>(n) * E), a(static_cast<size_t>(n) * V),
      b(static_cast<size_t>(n) * V);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  init->logits(*m, x.data(), n, work.data(), a.data(), nullptr);
  lens->logits(*m, x.data(), n, work.data(), b.data(), nullptr);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_FLOAT_EQ(a[i], b[i]) << i;
  // Direct check of the lens: final norm then the output matrix.
  std::vector<float> xn(static_cast<size_t>(n) * E), c(static_cast<size_t>(n) * V);
  m->final_norm(x.data(), n, {}, xn.data());
  m->output().apply(xn.data(), n, c.data(), nullptr);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_FLOAT_EQ(b[i], c[i]) << i;
}

TEST(PruneHead, TrainingRaisesRecallAndTheFileRoundTrips) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories_with_report();
  const auto& c = ps.prune->calib;
  const auto& rep = ps.prune_report;
  ASSERT_EQ(rep.layers, (std::vector<int32_t>{2, 3, 4}));
  const int32_t K = c.top_k;
  for (size_t i = 0; i < rep.layers.size(); ++i) {
    // Before training the head is the lens: the same recall as the lens table.
    EXPECT_NEAR(rep.recall_before[i * K + 4], c.lens(rep.layers[i], 5), 1e-6);
    EXPECT_GT(rep.recall_after[i * K + 4], rep.recall_before[i * K + 4]) << "layer " << rep.layers[i];
    EXPECT_LT(rep.loss_after[i], rep.loss_before[i]);
    for (int32_t k = 1; k < K; ++k) EXPECT_GE(c.head(rep.layers[i], k + 1), c.head(rep.layers[i], k));
  }
  // Deeper layers know more (lens and heads).
  EXPECT_GT(c.lens(4, 5), c.lens(2, 5));
  EXPECT_GT(c.head(4, 5), c.head(2, 5));
  std::printf("recall@5: lens %.3f %.3f %.3f, heads %.3f %.3f %.3f (layers 2, 3, 4)\n", c.lens(2, 5), c.lens(3, 5),
              c.lens(4, 5), c.head(2, 5), c.head(3, 5), c.head(4, 5));

  const std::string path = test::temp_dir() + "/heads_with_prune.gguf";
  drafters::write_heads_file(path, *ps.heads, ps.prune.get());
  auto set = drafters::load_prune_heads(path, *ps.m.model);
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(set->calib.lens_recall, c.lens_recall);
  EXPECT_EQ(set->calib.head_recall, c.head_recall);
  EXPECT_EQ(set->calib.head_layers, c.head_layers);
  EXPECT_EQ(set->calib.default_layer, c.default_layer);
  ASSERT_EQ(set->heads.size(), 3u);
  const int32_t E = ps.m.model->hparams().n_embd, V = ps.m.model->hparams().n_vocab;
  std::vector<float> x(3 * static_cast<size_t>(E)), work(6 * static_cast<size_t>(E)), a(3 * static_cast<size_t>(V)),
      b(a.size());
  core::Rng rng(2);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (int32_t l : {2, 3, 4}) {
    ps.prune->heads.at(l)->logits(*ps.m.model, x.data(), 3, work.data(), a.data(), nullptr);
    set->heads.at(l)->logits(*ps.m.model, x.data(), 3, work.data(), b.data(), nullptr);
    EXPECT_EQ(a, b) << "layer " << l;
  }
  // The Medusa heads still load from the same file.
  EXPECT_EQ(drafters::MedusaHeads::load(path)->n_heads(), ps.heads->n_heads());

  // Defaults: a trained head where the table says the target is met.
  drafters::PruneParams pp;
  pp.top_k = 10;
  pp.recall_target = 0.5f;
  const auto spec = drafters::resolve_prune_spec(pp, path, *ps.m.model, nullptr);
  EXPECT_EQ(spec.layer, drafters::smallest_layer_meeting(5, 10, 0.5f, [&](int32_t l, int32_t k) {
              return set->heads.count(l) ? c.head(l, k) : c.lens(l, k);
            }));
  EXPECT_EQ(std::string(spec.head->kind()) == "trained", set->heads.count(spec.layer) == 1);
  pp.lens = true;
  EXPECT_STREQ(drafters::resolve_prune_spec(pp, path, *ps.m.model, nullptr).head->kind(), "logit lens");
  pp.lens = false;
  pp.layer = 3;
  pp.top_k = 7;
  const auto fixed = drafters::resolve_prune_spec(pp, path, *ps.m.model, nullptr);
  EXPECT_EQ(fixed.layer, 3);
  EXPECT_EQ(fixed.top_k, 7);
  EXPECT_EQ(fixed.head, set->heads.at(3));
}

TEST(PruneHead, FitCheckAndBadFiles) {
  TREESPEC_REQUIRE_SHARED();
  const auto& ps = test::propd_stories();
  const std::string path = test::temp_dir() + "/prune_fit.gguf";
  drafters::write_heads_file(path, *ps.heads, ps.prune.get());
  test::TinyModelConfig cfg;
  cfg.n_layer = 5;
  cfg.n_embd = 64;
  cfg.n_vocab = 512;
  cfg.n_head = 8;
  cfg.n_ff = 96;
  const std::string other = test::temp_dir() + "/other.gguf";
  test::write_tiny_model(other, cfg);
  const auto om = model::Model::load(other);
  try {
    drafters::load_prune_heads(path, *om);
    FAIL() << "heads of another model were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("output matrix hash"), std::string::npos) << e.what();
  }
  // A declared head whose tensor is missing.
  gguf::GgufWriter w;
  drafters::PruneHeadSet broken = *ps.prune;
  broken.heads.clear();
  broken.calib.head_layers.clear();
  broken.calib.head_recall.clear();
  broken.add_to(w);
  w.set("propd.prune.layers", gguf::Value::i32_array({3}));
  w.set("propd.prune.block_count", gguf::Value::u32(1));
  const std::string bad = test::temp_dir() + "/broken.gguf";
  w.write(bad);
  try {
    drafters::load_prune_heads(bad, *ps.m.model);
    FAIL() << "a heads file with a missing tensor loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("propd.prune.3.blk.0.weight"), std::string::npos) << e.what();
  }
  // A file without ProPD data: null (the caller falls back to the lens).
  const std::string plain = test::temp_dir() + "/medusa_only.gguf";
  drafters::write_heads_file(plain, *ps.heads, nullptr);
  EXPECT_EQ(drafters::load_prune_heads(plain, *ps.m.model), nullptr);
}

TEST(PruneHead, StartUpLensCalibrationPicksTheSmallestLayerMeetingTheTarget) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto c = drafters::calibrate_logit_lens(*m.model, 16, 0.9f, nullptr);
  EXPECT_EQ(c.n_positions, 4 * 64);
  ASSERT_GT(c.default_layer, 0) << "the last early layer's lens reaches 90% top-16 on stories260K";
  EXPECT_GE(c.lens(c.default_layer, 16), 0.9f);
  if (c.default_layer > 1 && c.lens(c.default_layer - 1, 16) >= 0.0f) {
    EXPECT_LT(c.lens(c.default_layer - 1, 16), 0.9f);
  }
  // Through resolve_prune_spec, for a model without a heads file.
  drafters::PruneParams pp;
  pp.top_k = 16;
  pp.recall_target = 0.9f;
  const auto spec = drafters::resolve_prune_spec(pp, "", *m.model, nullptr);
  EXPECT_EQ(spec.layer, c.default_layer);
  EXPECT_STREQ(spec.head->kind(), "logit lens");
  pp.layer = 7;
  EXPECT_THROW(drafters::resolve_prune_spec(pp, "", *m.model, nullptr), InvalidArgument);
}
