#include "drafters/factory.h"

#include <fmt/format.h>

#include "treespec/status.h"

namespace treespec::drafters {

std::vector<std::string> spec_methods() { return {"none", "lookup", "lookahead", "medusa"}; }

std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
  if (cfg.method == "none") return std::make_unique<NoneDrafter>();
  if (cfg.method == "lookup") return std::make_unique<LookupDrafter>(cfg.lookup);
  if (cfg.method == "lookahead") return std::make_unique<LookaheadDrafter>(cfg.lookahead, env.seed);
  if (cfg.method == "medusa") {
    if (env.model == nullptr) throw InvalidArgument("--spec medusa needs the model (its heads are checked against it)");
    return make_medusa_drafter(cfg.medusa, *env.model, env.pool);
  }
  throw InvalidArgument(fmt::format("unknown speculative method '{}' (known: {})", cfg.method, fmt::join(spec_methods(), ", ")));
}

}  // namespace treespec::drafters
