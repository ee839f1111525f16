// Shared by the ProPD tests: stories260K with Medusa heads and prune heads trained once per
// build of the test binary on a short schedule (a few seconds; ~50 s under ASan), and a
// controller that believes rows are free (so dynamic trees grow to Nmax and pruning has
// work to do).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <mutex>

#include "common/golden.h"
#include "drafters/medusa/medusa_heads.h"
#include "drafters/propd/heads_file.h"
#include "drafters/propd/prune_spec.h"
#include "engine/budget_controller.h"
#include "model/model.h"
#include "train/medusa_train.h"
#include "train/prune_train.h"
#include "unit/medusa/medusa_test_util.h"

namespace treespec::test {

struct PropdStories {
  StoriesModel m;
  std::shared_ptr<drafters::MedusaHeads> heads;
  std::shared_ptr<drafters::PruneHeadSet> prune;
  train::MedusaTrainReport report;
  train::PruneTrainReport prune_report;
};

inline PropdStories train_propd_stories() {
  PropdStories ps;
  ps.m = load_stories();
  train::MedusaTrainParams p = stories_training_for(ps.m);  // the Medusa tests' schedule
  p.tap_layers = {2, 3, 4};
  ps.heads = train::train_medusa_heads(*ps.m.model, p, &ps.report);
  train::PruneTrainParams pp;
  pp.steps = 150;
  pp.batch = 128;
  core::ThreadPool pool(2);
  ps.prune = train::train_prune_heads(*ps.m.model, ps.report.taps, pp, pool, &ps.prune_report);
  return ps;
}

// Trained once per build of the test binary, as trained_stories(): later processes load
// the published heads file (Medusa and prune heads); the reports are empty then, and
// tests that read them use propd_stories_with_report().
inline const PropdStories& propd_stories() {
  static std::once_flag once;
  static PropdStories ps;
  std::call_once(once, [] {
    const std::string path = shared_cache_path("propd_stories.heads.gguf");
    const SharedCacheLock lock(path);
    if (std::filesystem::exists(path)) {
      ps.m = load_stories();
      ps.heads = drafters::MedusaHeads::load(path);
      ps.heads->bind(*ps.m.model);
      ps.prune = std::make_shared<drafters::PruneHeadSet>(*drafters::load_prune_heads(path, *ps.m.model));
      return;
    }
    ps = train_propd_stories();
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    drafters::write_heads_file(tmp, *ps.heads, ps.prune.get());
    publish_cache_file(tmp, path);
  });
  return ps;
}

inline const PropdStories& propd_stories_with_report() {
  static std::once_flag once;
  static PropdStories ps;
  std::call_once(once, [] { ps = train_propd_stories(); });
  return ps;
}

// A controller whose latency model says every step costs the same whatever its size
// (prior samples only, no start-up sweep, never re-planned from measurements that could
// say otherwise: the online samples are outweighed), so it grants Nmax.
inline std::unique_ptr<engine::BudgetController> flat_controller(int32_t n_layer, int32_t n_max = 64) {
  engine::ControllerParams cp;
  cp.n_max = n_max;
  cp.interval = 4;
  cp.probe = false;
  cp.latency.prior_weight = 1e6;
  auto c = std::make_unique<engine::BudgetController>(cp, n_layer);
  for (int32_t b = 1; b <= 8; b *= 2) {
    for (int32_t r = 1; r <= 1024; r *= 2) {
      for (int32_t s : {0, 128, 256}) c->latency().add(b, r, s, 1e-3, /*prior=*/true);
    }
  }
  return c;
}

}  // namespace treespec::test
