// --spec ptd in the method registry (drafters/registry.h).
#include "drafters/ptd/ptd_drafter.h"
#include "drafters/registry.h"
#include "model/model.h"

namespace treespec::drafters {

MethodInfo ptd_method() {
  MethodInfo m;
  m.name = "ptd";
  m.per_request = true;
  m.summary = "progressive tree drafting: draft trees and a guess pool inside the target model (training-free)";
  m.auto_arm = AutoArm::trial;
  m.default_arm = [](const SpecConfig&, const model::Model*) { return true; };
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<PtdParams>();
    s.value({"--ptd-depth", "ptd: draft subtree height that slides; draft depth that starts pool insertion"},
            p.max_depth);
    s.value({"--ptd-width", "ptd: children per draft node"}, p.width);
    s.value({"--ptd-spine", "ptd: spine length of the draft tree"}, p.spine);
    s.value({"--ptd-init-depth", "ptd: seed chains have random length 1..N (0 = no seeds)"}, p.init_depth);
    s.value({"--ptd-seeds", "ptd: seed chains drawn from the prompt"}, p.n_seeds);
    s.value({"--ptd-trie-cap", "ptd: nodes per pool trie before its oldest branch is dropped"}, p.trie_cap);
    s.value({"--ptd-eos-climb", "ptd: EOS pruning cuts the ancestor this many levels up"}, p.eos_climb);
    s.value({"--ptd-draft-rows", "ptd: max draft-tree rows per step"}, p.max_draft_rows);
    s.value({"--ptd-trie-rows", "ptd: max guess-trie rows per step"}, p.max_trie_rows);
    s.value({"--ptd-real-eos", "ptd fix: EOS pruning at the model's end-of-generation ids (0 = reference: id 2)"},
            p.real_eos);
    s.value({"--ptd-reinsert", "ptd fix: re-insert verified trie subtrees under their own tokens (0 = reference)"},
            p.reinsert);
    s.value({"--ptd-live-feedback",
             "ptd fix: guesses and feedback on the live trie (0 = reference: snapshot replacement)"},
            p.live_feedback);
  };
  // Sized by the budget controller unless --budget is given (controller_unless_budget_given).
  m.budget = [](const SpecConfig& c) { return controller_unless_budget_given(c, c.budget.n_max, c.budget.interval); };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string&) -> std::unique_ptr<Drafter> {
    return std::make_unique<PtdDrafter>(c.params<PtdParams>(), eog_ids_for(env), env.seed,
                                        env.model ? env.model->hparams().n_vocab : 0);
  };
  return m;
}

}  // namespace treespec::drafters
