// --spec propd in the method registry (drafters/registry.h).
#include "drafters/propd/propd_drafter.h"
#include "drafters/registry.h"
#include "treespec/status.h"

namespace treespec::drafters {

MethodInfo propd_method() {
  MethodInfo m;
  m.name = "propd";
  m.summary = "ProPD: Medusa heads, early pruning after an early layer, tree size from a latency model";
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<PropdParams>();
    OptionDesc heads{"--propd-heads", "propd: Medusa + prune heads file (default: --heads, then the model file)"};
    heads.show_default = false;
    heads.any_with_prune = true;
    s.value(heads, p.heads_path);
    s.value({"--propd-nmax", "propd: largest tree Nmax (nodes incl. the root)"}, p.n_max);
    s.value({"--propd-interval", "propd: steps between re-plans and tree rebuilds (R)"}, p.interval);
    s.flag({"--propd-no-prune,--no-prune", "propd: no early pruning (ablation)"}, p.no_prune);
    s.flag({"--propd-static-tree,--static-tree", "propd: fixed Nmax tree, no dynamic sizing (ablation)"},
           p.static_tree);
    s.flag({"--propd-table-tree,--table-tree",
            "propd: trees from the live per-(depth, rank) acceptance table, the same every step, instead of grown "
            "from the heads' confidence each step (ablation)"},
           p.table_tree);
    OptionDesc tree{"--propd-tree",
                    "propd --static-tree: the tree (a --tree spec; default: best-first from the calibration)"};
    tree.show_default = false;
    s.value(tree, p.tree);
  };
  m.check_files = [](const SpecConfig& c) { check_readable(c.params<PropdParams>().heads_path, "--propd-heads"); };
  // Without --budget, ProPD sizes its trees with the latency-model controller at its own
  // Nmax and interval (--static-tree: its fixed tree).
  m.budget = [](const SpecConfig& c) -> std::optional<BudgetRequest> {
    const PropdParams& p = c.params<PropdParams>();
    if (p.static_tree) return std::nullopt;
    return controller_unless_budget_given(c, p.n_max, p.interval);
  };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string&) -> std::unique_ptr<Drafter> {
    if (env.model == nullptr) throw InvalidArgument("--spec propd needs the model (its heads are checked against it)");
    return make_propd_drafter(c.params<PropdParams>(), c.params<MedusaParams>(), c.prune, *env.model, env.pool);
  };
  return m;
}

}  // namespace treespec::drafters
