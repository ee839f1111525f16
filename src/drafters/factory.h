// Building a Drafter from a SpecConfig, through the method registry (drafters/registry.h).
// Names no particular drafter: a method's parameter struct comes from its own header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "drafters/drafter.h"
#include "drafters/spec_config.h"

namespace treespec::drafters {

// Known method names (the registry's order), for help texts and validation.
std::vector<std::string> spec_methods();

// --spec auto: the methods its arms come from (--auto-arms, else every method that can be
// an arm and is available: none, lookup and ptd always, medusa when heads are given or in
// the model, draft when -md or --draft-layers is).
std::vector<std::string> auto_methods(const SpecConfig& cfg, const model::Model* m);

// InvalidArgument naming the method (with the list of known ones) or a bad parameter.
std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env);

// The tree-budget policy `cfg` asks for (--budget, else the method's own choice);
// InvalidArgument naming a bad --budget.
BudgetRequest budget_request(const SpecConfig& cfg);

}  // namespace treespec::drafters
