#include "cli/session.h"

#include <fmt/format.h>

#include <climits>

#include "core/timer.h"
#include "engine/budget_controller.h"
#include "gguf/gguf.h"
#include "treespec/status.h"

namespace treespec::cli {

LoadedModel load_model(const std::string& path) {
  LoadedModel m;
  const double t0 = core::now_s();
  m.model = model::Model::load(path);
  m.tok = tokenizer::Tokenizer::from_gguf(m.model->gguf());
  m.load_s = core::now_s() - t0;
  const auto& hp = m.model->hparams();
  if (m.tok->n_vocab() != hp.n_vocab) {
    throw FormatError(fmt::format("{}: tokenizer has {} tokens but the model's vocabulary is {}", path,
                                  m.tok->n_vocab(), hp.n_vocab));
  }
  return m;
}

engine::EngineParams resolve_engine_params(const ModelOptions& o, const model::Hparams& hp) {
  engine::EngineParams ep;
  ep.n_threads = resolve_threads(o.n_threads);
  if (o.n_ctx < 0) throw InvalidArgument(fmt::format("-c/--ctx-size must be >= 0, got {}", o.n_ctx));
  ep.n_ctx = engine::resolve_context_size(o.n_ctx, hp.n_ctx_train);
  ep.n_batch = o.n_batch;
  ep.type_k = kv::parse_cache_type(o.cache_type_k, "-ctk/--cache-type-k");
  ep.type_v = kv::parse_cache_type(o.cache_type_v, "-ctv/--cache-type-v");
  return ep;
}

engine::SequenceParams resolve_sequence_params(const SamplingOptions& o, int64_t n_predict, bool ignore_eos) {
  if (n_predict < -1)
    throw InvalidArgument(fmt::format("-n/--n-predict must be >= 0 or -1 (unlimited), got {}", n_predict));
  engine::SequenceParams sp;
  sp.sampling = resolve_sampling(o);
  sp.mode = resolve_verify(o);
  sp.typical = o.typical;
  sp.n_predict = n_predict > INT32_MAX ? INT32_MAX : static_cast<int32_t>(n_predict);
  sp.ignore_eog = ignore_eos;
  return sp;
}

std::unique_ptr<engine::Sequence> make_sequence(engine::Engine& eng, const LoadedModel& m, std::vector<int32_t> ids,
                                                const engine::SequenceParams& sp, const drafters::SpecConfig& spec) {
  eng.set_eog_ids(m.tok->eog_ids());
  drafters::DrafterEnv env{m.model.get(), m.tok->eog_ids(), sp.sampling.seed, &eng.ctx().pool()};
  return std::make_unique<engine::Sequence>(std::move(ids), sp, drafters::make_drafter(spec, env));
}

PreparedSequence prepare_sequence(engine::Engine& eng, const LoadedModel& m, std::vector<int32_t> ids,
                                  const engine::SequenceParams& sp, const drafters::SpecConfig& spec) {
  PreparedSequence p;
  p.seq = make_sequence(eng, m, std::move(ids), sp, spec);
  // The tree-budget policy (--budget, and propd's dynamic trees): the same factory serve and bench use.
  p.policy = engine::make_budget_policy(spec, eng);
  eng.set_budget_policy(p.policy.get());
  return p;
}

}  // namespace treespec::cli
