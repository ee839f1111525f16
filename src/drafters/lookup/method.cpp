// --spec lookup in the method registry (drafters/registry.h).
#include "drafters/lookup/lookup_drafter.h"
#include "drafters/registry.h"

namespace treespec::drafters {

MethodInfo lookup_method() {
  MethodInfo m;
  m.name = "lookup";
  m.per_request = true;
  m.summary = "prompt lookup: continuations of the context's own n-grams, merged into a tree";
  m.auto_arm = AutoArm::shadow;
  m.default_arm = [](const SpecConfig&, const model::Model*) { return true; };
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<LookupParams>();
    s.value({"--lookup-ngram-min", "lookup: shortest n-gram matched"}, p.ngram_min);
    s.value({"--lookup-ngram-max", "lookup: longest n-gram matched"}, p.ngram_max);
    s.value({"--lookup-draft", "lookup: tokens per continuation"}, p.draft_len);
    s.value({"--lookup-branches", "lookup: continuations merged into the tree"}, p.max_branches);
  };
  // Sized by the budget controller unless --budget is given (controller_unless_budget_given).
  m.budget = [](const SpecConfig& c) { return controller_unless_budget_given(c, c.budget.n_max, c.budget.interval); };
  m.make = [](const SpecConfig& c, const DrafterEnv&, const std::string&) -> std::unique_ptr<Drafter> {
    return std::make_unique<LookupDrafter>(c.params<LookupParams>());
  };
  return m;
}

}  // namespace treespec::drafters
