// Builds a Drafter from a method name and its parameters. Each drafter's parameter
// struct lives in SpecConfig so the CLI, the bench and the server share one surface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drafters/auto/auto_drafter.h"
#include "drafters/draft_model/draft_model_drafter.h"
#include "drafters/drafter.h"
#include "drafters/lookahead/lookahead_drafter.h"
#include "drafters/lookup/lookup_drafter.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/propd/propd_drafter.h"
#include "drafters/propd/prune_spec.h"
#include "drafters/ptd/ptd_drafter.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// Tree budget policy for any method (engine::make_budget_policy reads it).
struct BudgetParams {
  std::string budget;    // --budget: "" = each drafter's own size; N = fixed; "dynamic" (alias "auto") = the controller
  int32_t n_max = 64;    // --budget-nmax: controller's largest tree per sequence (propd: --propd-nmax)
  int32_t interval = 8;  // --budget-interval: controller re-plans every R steps (propd: --propd-interval)
  bool probe = true;     // start-up latency sweep (--budget-no-probe turns it off)
};

struct SpecConfig {
  std::string method = "none";
  LookupParams lookup;
  LookaheadParams lookahead;
  MedusaParams medusa;
  PtdParams ptd;
  DraftModelParams draft;
  PropdParams propd;
  PruneParams prune;  // --prune (any method) and propd's pruning
  BudgetParams budget;
  AutoParams automatic;  // --spec auto: the arms and the exploration share
};

// What a drafter may need from its surroundings.
struct DrafterEnv {
  const model::Model* model = nullptr;
  std::vector<int32_t> eog_ids;  // empty: drafters that need them read the model's GGUF
  uint64_t seed = 0;
  core::ThreadPool* pool = nullptr;  // the engine's pool, for drafters that run matmuls (Medusa heads); may be null
};

// Known method names, for help texts and validation.
std::vector<std::string> spec_methods();

// --spec auto: the methods its arms come from (cfg.automatic.arms, else none, lookup and
// ptd, medusa when heads are given or in the model, draft when -md or --draft-layers is).
std::vector<std::string> auto_methods(const SpecConfig& cfg, const model::Model* m);
std::unique_ptr<Drafter> make_auto_drafter(const SpecConfig& cfg, const DrafterEnv& env);

// InvalidArgument naming the method (with the list of known ones) or a bad parameter.
std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env);

}  // namespace treespec::drafters
