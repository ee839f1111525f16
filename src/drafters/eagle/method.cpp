// --spec eagle in the method registry (drafters/registry.h).
#include "drafters/eagle/eagle_drafter.h"
#include "drafters/registry.h"
#include "treespec/status.h"

namespace treespec::drafters {

MethodInfo eagle_method() {
  MethodInfo m;
  m.name = "eagle";
  m.summary =
      "an EAGLE draft layer (trained with train-eagle) drafts from the target's hidden states, autoregressively, "
      "an EAGLE-2 dynamic tree";
  // Arms at best-first prefixes (eagle/2, /4, /8, up to --eagle-nodes), graded from one
  // shadow tree every --auto-shadow-every steps, as Medusa's: its trees are emitted best
  // first, and it observes every step (its cache needs each step's hidden states).
  m.auto_arm = AutoArm::prefixes;
  m.default_arm = [](const SpecConfig& c, const model::Model*) { return !c.params<EagleParams>().path.empty(); };
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<EagleParams>();
    OptionDesc file{"--eagle,--eagle-layer,--auto-eagle", "eagle: EAGLE draft layer file (treespec train-eagle)"};
    file.show_default = false;
    s.value(file, p.path);
    s.value({"--eagle-depth", "eagle: deepest draft token"}, p.depth);
    s.value({"--eagle-width", "eagle: nodes expanded per draft pass"}, p.width);
    s.value({"--eagle-topk", "eagle: children considered per expanded node"}, p.top_k);
    s.value({"--eagle-nodes",
             "eagle: largest tree incl. the root (the budget controller sizes each step's within it "
             "unless --budget is given)"},
            p.n_nodes);
  };
  m.check_files = [](const SpecConfig& c) { check_readable(c.params<EagleParams>().path, "--eagle"); };
  // Without --budget, the latency-model controller sizes the trees (up to --eagle-nodes),
  // for the machine and the batch: the tree that pays on a CPU whose extra rows are cheap
  // (AVX-512 VNNI) loses where they are not (AVX2), and per sequence it shrinks with the
  // batch. The drafter reports its expected acceptance per size (expected_accepted).
  m.budget = [](const SpecConfig& c) {
    return controller_unless_budget_given(c, c.params<EagleParams>().n_nodes, c.budget.interval);
  };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string&) -> std::unique_ptr<Drafter> {
    if (env.model == nullptr)
      throw InvalidArgument("--spec eagle needs the target model (the layer is checked against it)");
    return make_eagle_drafter(c.params<EagleParams>(), *env.model, env.seed, env.pool);
  };
  return m;
}

}  // namespace treespec::drafters
