// --spec lookahead in the method registry (drafters/registry.h).
#include "drafters/lookahead/lookahead_drafter.h"
#include "drafters/registry.h"

namespace treespec::drafters {

MethodInfo lookahead_method() {
  MethodInfo m;
  m.name = "lookahead";
  m.per_request = true;
  m.summary = "lookahead decoding: Jacobi iterations in a window feed an n-gram pool";
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<LookaheadParams>();
    s.value({"--lookahead-n", "lookahead: n-gram size N (window levels + 1)"}, p.ngram);
    s.value({"--lookahead-w", "lookahead: Jacobi window width W"}, p.window);
    s.value({"--lookahead-g", "lookahead: n-grams kept per first token and verified per step G"}, p.guess);
  };
  // Sized by the budget controller unless --budget is given (controller_unless_budget_given).
  m.budget = [](const SpecConfig& c) { return controller_unless_budget_given(c, c.budget.n_max, c.budget.interval); };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string&) -> std::unique_ptr<Drafter> {
    return std::make_unique<LookaheadDrafter>(c.params<LookaheadParams>(), env.seed);
  };
  return m;
}

}  // namespace treespec::drafters
