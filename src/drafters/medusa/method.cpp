// --spec medusa in the method registry (drafters/registry.h).
#include <fmt/format.h>

#include "drafters/medusa/medusa_drafter.h"
#include "drafters/registry.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

MethodInfo medusa_method() {
  MethodInfo m;
  m.name = "medusa";
  m.summary = "Medusa heads (trained with train-heads, or stored in the model file) draft a token tree";
  m.auto_arm = AutoArm::prefixes;
  m.default_arm = [](const SpecConfig& c, const model::Model* model) {
    return !c.params<MedusaParams>().heads_path.empty() || (model != nullptr && MedusaHeads::present_in(model->gguf()));
  };
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<MedusaParams>();
    OptionDesc heads{"--heads,--medusa-heads,--auto-heads",
                     "medusa (and auto's Medusa arms): heads file (default: heads stored in the model file)"};
    heads.show_default = false;
    heads.also = {"propd"};  // propd's heads unless --propd-heads
    heads.any_with_prune = true;
    s.value(heads, p.heads_path);
    s.value({"--tree,--medusa-tree",
             "medusa: tree shape: dynamic:N (grown every step from the heads' own confidence, N nodes incl. root), "
             "auto:N (fixed, best-first from the heads' calibration), a name in the tree file (e.g. "
             "medusa_mc_sim_7b_63), FILE.json or FILE.json:NAME"},
            p.tree);
    OptionDesc tree_file{"--tree-file,--medusa-tree-file",
                         "medusa: tree choices JSON for --tree NAME (default: $TREESPEC_SHARED/data/tree_choices.json, "
                         "../shared/data/tree_choices.json)"};
    tree_file.show_default = false;
    tree_file.also = {"propd"};
    s.value(tree_file, p.tree_file);
    s.value({"--tree-nodes,--medusa-tree-nodes", "medusa: keep only the first N tree nodes incl. the root (0 = all)"},
            p.tree_nodes);
    OptionDesc top_k{"--medusa-topk", "medusa: candidates per head"};
    top_k.also = {"propd"};
    s.value(top_k, p.top_k);
  };
  m.check_files = [](const SpecConfig& c) { check_readable(c.params<MedusaParams>().heads_path, "--heads"); };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string& as) -> std::unique_ptr<Drafter> {
    if (env.model == nullptr)
      throw InvalidArgument(fmt::format("--spec {} needs the model (its heads are checked against it)", as));
    return make_medusa_drafter(c.params<MedusaParams>(), *env.model, env.pool, as.c_str());
  };
  return m;
}

}  // namespace treespec::drafters
