#include "drafters/factory.h"

#include <fmt/format.h>

#include <algorithm>

#include "gguf/gguf.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

std::vector<std::string> spec_methods() {
  return {"none", "auto", "lookup", "lookahead", "medusa", "ptd", "propd", "draft"};
}

namespace {
// The model's end-of-generation ids: the caller's, else the GGUF's eos/eot/eom ids.
std::vector<int32_t> eog_ids_of(const DrafterEnv& env) {
  if (!env.eog_ids.empty() || env.model == nullptr) return env.eog_ids;
  std::vector<int32_t> ids;
  const int32_t n_vocab = env.model->hparams().n_vocab;
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = env.model->gguf().get_int(key, -1);
    if (id >= 0 && id < n_vocab && std::find(ids.begin(), ids.end(), id) == ids.end())
      ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// `as`: the method the user named (auto builds its arms with this too).
std::unique_ptr<Drafter> make_base_drafter(const SpecConfig& cfg, const DrafterEnv& env, const char* as = nullptr) {
  if (cfg.method == "none") return std::make_unique<NoneDrafter>();
  if (cfg.method == "lookup") return std::make_unique<LookupDrafter>(cfg.lookup);
  if (cfg.method == "lookahead") return std::make_unique<LookaheadDrafter>(cfg.lookahead, env.seed);
  if (cfg.method == "medusa") {
    if (env.model == nullptr)
      throw InvalidArgument(
          fmt::format("--spec {} needs the model (its heads are checked against it)", as ? as : "medusa"));
    return make_medusa_drafter(cfg.medusa, *env.model, env.pool, as ? as : "medusa");
  }
  if (cfg.method == "propd") {
    if (env.model == nullptr) throw InvalidArgument("--spec propd needs the model (its heads are checked against it)");
    return make_propd_drafter(cfg.propd, cfg.medusa, cfg.prune, *env.model, env.pool);
  }
  if (cfg.method == "ptd") {
    return std::make_unique<PtdDrafter>(cfg.ptd, eog_ids_of(env), env.seed,
                                        env.model ? env.model->hparams().n_vocab : 0);
  }
  if (cfg.method == "draft") {
    if (env.model == nullptr)
      throw InvalidArgument("--spec draft needs the target model (the draft is checked against it)");
    return make_draft_model_drafter(cfg.draft, *env.model, env.seed, env.pool);
  }
  if (cfg.method == "auto") return make_auto_drafter(cfg, env);
  throw InvalidArgument(
      fmt::format("unknown speculative method '{}' (known: {})", cfg.method, fmt::join(spec_methods(), ", ")));
}
}  // namespace

std::vector<std::string> auto_methods(const SpecConfig& cfg, const model::Model* m) {
  if (!cfg.automatic.arms.empty()) {
    std::vector<std::string> out;
    size_t at = 0;
    const std::string& s = cfg.automatic.arms;
    while (at <= s.size()) {
      const size_t comma = std::min(s.find(',', at), s.size());
      const std::string name = s.substr(at, comma - at);
      if (name != "none" && name != "lookup" && name != "ptd" && name != "medusa" && name != "draft") {
        throw InvalidArgument(
            fmt::format("--auto-arms: unknown method '{}' in '{}' (known: none, lookup, ptd, medusa, draft)", name, s));
      }
      if (std::find(out.begin(), out.end(), name) != out.end())
        throw InvalidArgument(fmt::format("--auto-arms: '{}' given twice in '{}'", name, s));
      out.push_back(name);
      at = comma + 1;
    }
    if (std::find(out.begin(), out.end(), "none") == out.end())
      out.insert(out.begin(), "none");  // the fallback that never loses
    return out;
  }
  std::vector<std::string> out = {"none", "lookup", "ptd"};
  const bool heads = !cfg.medusa.heads_path.empty() || (m != nullptr && MedusaHeads::present_in(m->gguf()));
  if (heads) out.emplace_back("medusa");
  if (!cfg.draft.model_path.empty() || !cfg.draft.layers.empty()) out.emplace_back("draft");
  return out;
}

std::unique_ptr<Drafter> make_auto_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
  cfg.automatic.validate();
  auto a = std::make_unique<AutoDrafter>();
  for (const std::string& name : auto_methods(cfg, env.model)) {
    SpecConfig sub = cfg;
    sub.method = name;
    std::unique_ptr<Drafter> d = make_base_drafter(sub, env, "auto");
    const int32_t own = std::max(1, d->max_nodes());
    if (name == "medusa") {
      // Best-first tree prefixes of 2, 4, 8, ... nodes up to the tree's own size, all
      // graded from one shadow tree.
      std::vector<ArmInfo> arms;
      for (int32_t n = 2; n < own; n *= 2) arms.push_back({fmt::format("medusa/{}", n), n});
      arms.push_back({fmt::format("medusa/{}", own), own});
      a->add(std::move(d), /*follows=*/true, /*shadow=*/true, std::move(arms));
    } else if (name == "none" || name == "lookup") {
      a->add(std::move(d), false, /*shadow=*/true, {ArmInfo{name, own}});
    } else {
      // Graded only by trials. The draft model is tried once at the start; PTD's pool pays
      // only after many steps and it feeds tens of rows: tried when its credit allows.
      a->add(std::move(d), false, false, {ArmInfo{name, own, /*warm_up=*/name == "draft"}});
    }
  }
  return a;
}

std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
  if (cfg.prune.enabled && cfg.method == "auto") {
    throw InvalidArgument(
        "--prune does not apply to --spec auto (it chooses among unpruned arms); prune with a named method");
  }
  auto d = make_base_drafter(cfg, env);
  // --prune: early pruning by the logit lens (or a heads file's prune heads) for any method.
  if (cfg.prune.enabled && cfg.method != "propd") {
    if (env.model == nullptr) throw InvalidArgument("--prune needs the model");
    const std::string& heads = !cfg.propd.heads_path.empty() ? cfg.propd.heads_path : cfg.medusa.heads_path;
    d->set_prune(resolve_prune_spec(cfg.prune, heads, *env.model, env.pool));
  }
  return d;
}

}  // namespace treespec::drafters
