// --spec draft in the method registry (drafters/registry.h).
#include "drafters/draft_model/draft_model_drafter.h"
#include "drafters/registry.h"
#include "treespec/status.h"

namespace treespec::drafters {

MethodInfo draft_method() {
  MethodInfo m;
  m.name = "draft";
  m.summary =
      "a draft model with the target's vocabulary (-md), or a subset of the target's layers, drafts a chain "
      "or tree";
  m.auto_arm = AutoArm::warm_up;
  m.default_arm = [](const SpecConfig& c, const model::Model*) {
    const auto& p = c.params<DraftModelParams>();
    return !p.model_path.empty() || !p.layers.empty();
  };
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& d = c.params<DraftModelParams>();
    OptionDesc md{"--model-draft,--draft-model",
                  "draft: draft model GGUF with the target's vocabulary (llama.cpp -md)"};
    md.show_default = false;
    md.label = "-md/--model-draft";
    s.value(md, d.model_path);
    OptionDesc layers{"--draft-layers",
                      "draft: run only these layers of the draft model, e.g. 0,1 or 0-2,4; '+' also separates items, "
                      "e.g. 0-2+4 (without -md: self-drafting with the target's own layers, final norm and output)"};
    layers.show_default = false;
    s.value(layers, d.layers);
    s.value({"--draft-max,--draft,--draft-n", "draft: tokens per chain / tree depth"}, d.n_draft_max);
    s.value({"--draft-min,--draft-n-min", "draft: drafts shorter than this are not verified"}, d.n_draft_min);
    s.value({"--draft-p-min",
             "draft: stop below a node when the draft probability of its children (chain: the top token) is below "
             "this"},
            d.p_min);
    s.flag({"--draft-tree", "draft: draft a tree (branches where the draft's other candidates are likely)"}, d.tree);
    s.value({"--draft-p-split", "draft tree: a non-top candidate with this draft probability becomes a branch"},
            d.p_split);
    s.value({"--draft-tree-nodes", "draft tree: nodes incl. the root (when no budget is set)"}, d.n_tree_nodes);
    s.value({"--draft-tree-width", "draft tree: nodes expanded per draft forward pass"}, d.tree_width);
  };
  m.check_files = [](const SpecConfig& c) {
    check_readable(c.params<DraftModelParams>().model_path, "-md/--model-draft");
  };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string&) -> std::unique_ptr<Drafter> {
    if (env.model == nullptr)
      throw InvalidArgument("--spec draft needs the target model (the draft is checked against it)");
    return make_draft_model_drafter(c.params<DraftModelParams>(), *env.model, env.seed, env.pool);
  };
  return m;
}

}  // namespace treespec::drafters
