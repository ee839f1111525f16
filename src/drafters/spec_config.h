// What a user asks of speculation: the method, each method's own parameters, and the
// options every method shares (early pruning, the tree budget). Light on purpose: it
// names no drafter, so the engine, the CLI and the server include it without pulling in
// every drafter's header. A method's parameter struct lives in its own folder and is
// reached by type: cfg.params<MedusaParams>() (drafters/registry.h says how a method
// registers its parameters, flags and factory).
#pragma once

#include <any>
#include <cstdint>
#include <map>
#include <string>
#include <typeindex>
#include <vector>

namespace treespec::core {
class ThreadPool;
}
namespace treespec::model {
class Model;
}

namespace treespec::drafters {

constexpr int32_t kDefaultPruneK = 10;

// Early pruning (--prune for any method; propd prunes unless --no-prune).
struct PruneParams {
  bool enabled = false;         // --prune: prune any method's trees (propd prunes unless --no-prune)
  int32_t layer = 0;            // --prune-layer / --propd-layer: layers before the test (0 = default)
  int32_t top_k = 0;            // --prune-k / --propd-k: width of the parent's top-k (0 = default)
  float recall_target = 0.98f;  // --prune-recall: default-layer rule
  bool lens = false;            // --prune-lens: use the logit lens even where a trained head exists
  void validate() const;        // InvalidArgument naming the flag
};

// Tree budget policy for any method (drafters::budget_request resolves it).
struct BudgetParams {
  std::string budget;    // --budget: "" = the method's own choice; N = fixed; "dynamic" (alias "auto") = the controller
  int32_t n_max = 64;    // --budget-nmax: controller's largest tree per sequence
  int32_t interval = 8;  // --budget-interval: controller re-plans every R steps
  bool probe = true;     // start-up latency sweep (--budget-no-probe turns it off)
};

class SpecConfig {
 public:
  std::string method = "none";
  PruneParams prune;
  BudgetParams budget;

  // The parameters of one method, by their struct: default-constructed on first use.
  // Copies of a SpecConfig copy them (structs of plain values).
  template <class P>
  P& params() {
    std::any& a = params_[std::type_index(typeid(P))];
    if (!a.has_value()) a = P{};
    return std::any_cast<P&>(a);
  }
  // The defaults when they were never set.
  template <class P>
  const P& params() const {
    const auto it = params_.find(std::type_index(typeid(P)));
    if (it != params_.end()) return std::any_cast<const P&>(it->second);
    static const P defaults{};
    return defaults;
  }

 private:
  std::map<std::type_index, std::any> params_;
};

// What a drafter may need from its surroundings.
struct DrafterEnv {
  const model::Model* model = nullptr;
  std::vector<int32_t> eog_ids;  // empty: drafters that need them take the model's (tokenizer::eog_ids)
  uint64_t seed = 0;
  core::ThreadPool* pool = nullptr;  // the engine's pool, for drafters that run matmuls (Medusa heads); may be null
};

// The tree-budget policy a configuration asks for, resolved from the method and its
// parameters by drafters::budget_request, so the engine builds the policy
// (engine::make_budget_policy) without knowing any method.
struct BudgetRequest {
  enum class Kind {
    own,         // each drafter's own tree size, no policy
    fixed,       // every sequence gets `nodes`
    controller,  // the latency-model controller (ProPD's dynamic tree size)
    choose,      // --spec auto: the policy that picks a method arm per step
  };
  Kind kind = Kind::own;
  int32_t nodes = 0;     // fixed
  int32_t n_max = 64;    // controller
  int32_t interval = 8;  // controller
  bool probe = true;     // controller and choose: start-up latency sweep
  // choose (--auto-explore, --auto-trial, --auto-shadow-every)
  double explore = 0.01;
  int32_t trial_steps = 3;
  int32_t shadow_every = 4;
};

}  // namespace treespec::drafters
