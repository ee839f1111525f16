#include "drafters/factory.h"

#include <fmt/format.h>

#include "treespec/status.h"

namespace treespec::drafters {

std::vector<std::string> spec_methods() { return {"none", "lookup", "lookahead"}; }

std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
  if (cfg.method == "none") return std::make_unique<NoneDrafter>();
  if (cfg.method == "lookup") return std::make_unique<LookupDrafter>(cfg.lookup);
  if (cfg.method == "lookahead") return std::make_unique<LookaheadDrafter>(cfg.lookahead, env.seed);
  throw InvalidArgument(fmt::format("unknown speculative method '{}' (known: {})", cfg.method, fmt::join(spec_methods(), ", ")));
}

}  // namespace treespec::drafters
