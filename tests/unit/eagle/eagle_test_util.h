// An EAGLE layer for stories260K, trained briefly (its quality only sets how often drafts
// are accepted; greedy equality must hold whatever it proposes), once per build of the
// test binary: the first process trains and publishes the file (shared_cache_path), the
// others load it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>

#include "common/golden.h"
#include "common/test_util.h"
#include "drafters/eagle/eagle_drafter.h"
#include "drafters/factory.h"
#include "drafters/spec_config.h"
#include "train/eagle_train.h"

namespace treespec::test {

// A short recipe: 64 samples of 96 tokens, 200 steps of 8 windows of 32 rows.
inline train::EagleTrainParams short_eagle_training(const StoriesModel& m) {
  train::EagleTrainParams p;
  p.gen.samples = 64;
  p.gen.seq_len = 96;
  p.gen.eog_ids = m.tok->eog_ids();
  p.gen.bos_id = m.tok->bos_id();
  p.gen.n_threads = 1;
  p.steps = 200;
  p.window = 32;
  p.windows = 8;
  return p;
}

// Path of the stories260K EAGLE layer (trained on first use).
inline std::string stories_eagle() {
  static std::once_flag once;
  static std::string path;
  std::call_once(once, [] {
    path = shared_cache_path("eagle_stories.gguf");
    const SharedCacheLock lock(path);
    if (std::filesystem::exists(path)) return;
    const StoriesModel m = load_stories();
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    train::train_eagle(*m.model, short_eagle_training(m), tmp);
    publish_cache_file(tmp, path);
  });
  return path;
}

inline drafters::SpecConfig eagle_cfg(const std::string& path, int32_t n_nodes = 12, int32_t depth = 6) {
  drafters::SpecConfig c;
  c.method = "eagle";
  auto& p = c.params<drafters::EagleParams>();
  p.path = path;
  p.n_nodes = n_nodes;
  p.depth = depth;
  return c;
}

inline DrafterMaker eagle_maker(const drafters::SpecConfig& c) {
  return [c](const model::Model& m) { return drafters::make_drafter(c, drafters::DrafterEnv{&m, {}, 1}); };
}

}  // namespace treespec::test
