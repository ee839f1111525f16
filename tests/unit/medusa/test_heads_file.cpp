// Medusa heads as GGUF: round trip (heads-only file and inside the model file), and
// clear rejection of heads made for another model or damaged files.
#include <gtest/gtest.h>

#include <cstring>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "drafters/factory.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/medusa/medusa_heads.h"
#include "gguf/gguf.h"
#include "medusa_test_util.h"
#include "treespec/status.h"

using namespace treespec;
using drafters::MedusaHeads;

namespace {

std::unique_ptr<model::Model> tiny(const std::string& dir, const std::string& name, test::TinyModelConfig cfg = {}) {
  const std::string path = dir + "/" + name + ".gguf";
  test::write_tiny_model(path, cfg);
  return model::Model::load(path);
}

std::vector<float> head_logits(const MedusaHeads& h, int32_t k, const std::vector<float>& x) {
  std::vector<float> work(2 * static_cast<size_t>(h.n_embd())), out(static_cast<size_t>(h.n_vocab()));
  h.forward(k, x.data(), 1, work.data(), out.data(), nullptr);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Copies a GGUF file, dropping one tensor and overriding metadata.
void rewrite(const std::string& src, const std::string& dst, const std::string& drop_tensor,
             const std::vector<std::pair<std::string, gguf::Value>>& set = {}, const std::string& drop_key = "") {
  auto f = gguf::GgufFile::open(src);
  gguf::GgufWriter w;
  for (const auto& [k, v] : f->metadata()) {
    if (k != "general.alignment" && k != drop_key) w.set(k, v);
  }
  for (const auto& [k, v] : set) w.set(k, v);
  for (const auto& t : f->tensors()) {
    if (t.name != drop_tensor) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  }
  w.write(dst);
}

}  // namespace

TEST(MedusaHeadsFile, RoundTrip) {
  const std::string dir = test::temp_dir();
  auto m = tiny(dir, "a");
  auto h = test::random_heads(*m, 3, 2, 5);
  auto& info = h->mutable_info();
  info.calib_top_k = 4;
  info.calibration = {0.5f, 0.6f, 0.7f, 0.75f, 0.3f, 0.4f, 0.45f, 0.5f, 0.1f, 0.2f, 0.25f, 0.3f};
  info.calib_loss = {1.0f, 2.0f, 3.0f};
  info.calib_tokens = 1234;
  info.train_meta.emplace_back("medusa.train.steps", gguf::Value::u32(77));
  const std::string path = dir + "/heads.gguf";
  h->write(path);

  auto g = MedusaHeads::load(path);
  EXPECT_EQ(g->n_heads(), 3);
  EXPECT_EQ(g->n_blocks(), 2);
  EXPECT_EQ(g->n_embd(), m->hparams().n_embd);
  EXPECT_EQ(g->n_vocab(), m->hparams().n_vocab);
  EXPECT_EQ(g->info().hidden_layer, m->hparams().n_layer);
  EXPECT_EQ(g->info().base_output_hash, drafters::output_matrix_hash(*m));
  EXPECT_EQ(g->info().base_output_hash.rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(g->info().calibration, info.calibration);
  EXPECT_EQ(g->info().calib_loss, info.calib_loss);
  EXPECT_EQ(g->info().calib_top_k, 4);
  EXPECT_EQ(g->info().calib_tokens, 1234);
  ASSERT_EQ(g->info().train_meta.size(), 1u);
  EXPECT_EQ(g->info().train_meta[0].second.as_int(), 77);
  EXPECT_NO_THROW(g->check_fits(*m));
  for (int32_t k = 0; k < 3; ++k) {
    const auto& a = h->head(k);
    const auto& b = g->head(k);
    ASSERT_EQ(b.blocks.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(std::memcmp(a.blocks[r].w.data(), b.blocks[r].w.data(), static_cast<size_t>(a.blocks[r].w.bytes())), 0);
      EXPECT_EQ(a.blocks[r].b, b.blocks[r].b);
    }
    EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), static_cast<size_t>(a.out.bytes())), 0);
    std::vector<float> x(static_cast<size_t>(m->hparams().n_embd));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) + k);
    EXPECT_EQ(head_logits(*h, k, x), head_logits(*g, k, x));
  }
  // Written again from the loaded copy: the same bytes.
  const std::string path2 = dir + "/heads2.gguf";
  g->write(path2);
  EXPECT_EQ(test::read_file(path), test::read_file(path2));
}

// Heads that share the model's output matrix (what train-heads writes): the file holds
// only their blocks and medusa.output = "base"; bound to the model, their logits are the
// model's output matrix applied to the blocks' result, and forward_all gives every head's
// logits in one call, bit for bit those of forward(k).
TEST(MedusaHeadsFile, SharedOutputHeadsStoreOnlyBlocks) {
  const std::string dir = test::temp_dir();
  auto m = tiny(dir, "a");
  auto own = test::random_heads(*m, 3, 2, 11, 0.5f);
  const int32_t E = m->hparams().n_embd, V = m->hparams().n_vocab;
  drafters::MedusaHeadsInfo info = own->info();
  info.shared_output = true;
  auto h = test::with_blocks_of(*own, info, {});
  EXPECT_FALSE(h->bound());
  h->bind(*m);
  ASSERT_TRUE(h->bound());
  const std::string path = dir + "/shared.gguf";
  h->write(path);
  const std::string own_path = dir + "/own.gguf";
  own->write(own_path);
  EXPECT_LT(test::read_file(path).size() + static_cast<size_t>(3) * V * E * sizeof(float) / 2,
            test::read_file(own_path).size());
  auto f = gguf::GgufFile::open(path);
  EXPECT_EQ(f->get_string("medusa.output"), "base");
  EXPECT_EQ(f->find_tensor("medusa.0.output.weight"), nullptr);
  auto g = MedusaHeads::load(path);
  EXPECT_TRUE(g->info().shared_output);
  EXPECT_FALSE(g->bound());
  g->bind(*m);

  std::vector<float> x(static_cast<size_t>(E));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3f * static_cast<float>(i));
  std::vector<float> work(4 * static_cast<size_t>(E)), all(3 * static_cast<size_t>(V));
  for (const MedusaHeads* hh : {h.get(), g.get(), own.get()}) {
    hh->forward_all(x.data(), work.data(), all.data(), nullptr);
    for (int32_t k = 0; k < 3; ++k) {
      const auto one = head_logits(*hh, k, x);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + static_cast<size_t>(k) * V, one.size() * sizeof(float)))
          << "head " << k;
    }
  }
  // Shared head k = the model's own output on the blocks' result: with the same blocks,
  // the own heads' logits differ (their projections are random), the shared ones' are
  // those of the base output matrix.
  std::vector<float> xk = x, z(static_cast<size_t>(E)), ref(static_cast<size_t>(V));
  for (const auto& b : g->head(1).blocks) {
    b.w.apply(xk.data(), 1, z.data(), nullptr);
    for (int32_t i = 0; i < E; ++i)
      xk[static_cast<size_t>(i)] += drafters::block_silu(z[static_cast<size_t>(i)] + b.b[static_cast<size_t>(i)]);
  }
  m->output().apply(xk.data(), 1, ref.data(), nullptr);
  EXPECT_EQ(head_logits(*g, 1, x), ref);
  EXPECT_NE(head_logits(*own, 1, x), ref);

  // Files from before the key (no medusa.output) are heads with their own projections.
  const std::string old = dir + "/old.gguf";
  rewrite(own_path, old, "", {}, "medusa.output");
  ASSERT_FALSE(gguf::GgufFile::open(old)->has("medusa.output"));
  auto o = MedusaHeads::load(old);
  EXPECT_FALSE(o->info().shared_output);
  EXPECT_EQ(head_logits(*o, 2, x), head_logits(*own, 2, x));
  // An unknown value is refused, naming the key.
  const std::string bad = dir + "/bad.gguf";
  rewrite(path, bad, "", {{"medusa.output", gguf::Value::string("lm_head")}});
  std::string msg = error_of([&] { MedusaHeads::load(bad); });
  EXPECT_NE(msg.find("medusa.output"), std::string::npos) << msg;

  // A draft vocabulary round-trips; one that is not ascending, out of range, or on heads
  // with their own projections is refused, naming the key.
  const std::string dv = dir + "/dv.gguf";
  rewrite(path, dv, "", {{"medusa.draft_vocab", gguf::Value::i32_array({0, 3, 5, V - 1})}});
  auto d = MedusaHeads::load(dv);
  EXPECT_EQ(d->info().draft_vocab, (std::vector<int32_t>{0, 3, 5, V - 1}));
  d->bind(*m);
  EXPECT_EQ(d->n_draft(), 4);
  EXPECT_EQ(d->draft_token(3), V - 1);
  const std::string dv2 = dir + "/dv2.gguf";
  d->write(dv2);
  EXPECT_EQ(MedusaHeads::load(dv2)->info().draft_vocab, d->info().draft_vocab);
  for (const auto& ids : {std::vector<int32_t>{3, 1}, std::vector<int32_t>{1, V}}) {
    rewrite(path, bad, "", {{"medusa.draft_vocab", gguf::Value::i32_array(ids)}});
    msg = error_of([&] { MedusaHeads::load(bad); });
    EXPECT_NE(msg.find("medusa.draft_vocab"), std::string::npos) << msg;
  }
  rewrite(own_path, bad, "", {{"medusa.draft_vocab", gguf::Value::i32_array({1, 2})}});
  msg = error_of([&] { MedusaHeads::load(bad); });
  EXPECT_NE(msg.find("medusa.draft_vocab"), std::string::npos) << msg;
}

TEST(MedusaHeadsFile, InitialHeadsAreTheBaseHead) {
  // W = 0, b = 0 and the base output matrix: every head starts as the base LM head.
  const std::string dir = test::temp_dir();
  auto m = tiny(dir, "a");
  auto h = MedusaHeads::init_from_model(*m, 2, 1);
  const int32_t E = m->hparams().n_embd;
  std::vector<float> x(static_cast<size_t>(E));
  for (int32_t i = 0; i < E; ++i) x[static_cast<size_t>(i)] = std::cos(0.3f * static_cast<float>(i));
  std::vector<float> base(static_cast<size_t>(m->hparams().n_vocab));
  m->output().apply(x.data(), 1, base.data(), nullptr);
  for (int32_t k = 0; k < 2; ++k) EXPECT_EQ(head_logits(*h, k, x), base);
  for (float w : std::vector<float>(static_cast<const float*>(h->head(0).blocks[0].w.data()),
                                    static_cast<const float*>(h->head(0).blocks[0].w.data()) + E * E)) {
    ASSERT_EQ(w, 0.0f);
  }
}

TEST(MedusaHeadsFile, HeadsInsideTheModelFile) {
  const std::string dir = test::temp_dir();
  auto m = tiny(dir, "a");
  auto h = test::random_heads(*m, 2, 1, 9);
  const std::string merged = dir + "/merged.gguf";
  drafters::write_model_with_heads(*m, *h, merged);
  auto mm = model::Model::load(merged);
  EXPECT_EQ(mm->hparams().n_layer, m->hparams().n_layer);
  EXPECT_EQ(drafters::output_matrix_hash(*mm), drafters::output_matrix_hash(*m));
  ASSERT_TRUE(MedusaHeads::present_in(mm->gguf()));
  drafters::MedusaParams p;  // no heads path: read them from the model file
  auto g = drafters::load_medusa_heads(p, *mm);
  EXPECT_EQ(g->n_heads(), 2);
  std::vector<float> x(static_cast<size_t>(m->hparams().n_embd), 0.25f);
  EXPECT_EQ(head_logits(*h, 1, x), head_logits(*g, 1, x));
  // A model without heads says how to get some.
  const std::string msg = error_of([&] { drafters::load_medusa_heads(p, *m); });
  EXPECT_NE(msg.find("holds no Medusa heads"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--heads"), std::string::npos) << msg;
}

TEST(MedusaHeadsFile, RejectsHeadsOfAnotherModel) {
  const std::string dir = test::temp_dir();
  auto a = tiny(dir, "a");
  test::TinyModelConfig wide;
  wide.n_embd = 48;
  auto b = tiny(dir, "b", wide);
  test::TinyModelConfig other_seed;
  other_seed.seed = 99;
  auto c = tiny(dir, "c", other_seed);
  test::TinyModelConfig vocab;
  vocab.n_vocab = 80;
  auto d = tiny(dir, "d", vocab);
  test::TinyModelConfig deeper;
  deeper.n_layer = 3;
  auto e = tiny(dir, "e", deeper);

  auto h = test::random_heads(*a, 2, 1, 3);
  const std::string path = dir + "/heads_a.gguf";
  h->write(path);
  auto g = MedusaHeads::load(path);
  EXPECT_NO_THROW(g->check_fits(*a));
  std::string msg = error_of([&] { g->check_fits(*b); });
  EXPECT_NE(msg.find("embedding width 32 (heads) vs 48 (model)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("heads_a.gguf"), std::string::npos) << msg;
  msg = error_of([&] { g->check_fits(*c); });
  EXPECT_NE(msg.find("output matrix hash"), std::string::npos) << msg;
  msg = error_of([&] { g->check_fits(*d); });
  EXPECT_NE(msg.find("vocab size 64 (heads) vs 80 (model)"), std::string::npos) << msg;
  msg = error_of([&] { g->check_fits(*e); });
  EXPECT_NE(msg.find("layer count 2 (heads' base) vs 3 (model)"), std::string::npos) << msg;

  // Through the factory, as `--spec medusa --heads` does.
  drafters::SpecConfig cfg;
  cfg.method = "medusa";
  cfg.params<drafters::MedusaParams>().heads_path = path;
  cfg.params<drafters::MedusaParams>().tree = "[[0]]";
  EXPECT_THROW(drafters::make_drafter(cfg, drafters::DrafterEnv{c.get(), {}, 1}), InvalidArgument);
  msg = error_of([&] { drafters::make_drafter(cfg, drafters::DrafterEnv{c.get(), {}, 1}); });
  EXPECT_NE(msg.find("do not fit"), std::string::npos) << msg;
}

TEST(MedusaHeadsFile, RejectsDamagedFiles) {
  const std::string dir = test::temp_dir();
  auto m = tiny(dir, "a");
  auto h = test::random_heads(*m, 2, 1, 4);
  h->mutable_info().calib_top_k = 2;
  h->mutable_info().calibration = {0.5f, 0.6f, 0.2f, 0.3f};
  const std::string good = dir + "/good.gguf";
  h->write(good);

  const std::string p1 = dir + "/no_out.gguf";
  rewrite(good, p1, "medusa.1.output.weight");
  std::string msg = error_of([&] { MedusaHeads::load(p1); });
  EXPECT_NE(msg.find("medusa.1.output.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;

  const std::string p2 = dir + "/bad_calib.gguf";
  rewrite(good, p2, "", {{"medusa.calibration.accuracy", gguf::Value::f32_array({0.5f, 0.6f, 0.2f})}});
  msg = error_of([&] { MedusaHeads::load(p2); });
  EXPECT_NE(msg.find("medusa.calibration.accuracy"), std::string::npos) << msg;

  const std::string p3 = dir + "/not_cumulative.gguf";
  rewrite(good, p3, "", {{"medusa.calibration.accuracy", gguf::Value::f32_array({0.5f, 0.4f, 0.2f, 0.3f})}});
  msg = error_of([&] { MedusaHeads::load(p3); });
  EXPECT_NE(msg.find("cumulative"), std::string::npos) << msg;

  const std::string p4 = dir + "/zero_heads.gguf";
  rewrite(good, p4, "", {{"medusa.head_count", gguf::Value::u32(0)}});
  msg = error_of([&] { MedusaHeads::load(p4); });
  EXPECT_NE(msg.find("medusa.head_count"), std::string::npos) << msg;

  const std::string p5 = dir + "/wide.gguf";
  rewrite(good, p5, "", {{"medusa.embedding_length", gguf::Value::u32(33)}});
  msg = error_of([&] { MedusaHeads::load(p5); });
  EXPECT_NE(msg.find("has shape"), std::string::npos) << msg;

  msg = error_of([&] { MedusaHeads::load(m->gguf().path()); });  // a model without heads
  EXPECT_NE(msg.find("holds no Medusa heads"), std::string::npos) << msg;
}
