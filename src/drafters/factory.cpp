#include "drafters/factory.h"

#include <fmt/format.h>

#include <algorithm>

#include "gguf/gguf.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

std::vector<std::string> spec_methods() { return {"none", "lookup", "lookahead", "medusa", "ptd", "propd", "draft"}; }

namespace {
// The model's end-of-generation ids: the caller's, else the GGUF's eos/eot/eom ids.
std::vector<int32_t> eog_ids_of(const DrafterEnv& env) {
  if (!env.eog_ids.empty() || env.model == nullptr) return env.eog_ids;
  std::vector<int32_t> ids;
  const int32_t n_vocab = env.model->hparams().n_vocab;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = env.model->gguf().get_int(key, -1);
    if (id >= 0 && id < n_vocab && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::unique_ptr<Drafter> make_base_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
  if (cfg.method == "none") return std::make_unique<NoneDrafter>();
  if (cfg.method == "lookup") return std::make_unique<LookupDrafter>(cfg.lookup);
  if (cfg.method == "lookahead") return std::make_unique<LookaheadDrafter>(cfg.lookahead, env.seed);
  if (cfg.method == "medusa") {
    if (env.model == nullptr) throw InvalidArgument("--spec medusa needs the model (its heads are checked against it)");
    return make_medusa_drafter(cfg.medusa, *env.model, env.pool);
  }
  if (cfg.method == "propd") {
    if (env.model == nullptr) throw InvalidArgument("--spec propd needs the model (its heads are checked against it)");
    return make_propd_drafter(cfg.propd, cfg.medusa, cfg.prune, *env.model, env.pool);
  }
  if (cfg.method == "ptd") {
    return std::make_unique<PtdDrafter>(cfg.ptd, eog_ids_of(env), env.seed, env.model ? env.model->hparams().n_vocab : 0);
  }
  if (cfg.method == "draft") {
    if (env.model == nullptr) throw InvalidArgument("--spec draft needs the target model (the draft is checked against it)");
    return make_draft_model_drafter(cfg.draft, *env.model, env.seed, env.pool);
  }
  throw InvalidArgument(fmt::format("unknown speculative method '{}' (known: {})", cfg.method, fmt::join(spec_methods(), ", ")));
}
}  // namespace

std::unique_ptr<Drafter> make_drafter(const SpecConfig& cfg, const DrafterEnv& env) {
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
