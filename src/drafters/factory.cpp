#include "drafters/factory.h"

#include <fmt/format.h>

#include <cstdlib>

#include "drafters/medusa/medusa_drafter.h"
#include "drafters/propd/propd_drafter.h"
#include "drafters/propd/prune_spec.h"
#include "drafters/registry.h"
#include "treespec/status.h"

namespace treespec::drafters {

std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
  if (cfg.prune.enabled && cfg.method == "auto") {
    throw InvalidArgument(
        "--prune does not apply to --spec auto (it chooses among unpruned arms); prune with a named method");
  }
  auto d = method(cfg.method).make(cfg, env, cfg.method);
  // --prune: early pruning by the logit lens (or a heads file's prune heads) for any method;
  // propd sets up its own.
  if (cfg.prune.enabled && cfg.method != "propd") {
    if (env.model == nullptr) throw InvalidArgument("--prune needs the model");
    const std::string& propd_heads = cfg.params<PropdParams>().heads_path;
    const std::string& heads = !propd_heads.empty() ? propd_heads : cfg.params<MedusaParams>().heads_path;
    d->set_prune(resolve_prune_spec(cfg.prune, heads, *env.model, env.pool));
  }
  return d;
}

BudgetRequest budget_request(const SpecConfig& cfg) {
  const MethodInfo& m = method(cfg.method);
  if (m.budget) {
    if (std::optional<BudgetRequest> own = m.budget(cfg)) return *own;
  }
  const std::string& v = cfg.budget.budget;
  BudgetRequest r;
  r.n_max = cfg.budget.n_max;
  r.interval = cfg.budget.interval;
  r.probe = cfg.budget.probe;
  if (v.empty()) return r;  // each drafter's own size
  if (v == "dynamic" || v == "auto") {
    r.kind = BudgetRequest::Kind::controller;
    return r;
  }
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || n < 1 || n > 4096) {
    throw InvalidArgument(
        fmt::format("--budget '{}': expected a node count 1..4096, 'dynamic' (alias 'auto'), or nothing for each "
                    "drafter's own size",
                    v));
  }
  r.kind = BudgetRequest::Kind::fixed;
  r.nodes = static_cast<int32_t>(n);
  return r;
}

}  // namespace treespec::drafters
