// The shipped default model (models/kjv-5m.gguf, trained by tools/train/): it loads, it
// reproduces the PyTorch reference greedy ids, its held-out perplexity is below the
// model card's value, and the exporter's file round-trips through our reader and writer
// byte for byte. Needs nothing from ../shared.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace treespec;

namespace {

std::string repo_file(const std::string& rel) { return std::string(TREESPEC_SOURCE_DIR) + "/" + rel; }

nlohmann::json reference() {
  std::ifstream f(repo_file("models/kjv_reference.json"));
  return nlohmann::json::parse(f);
}

}  // namespace

TEST(DefaultModel, LoadsWithItsTokenizer) {
  const auto m = model::Model::load(repo_file("models/kjv-5m.gguf"));
  const auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  EXPECT_EQ(m->hparams().arch, "llama");
  EXPECT_EQ(m->hparams().n_vocab, tok->n_vocab());
  EXPECT_GT(m->n_params(), 1'000'000u);
  EXPECT_LT(m->n_params(), 5'000'000u);
  EXPECT_TRUE(tok->is_eog(2));
}

// The three reference prompts: our greedy ids equal the PyTorch reference (up to the
// first end-of-generation token, where our engine stops).
TEST(DefaultModel, GreedyMatchesReferenceIds) {
  const auto ref = reference();
  const auto m = model::Model::load(repo_file("models/kjv-5m.gguf"));
  const auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  engine::EngineParams ep;
  ep.n_ctx = 256;
  engine::Engine eng(*m, ep);
  eng.set_eog_ids(tok->eog_ids());
  ASSERT_EQ(ref.at("greedy").size(), 3u);
  for (const auto& g : ref.at("greedy")) {
    const auto ids = tok->encode(g.at("prompt").get<std::string>(), true, false);
    EXPECT_EQ(ids, g.at("prompt_tokens").get<std::vector<int32_t>>());
    auto want = g.at("generated_tokens").get<std::vector<int32_t>>();
    const auto& eos_field = g.at("first_eos_index");
    const int eos_at = eos_field.is_null() ? -1 : eos_field.get<int>();
    if (eos_at >= 0) want.resize(static_cast<size_t>(eos_at));
    for (const std::string method : {"none", "lookup"}) {
      engine::SequenceParams sp;
      sp.sampling.temp = 0.0f;
      sp.n_predict = static_cast<int32_t>(g.at("generated_tokens").size());
      drafters::SpecConfig cfg;
      cfg.method = method;
      engine::Sequence seq(ids, sp, drafters::make_drafter(cfg, {m.get(), tok->eog_ids(), 1}));
      ASSERT_TRUE(eng.generate(seq).ok());
      EXPECT_EQ(seq.generated(), want) << g.at("prompt") << " with " << method;
    }
  }
}

// Perplexity on the held-out chunk with the model card's method: [BOS] + tokens, windows
// of 256 from position 0, every token but each window's first scored.
TEST(DefaultModel, HeldOutPerplexityBelowModelCard) {
  const auto ref = reference();
  const double card_ppl = ref.at("heldout").at("ppl").get<double>();
  std::ifstream f(repo_file("models/kjv_heldout.txt"), std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!text.empty() && text.back() == '\n') text.pop_back();  // "file content minus the trailing newline"
  const auto m = model::Model::load(repo_file("models/kjv-5m.gguf"));
  const auto tok = tokenizer::Tokenizer::from_gguf(m->gguf());
  const auto ids = tok->encode(text, true, false);
  ASSERT_EQ(static_cast<int64_t>(ids.size()), ref.at("heldout").at("n_tokens_with_bos").get<int64_t>());
  const int32_t W = 256;
  const int32_t V = m->hparams().n_vocab;
  model::ForwardContext ctx(*m, 2);
  kv::KvCache kv(m->kv_shape(1, W));
  double nll = 0.0;
  int64_t scored = 0;
  std::vector<float> logits(static_cast<size_t>(W) * V);
  for (size_t b = 0; b < ids.size(); b += W) {
    const size_t n = std::min<size_t>(W, ids.size() - b);
    if (n < 2) break;
    kv.clear(0);
    model::Batch batch;
    batch.add_chain(0, 0, std::span<const int32_t>(ids).subspan(b, n));
    ASSERT_TRUE(m->forward(ctx, batch, kv, {}, logits.data()).ok());
    for (size_t i = 0; i + 1 < n; ++i) {
      const float* lg = logits.data() + i * V;
      double mx = lg[0];
      for (int32_t v = 1; v < V; ++v) mx = std::max<double>(mx, lg[v]);
      double sum = 0.0;
      for (int32_t v = 0; v < V; ++v) sum += std::exp(lg[v] - mx);
      nll -= lg[ids[b + i + 1]] - mx - std::log(sum);
      ++scored;
    }
  }
  const double ppl = std::exp(nll / static_cast<double>(scored));
  EXPECT_EQ(scored, ref.at("heldout").at("n_scored").get<int64_t>());
  EXPECT_LT(ppl, card_ppl * 1.001) << "held-out perplexity " << ppl << " vs model card " << card_ppl;
  EXPECT_GT(ppl, 1.0);
  RecordProperty("heldout_ppl", std::to_string(ppl));
}

// Reading the exporter's file and writing it back with our writer gives the same bytes.
TEST(DefaultModel, ExporterFileRoundTripsThroughReaderAndWriter) {
  const std::string path = repo_file("models/kjv-5m.gguf");
  const auto f = gguf::GgufFile::open(path);
  gguf::GgufWriter w(f->version());
  for (const auto& [key, value] : f->metadata()) {
    if (key == "general.alignment") {
      w.set_alignment(f->alignment());  // writes the key at this position
    } else {
      w.set(key, value);
    }
  }
  for (const auto& t : f->tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  const auto bytes = w.to_bytes();
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> orig((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), orig.size());
  EXPECT_TRUE(bytes == orig);
  const auto back = gguf::GgufFile::from_bytes(bytes.data(), bytes.size(), "roundtrip");
  EXPECT_EQ(back->tensors().size(), f->tensors().size());
  EXPECT_EQ(back->metadata().size(), f->metadata().size());
}
