// Helpers shared by the Medusa tests: random heads, and stories260K heads trained once per
// build of the test binary (a few seconds) for the decoding tests.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "common/golden.h"
#include "common/test_util.h"
#include "core/rng.h"
#include "drafters/medusa/medusa_heads.h"
#include "model/model.h"
#include "train/medusa_train.h"

namespace treespec::test {

// Heads with random weights (deliberately bad drafters): the fit metadata is the model's.
inline std::shared_ptr<drafters::MedusaHeads> random_heads(const model::Model& m, int32_t n_heads, int32_t n_blocks,
                                                           uint64_t seed, float scale = 1.0f) {
  auto base = drafters::MedusaHeads::init_from_model(m, n_heads, n_blocks);
  const int32_t E = m.hparams().n_embd, V = m.hparams().n_vocab;
  core::Rng rng(seed);
  auto randv = [&](size_t n, float sd) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.normal()) * sd;
    return v;
  };
  std::vector<std::vector<std::vector<float>>> bw(static_cast<size_t>(n_heads)), bb(static_cast<size_t>(n_heads));
  std::vector<std::vector<float>> out;
  for (int32_t k = 0; k < n_heads; ++k) {
    for (int32_t r = 0; r < n_blocks; ++r) {
      bw[static_cast<size_t>(k)].push_back(randv(static_cast<size_t>(E) * E, scale / std::sqrt(static_cast<float>(E))));
      bb[static_cast<size_t>(k)].push_back(randv(static_cast<size_t>(E), 0.1f * scale));
    }
    out.push_back(randv(static_cast<size_t>(V) * E, scale));
  }
  return drafters::MedusaHeads::from_f32(base->info(), std::move(bw), std::move(bb), std::move(out));
}

// New heads with h's blocks (dequantised to f32), `info` and vocab projections `out`.
inline std::shared_ptr<drafters::MedusaHeads> with_blocks_of(const drafters::MedusaHeads& h,
                                                             drafters::MedusaHeadsInfo info,
                                                             std::vector<std::vector<float>> out) {
  const auto E = static_cast<size_t>(h.n_embd());
  std::vector<std::vector<std::vector<float>>> bw(static_cast<size_t>(h.n_heads())), bb(bw.size());
  for (int32_t k = 0; k < h.n_heads(); ++k) {
    for (const auto& b : h.head(k).blocks) {
      std::vector<float> w(E * E);
      b.w.dequantize(w.data());
      bw[static_cast<size_t>(k)].push_back(std::move(w));
      bb[static_cast<size_t>(k)].push_back(b.b);
    }
  }
  return drafters::MedusaHeads::from_f32(std::move(info), std::move(bw), std::move(bb), std::move(out));
}

// The same heads with a copy of the output matrix as each head's own vocab projection
// (the pre-sharing file layout): logits equal to `h`'s up to the output's quantisation.
inline std::shared_ptr<drafters::MedusaHeads> with_own_output(const drafters::MedusaHeads& h, const model::Model& m) {
  drafters::MedusaHeadsInfo info = h.info();
  info.shared_output = false;
  info.draft_vocab.clear();
  std::vector<float> base(static_cast<size_t>(h.n_vocab()) * static_cast<size_t>(h.n_embd()));
  m.output().dequantize(base.data());
  return with_blocks_of(h, std::move(info), std::vector<std::vector<float>>(static_cast<size_t>(h.n_heads()), base));
}

// Shared-output heads with h's blocks that draft only from `ids` (ascending), bound to m.
inline std::shared_ptr<drafters::MedusaHeads> with_draft_vocab(const drafters::MedusaHeads& h, const model::Model& m,
                                                               std::vector<int32_t> ids) {
  drafters::MedusaHeadsInfo info = h.info();
  info.shared_output = true;
  info.draft_vocab = std::move(ids);
  auto out = with_blocks_of(h, std::move(info), {});
  out->bind(m);
  return out;
}

// A made-up calibration table (top-k accuracy rising linearly), so auto:N trees can be
// built for heads that were never evaluated.
inline void set_flat_calibration(drafters::MedusaHeads& h) {
  auto& info = h.mutable_info();
  info.calib_top_k = 10;
  info.calibration.clear();
  for (int32_t k = 0; k < info.n_heads; ++k) {
    for (int32_t j = 1; j <= 10; ++j)
      info.calibration.push_back(0.05f * static_cast<float>(j) / static_cast<float>(k + 1));
  }
}

// The stories260K model and heads trained on it with a short schedule, made once.
struct TrainedStories {
  StoriesModel m;
  std::shared_ptr<drafters::MedusaHeads> heads;
  train::MedusaTrainReport report;
  train::MedusaTrainParams params;
};

inline train::MedusaTrainParams short_stories_training() {
  train::MedusaTrainParams p;
  p.n_heads = 4;
  p.n_blocks = 1;
  p.samples = 48;
  p.seq_len = 128;
  p.steps = 150;
  p.batch = 128;
  p.seed = 7;
  p.n_threads = 2;
  return p;
}

// short_stories_training() with the model's end-of-generation and BOS ids.
inline train::MedusaTrainParams stories_training_for(const StoriesModel& m) {
  train::MedusaTrainParams p = short_stories_training();
  p.eog_ids = m.tok->eog_ids();
  p.bos_id = m.tok->bos_id();
  return p;
}

inline TrainedStories train_stories() {
  TrainedStories ts;
  ts.m = load_stories();
  ts.params = stories_training_for(ts.m);
  ts.heads = train::train_medusa_heads(*ts.m.model, ts.params, &ts.report);
  return ts;
}

// stories260K with heads trained on short_stories_training(), once per build of the test
// binary: the first process trains and publishes the heads file (shared_cache_path), the
// others load it (ctest runs each test in its own process; under the sanitizers the
// training took ~50 s per test). `report` is empty when the heads came from the file;
// tests that read it use trained_stories_with_report().
inline const TrainedStories& trained_stories() {
  static std::once_flag once;
  static TrainedStories ts;
  std::call_once(once, [] {
    const std::string path = shared_cache_path("medusa_stories.heads.gguf");
    const SharedCacheLock lock(path);
    if (std::filesystem::exists(path)) {
      ts.m = load_stories();
      ts.params = stories_training_for(ts.m);
      ts.heads = drafters::MedusaHeads::load(path);
      ts.heads->bind(*ts.m.model);
      return;
    }
    ts = train_stories();
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    ts.heads->write(tmp);
    publish_cache_file(tmp, path);
  });
  return ts;
}

inline const TrainedStories& trained_stories_with_report() {
  static std::once_flag once;
  static TrainedStories ts;
  std::call_once(once, [] { ts = train_stories(); });
  return ts;
}

}  // namespace treespec::test
