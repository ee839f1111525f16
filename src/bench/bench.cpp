#include "bench/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <numeric>

#include "bench/machine.h"
#include "bench/report.h"
#include "core/assert.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "engine/budget_controller.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace treespec::bench {

namespace {

// config.sampling: "greedy", or the sampling parameters and the verifier.
std::string sampling_label(const BenchConfig& cfg) {
  const auto& p = cfg.sampling;
  if (p.greedy()) return "greedy";
  return fmt::format("temp {} top-k {} top-p {} min-p {} seed {} verify {}", p.temp, p.top_k, p.top_p, p.min_p, p.seed,
                     verify::mode_name(cfg.verify));
}

using nlohmann::json;

struct LoadedModel {
  std::string path;
  std::string name;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::vector<std::vector<std::vector<int32_t>>> prompts;  // [set][prompt] token ids
  std::vector<int64_t> n_truncated;                        // per set
};

struct RepResult {
  double wall_s = 0.0;      // decode steps only
  engine::SpecStats stats;  // engine totals accumulated during the run
  uint64_t peak_rss = 0;
};

struct Cell {
  CellKey key;
  const MethodSpec* method = nullptr;
  drafters::SpecConfig spec;
  std::vector<RepResult> reps;
  std::vector<json> mismatches;
  // The tree-budget policy (engine::make_budget_policy; --budget N and dynamic), made on
  // first use and kept across repetitions like a long-running server's.
  std::unique_ptr<engine::BudgetPolicy> policy;
  bool policy_made = false;
};

engine::SpecStats stats_diff(const engine::SpecStats& a, const engine::SpecStats& b) {
  engine::SpecStats d;
  d.n_prompt = a.n_prompt - b.n_prompt;
  d.n_generated = a.n_generated - b.n_generated;
  d.n_steps = a.n_steps - b.n_steps;
  d.n_forwards = a.n_forwards - b.n_forwards;
  d.n_drafts = a.n_drafts - b.n_drafts;
  d.n_draft_tokens = a.n_draft_tokens - b.n_draft_tokens;
  d.n_accepted = a.n_accepted - b.n_accepted;
  d.n_rows = a.n_rows - b.n_rows;
  d.n_prune_steps = a.n_prune_steps - b.n_prune_steps;
  d.n_prune_rows = a.n_prune_rows - b.n_prune_rows;
  d.n_pruned = a.n_pruned - b.n_pruned;
  d.pruned_row_layers = a.pruned_row_layers - b.pruned_row_layers;
  auto sub = [](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
    std::vector<int64_t> r(x);
    for (size_t i = 0; i < y.size() && i < r.size(); ++i) r[i] -= y[i];
    while (!r.empty() && r.back() == 0) r.pop_back();
    return r;
  };
  d.accepted_per_pos = sub(a.accepted_per_pos, b.accepted_per_pos);
  d.drafted_per_pos = sub(a.drafted_per_pos, b.drafted_per_pos);
  d.t_prompt = a.t_prompt - b.t_prompt;
  d.t_draft = a.t_draft - b.t_draft;
  d.t_forward = a.t_forward - b.t_forward;
  d.t_verify = a.t_verify - b.t_verify;
  d.t_commit = a.t_commit - b.t_commit;
  return d;
}

json summary(const std::vector<double>& v, bool with_values) {
  json j;
  j["median"] = median(v);
  j["min"] = v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
  j["max"] = v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  if (with_values) j["values"] = v;
  return j;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string model_display_name(const model::Model& m, const std::string& path) {
  if (!m.hparams().name.empty()) return m.hparams().name;
  std::string s = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (s.size() > 5 && s.substr(s.size() - 5) == ".gguf") s.resize(s.size() - 5);
  return s;
}

// Runs every prompt of a set through the engine with b concurrent sequences and calls
// done(prompt index, generated tokens) as each finishes. Returns decode wall seconds.
double run_prompts(engine::Engine& eng, const std::vector<std::vector<int32_t>>& prompts, int32_t batch,
                   const engine::SequenceParams& sp, const std::function<std::unique_ptr<drafters::Drafter>()>& make,
                   const std::function<void(int64_t, std::vector<int32_t>)>& done) {
  std::vector<std::unique_ptr<engine::Sequence>> live;
  std::vector<int64_t> live_idx;
  size_t next = 0;
  double wall = 0.0;
  for (;;) {
    while (live.size() < static_cast<size_t>(batch) && next < prompts.size()) {
      auto seq = std::make_unique<engine::Sequence>(prompts[next], sp, make());
      const Status st = eng.add(*seq);
      if (!st.ok()) throw Error(fmt::format("bench: cannot add prompt {}: {}", next, st.to_string()));
      if (seq->finished()) {
        done(static_cast<int64_t>(next), seq->generated());
      } else {
        live.push_back(std::move(seq));
        live_idx.push_back(static_cast<int64_t>(next));
      }
      ++next;
    }
    if (live.empty()) break;
    std::vector<engine::Sequence*> ptrs;
    ptrs.reserve(live.size());
    for (auto& s : live) ptrs.push_back(s.get());
    const double t0 = core::now_s();
    eng.step(ptrs);
    wall += core::now_s() - t0;
    for (size_t i = live.size(); i-- > 0;) {
      if (!live[i]->finished()) continue;
      done(live_idx[i], live[i]->generated());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      live_idx.erase(live_idx.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return wall;
}

json cell_json(const Cell& c, const Cell& none, const LoadedModel& lm, const json& membw, int32_t n_threads,
               bool rss_per_cell) {
  json j;
  j["model"] = c.key.model;
  j["prompt_set"] = c.key.prompt_set;
  j["batch"] = c.key.batch;
  j["method"] = c.key.method;
  j["method_name"] = c.method->name;
  json params = json::object();
  for (const auto& [k, v] : c.method->params) params[k] = v;
  j["params"] = params;
  j["budget"] = c.key.budget;
  j["reps"] = static_cast<int64_t>(c.reps.size());

  std::vector<double> tps, speedup, wgbs, wall, prefill;
  engine::SpecStats merged;
  double t_draft = 0, t_forward = 0, t_verify = 0, t_commit = 0;
  uint64_t rss = 0;
  const double weight_bytes = static_cast<double>(lm.model->weight_bytes());
  for (size_t r = 0; r < c.reps.size(); ++r) {
    const RepResult& rr = c.reps[r];
    const double t = rr.wall_s > 0 ? static_cast<double>(rr.stats.n_generated) / rr.wall_s : 0.0;
    tps.push_back(t);
    const RepResult& nr = none.reps[r];
    const double tn = nr.wall_s > 0 ? static_cast<double>(nr.stats.n_generated) / nr.wall_s : 0.0;
    speedup.push_back(tn > 0 ? t / tn : 0.0);
    wgbs.push_back(rr.wall_s > 0 ? weight_bytes * static_cast<double>(rr.stats.n_forwards) / rr.wall_s / 1e9 : 0.0);
    wall.push_back(rr.wall_s);
    prefill.push_back(rr.stats.t_prompt);
    merged.merge(rr.stats);
    t_draft += rr.stats.t_draft;
    t_forward += rr.stats.t_forward;
    t_verify += rr.stats.t_verify;
    t_commit += rr.stats.t_commit;
    rss = std::max(rss, rr.peak_rss);
  }
  const double nrep = std::max<double>(1.0, static_cast<double>(c.reps.size()));
  j["tokens_per_s"] = summary(tps, true);
  j["speedup"] = summary(speedup, false);
  j["mean_accepted_length"] = merged.mean_accepted_length();
  j["acceptance_rate"] = merged.acceptance_rate();
  std::vector<double> by_depth;
  for (size_t d = 0; d < merged.accepted_per_pos.size(); ++d) {
    const int64_t drafted = d < merged.drafted_per_pos.size() ? merged.drafted_per_pos[d] : 0;
    by_depth.push_back(drafted ? static_cast<double>(merged.accepted_per_pos[d]) / static_cast<double>(drafted) : 0.0);
  }
  j["acceptance_by_depth"] = by_depth;
  j["accepted_per_pos"] = merged.accepted_per_pos;
  j["drafted_per_pos"] = merged.drafted_per_pos;
  j["rows_per_step"] = merged.rows_per_step();
  j["seqs_per_forward"] =
      merged.n_forwards ? static_cast<double>(merged.n_steps) / static_cast<double>(merged.n_forwards) : 0.0;
  const engine::SpecStats& first = c.reps.front().stats;
  j["n_generated"] = first.n_generated;
  j["n_steps"] = first.n_steps;
  j["n_forwards"] = first.n_forwards;
  j["decode_s"] = median(wall);
  j["prefill_s"] = median(prefill);
  j["time_s"] = {{"draft", t_draft / nrep},
                 {"forward", t_forward / nrep},
                 {"verify", t_verify / nrep},
                 {"commit", t_commit / nrep}};
  j["peak_rss_bytes"] = rss;
  j["peak_rss_scope"] = rss_per_cell ? "cell" : "process";
  const double w = median(wgbs);
  j["weight_read_gb_per_s"] = w;
  j["bandwidth_fraction"] = nullptr;
  if (membw.is_object()) {
    for (const auto& s : membw["samples"]) {
      if (s["n_threads"].get<int32_t>() == n_threads && s["gb_per_s"].get<double>() > 0) {
        j["bandwidth_fraction"] = w / s["gb_per_s"].get<double>();
      }
    }
  }
  j["greedy_match"] = c.mismatches.empty();
  j["mismatches"] = c.mismatches;
  // Early pruning (ProPD, --prune) and the budget controller, when they were used.
  if (merged.n_prune_steps > 0) {
    j["pruning"] = {{"steps", merged.n_prune_steps},
                    {"rows", merged.n_prune_rows},
                    {"rows_pruned", merged.n_pruned},
                    {"late_rows_removed_fraction", merged.pruned_fraction()},
                    {"row_layers_saved_fraction", merged.compute_saved_fraction()}};
  }
  if (c.policy) {
    json bp = c.policy->stats_json();
    if (bp.is_object()) {
      bp.erase("trace");  // per-step detail belongs to run --json
      j["budget_policy"] = bp;
    }
  }
  return j;
}

}  // namespace

drafters::SpecConfig resolve_spec_without_params(const MethodSpec& spec) {
  if (!spec.params.empty()) {
    throw InvalidArgument(
        fmt::format("method spec '{}': parameters need the CLI's flag table (treespec bench)", spec.label));
  }
  drafters::SpecConfig c;
  c.method = spec.name;
  return c;
}

json bandwidth_json(int32_t n_threads, uint64_t bytes, double seconds) {
  std::vector<int32_t> threads = {1};
  const int32_t hw = core::hardware_threads();
  for (int32_t t : {n_threads > 0 ? n_threads : hw, hw}) {
    if (std::find(threads.begin(), threads.end(), t) == threads.end()) threads.push_back(t);
  }
  json j;
  j["probe"] = kBandwidthProbe;
  j["bytes"] = bytes;
  j["samples"] = json::array();
  for (const auto& s : measure_read_bandwidth(threads, bytes, seconds)) {
    j["samples"].push_back({{"n_threads", s.n_threads}, {"gb_per_s", s.gb_per_s}});
  }
  return j;
}

namespace {

void check_bench_config(const BenchConfig& cfg) {
  if (cfg.models.empty()) throw InvalidArgument("bench: no model (-m)");
  if (cfg.prompt_sources.empty()) throw InvalidArgument("bench: no prompt set (--prompts)");
  if (cfg.methods.empty() || cfg.methods.front().name != "none") {
    throw InvalidArgument("bench: the method list must start with 'none' (use normalize_methods)");
  }
  if (cfg.n_predict < 1) throw InvalidArgument(fmt::format("bench: -n must be >= 1, got {}", cfg.n_predict));
  if (cfg.reps < 1) throw InvalidArgument(fmt::format("bench: -r must be >= 1, got {}", cfg.reps));
  if (cfg.n_threads < 1) throw InvalidArgument(fmt::format("bench: -t must be >= 1, got {}", cfg.n_threads));
  if (cfg.batches.empty() || cfg.budgets.empty()) throw InvalidArgument("bench: empty --batch or --budget list");
  if (cfg.max_prompt_tokens == 1) throw InvalidArgument("bench: --max-prompt-tokens must be 0 (off) or >= 2");
}

std::vector<PromptSet> load_prompt_sets(const BenchConfig& cfg) {
  std::vector<PromptSet> sets;
  for (const auto& src : cfg.prompt_sources) {
    sets.push_back(load_prompts(src, cfg.n_prompts));
    for (size_t k = 0; k + 1 < sets.size(); ++k) {
      if (sets[k].name == sets.back().name) {
        throw InvalidArgument(
            fmt::format("bench: two prompt sets are named '{}' (add :name=... to one)", sets.back().name));
      }
    }
  }
  return sets;
}

// A set's prompts as token ids for `lm`, cut to --max-prompt-tokens (BOS kept) and checked
// against the context limit; n_truncated counts the cut ones.
std::vector<std::vector<int32_t>> tokenize_prompt_set(const LoadedModel& lm, const PromptSet& set,
                                                      const BenchConfig& cfg, int32_t limit, int64_t& n_truncated) {
  std::vector<std::vector<int32_t>> toks;
  n_truncated = 0;
  for (size_t i = 0; i < set.prompts.size(); ++i) {
    std::vector<int32_t> ids = lm.tok->encode(set.prompts[i], true, false);
    if (ids.empty()) throw InvalidArgument(fmt::format("{}: prompt {} has no tokens", set.path, i));
    if (cfg.max_prompt_tokens > 0 && static_cast<int32_t>(ids.size()) > cfg.max_prompt_tokens) {
      std::vector<int32_t> kept = {ids.front()};
      kept.insert(kept.end(), ids.end() - (cfg.max_prompt_tokens - 1), ids.end());
      ids = std::move(kept);
      ++n_truncated;
    }
    if (static_cast<int64_t>(ids.size()) + cfg.n_predict > limit) {
      throw InvalidArgument(fmt::format(
          "{}: prompt {} of '{}' has {} tokens; with -n {} it needs {} positions but the context limit is {} "
          "(raise -c, lower -n, or cut prompts with --max-prompt-tokens)",
          lm.name, i, set.name, ids.size(), cfg.n_predict, ids.size() + static_cast<size_t>(cfg.n_predict), limit));
    }
    toks.push_back(std::move(ids));
  }
  return toks;
}

// Loads a model and its tokenizer, names it (unique among `loaded`) and tokenises every set.
LoadedModel load_bench_model(const std::string& path, const BenchConfig& cfg, const std::vector<PromptSet>& sets,
                             const std::vector<LoadedModel>& loaded) {
  LoadedModel lm;
  lm.path = path;
  lm.model = model::Model::load(path);
  lm.tok = tokenizer::Tokenizer::from_gguf(lm.model->gguf());
  const auto& hp = lm.model->hparams();
  if (lm.tok->n_vocab() != hp.n_vocab) {
    throw FormatError(fmt::format("{}: tokenizer has {} tokens but the model's vocabulary is {}", path,
                                  lm.tok->n_vocab(), hp.n_vocab));
  }
  lm.name = model_display_name(*lm.model, path);
  for (const auto& other : loaded) {
    if (other.name == lm.name) lm.name += fmt::format("#{}", loaded.size());
  }
  const int32_t limit = engine::resolve_context_size(cfg.n_ctx, hp.n_ctx_train);
  for (const auto& set : sets) {
    int64_t n_trunc = 0;
    lm.prompts.push_back(tokenize_prompt_set(lm, set, cfg, limit, n_trunc));
    lm.n_truncated.push_back(n_trunc);
  }
  return lm;
}

// Makes every method's drafter for `lm` once, so bad parameters fail before timing. A
// method expanded from "all" that this model cannot run is marked dropped and listed in
// `skipped`; a named one fails.
void try_methods_on(const LoadedModel& lm, const std::vector<MethodSpec>& methods,
                    const std::vector<drafters::SpecConfig>& specs, const BenchHooks& hooks, std::vector<bool>& dropped,
                    json& skipped) {
  drafters::DrafterEnv env{lm.model.get(), lm.tok->eog_ids(), 1};
  for (size_t k = 0; k < specs.size(); ++k) {
    try {
      (void)hooks.make_drafter(specs[k], env);
    } catch (const Error& e) {
      if (!methods[k].from_all) throw;
      dropped[k] = true;
      skipped.push_back({{"method", methods[k].label}, {"model", lm.name}, {"reason", e.what()}});
      if (hooks.progress)
        std::fprintf(hooks.progress, "bench: skipping %s on %s: %s\n", methods[k].label.c_str(), lm.name.c_str(),
                     e.what());
    }
  }
}

void check_batches_fit(const std::vector<PromptSet>& sets, const BenchConfig& cfg) {
  for (const auto& set : sets) {
    for (int32_t b : cfg.batches) {
      if (static_cast<size_t>(b) > set.prompts.size()) {
        throw InvalidArgument(
            fmt::format("bench: batch size {} needs at least {} prompts but '{}' has {} "
                        "(raise --n-prompts or lower --batch)",
                        b, b, set.name, set.prompts.size()));
      }
    }
  }
}

// Everything in the report but the cells: schema, machine, configuration, models, sets.
json report_header(const BenchConfig& cfg, const std::vector<MethodSpec>& methods,
                   const std::vector<LoadedModel>& models, const std::vector<PromptSet>& sets) {
  json report;
  report["schema"] = "treespec-bench";
  report["schema_version"] = kSchemaVersion;
  report["created_utc"] = utc_now();
  report["command"] = cfg.command;
  const MachineInfo mi = machine_info();
  report["machine"] = {{"cpu_model", mi.cpu_model}, {"n_cpus", mi.n_cpus}, {"isa", mi.isa}, {"os", mi.os},
                       {"compiler", mi.compiler},   {"membw", nullptr}};
  if (cfg.measure_bandwidth) {
    report["machine"]["membw"] = bandwidth_json(cfg.n_threads, cfg.bandwidth_bytes, cfg.bandwidth_seconds);
  }
  json method_labels = json::array();
  for (const auto& m : methods) method_labels.push_back(m.label);
  report["config"] = {{"n_predict", cfg.n_predict},
                      {"ignore_eos", cfg.ignore_eos},
                      {"reps", cfg.reps},
                      {"n_threads", cfg.n_threads},
                      {"n_ctx", cfg.n_ctx},
                      {"type_k", kv::cache_type_name(cfg.type_k)},
                      {"type_v", kv::cache_type_name(cfg.type_v)},
                      {"n_prompts", cfg.n_prompts},
                      {"max_prompt_tokens", cfg.max_prompt_tokens},
                      {"batches", cfg.batches},
                      {"budgets", cfg.budgets},
                      {"methods", method_labels},
                      {"warmup", cfg.warmup},
                      {"sampling", sampling_label(cfg)},
                      {"outputs_checked", cfg.outputs_checked()},
                      {"order", "repetition-major, rotated"}};
  report["models"] = json::array();
  for (const auto& lm : models) {
    const auto& hp = lm.model->hparams();
    report["models"].push_back({{"name", lm.name},
                                {"path", lm.path},
                                {"arch", hp.arch},
                                {"n_params", lm.model->n_params()},
                                {"weight_bytes", lm.model->weight_bytes()},
                                {"n_layer", hp.n_layer},
                                {"n_embd", hp.n_embd},
                                {"n_vocab", hp.n_vocab},
                                {"n_ctx_train", hp.n_ctx_train}});
  }
  report["prompt_sets"] = json::array();
  for (size_t s = 0; s < sets.size(); ++s) {
    json ps = {{"name", sets[s].name},
               {"path", sets[s].path},
               {"format", sets[s].format},
               {"field", sets[s].field},
               {"turn", sets[s].turn},
               {"n_available", sets[s].n_available},
               {"n_prompts", static_cast<int64_t>(sets[s].prompts.size())}};
    // Token statistics from the first model's tokenizer.
    const auto& toks = models.front().prompts[s];
    size_t sum = 0, mx = 0;
    for (const auto& t : toks) {
      sum += t.size();
      mx = std::max(mx, t.size());
    }
    ps["prompt_tokens_mean"] = static_cast<double>(sum) / static_cast<double>(toks.size());
    ps["prompt_tokens_max"] = mx;
    ps["n_truncated"] = models.front().n_truncated[s];
    report["prompt_sets"].push_back(ps);
  }
  return report;
}

// The timed part: every (model, prompt set, batch) group runs its cells (none once, then
// method x budget) repetition-major with a rotated order, on one engine per group.
class BenchSweep {
 public:
  BenchSweep(const BenchConfig& cfg, const BenchHooks& hooks, const std::vector<MethodSpec>& methods,
             const std::vector<drafters::SpecConfig>& specs, const std::vector<PromptSet>& sets, json& report)
      : cfg_(cfg),
        hooks_(hooks),
        methods_(methods),
        specs_(specs),
        sets_(sets),
        report_(report),
        rss_per_cell_(reset_peak_rss()),
        check_outputs_(cfg.outputs_checked()) {
    // Cells per group: none once (budget is meaningless for it), then method x budget.
    cell_plan_.emplace_back(0, 0);
    for (size_t mi2 = 1; mi2 < methods_.size(); ++mi2) {
      for (int32_t b : cfg_.budgets) cell_plan_.emplace_back(mi2, b);
    }
    sp_.sampling = cfg_.sampling;
    sp_.mode = cfg_.verify;
    sp_.typical = cfg_.typical;
    sp_.n_predict = cfg_.n_predict;
    sp_.ignore_eog = cfg_.ignore_eos;
  }

  // Appends every cell to report["cells"]; false when some output differed from none's.
  bool run(std::vector<LoadedModel>& models) {
    int64_t total_units = 0;
    for (const auto& set : sets_) {
      total_units +=
          static_cast<int64_t>(models.size() * cfg_.batches.size() * cell_plan_.size() * set.prompts.size()) *
          cfg_.reps;
    }
    core::ProgressCounter progress(hooks_.progress, "bench", total_units, "sequences");
    progress_ = &progress;
    report_["cells"] = json::array();
    bool greedy_ok = true;
    for (auto& lm : models) {
      drafters::DrafterEnv env{lm.model.get(), lm.tok->eog_ids(), sp_.sampling.seed};
      for (size_t s = 0; s < sets_.size(); ++s) {
        std::map<int64_t, std::vector<int32_t>> reference;  // prompt -> none's first output
        for (int32_t batch : cfg_.batches) greedy_ok = run_group(lm, env, s, batch, reference) && greedy_ok;
      }
    }
    progress.finish();
    progress_ = nullptr;
    return greedy_ok;
  }

 private:
  using Done = std::function<void(int64_t, std::vector<int32_t>)>;

  bool run_group(const LoadedModel& lm, const drafters::DrafterEnv& env, size_t s, int32_t batch,
                 std::map<int64_t, std::vector<int32_t>>& reference) {
    const auto& prompts = lm.prompts[s];
    size_t max_len = 0;
    for (const auto& p : prompts) max_len = std::max(max_len, p.size());
    int32_t extra = 1;
    std::vector<Cell> cells = plan_cells(lm, env, sets_[s].name, batch, extra);
    engine::EngineParams ep;
    ep.n_threads = cfg_.n_threads;
    ep.n_slots = batch;
    ep.type_k = cfg_.type_k;
    ep.type_v = cfg_.type_v;
    // Room for the longest prompt, n tokens and a full tree past the end, so trees
    // are never clamped by the context in the timed runs.
    ep.n_ctx = static_cast<int32_t>(max_len) + cfg_.n_predict + extra;
    engine::Engine eng(*lm.model, ep);
    eng.set_eog_ids(lm.tok->eog_ids());

    if (cfg_.warmup) {  // page in weights, warm caches and code paths; untimed
      std::vector<std::vector<int32_t>> few(prompts.begin(), prompts.begin() + batch);
      engine::SequenceParams wp = sp_;
      wp.n_predict = std::min(cfg_.n_predict, 16);
      for (auto& c : cells) run_cell(eng, env, batch, c, few, wp, [](int64_t, const std::vector<int32_t>&) {});
    }
    for (int32_t rep = 0; rep < cfg_.reps; ++rep) {
      for (size_t k = 0; k < cells.size(); ++k) {
        Cell& c = cells[(k + static_cast<size_t>(rep)) % cells.size()];
        if (rss_per_cell_) reset_peak_rss();
        RepResult rr = run_cell(eng, env, batch, c, prompts, sp_, [&](int64_t pi, std::vector<int32_t> out) {
          if (hooks_.on_output) hooks_.on_output(c.key, pi, out);
          progress_->advance(1);
          if (check_outputs_) check_output(c, rep, pi, std::move(out), reference);
        });
        rr.peak_rss = peak_rss_bytes();
        c.reps.push_back(std::move(rr));
      }
    }
    bool greedy_ok = true;
    for (const auto& c : cells) {
      json cj = cell_json(c, cells.front(), lm, report_["machine"]["membw"], cfg_.n_threads, rss_per_cell_);
      greedy_ok = greedy_ok && cj["greedy_match"].get<bool>();
      report_["cells"].push_back(std::move(cj));
    }
    return greedy_ok;
  }

  // The group's cells in plan order; `extra` becomes the largest tree any of them may draft.
  std::vector<Cell> plan_cells(const LoadedModel& lm, const drafters::DrafterEnv& env, const std::string& set_name,
                               int32_t batch, int32_t& extra) const {
    std::vector<Cell> cells;
    for (const auto& [m, budget] : cell_plan_) {
      Cell c;
      c.key = {lm.name, set_name, batch, methods_[m].label, budget};
      c.method = &methods_[m];
      c.spec = specs_[m];
      if (budget == kBudgetDynamic) c.spec.budget.budget = "dynamic";
      const int32_t own = hooks_.make_drafter(c.spec, env)->max_nodes();
      extra = std::max(extra, budget > 0 ? budget : own > 0 ? own : c.spec.budget.n_max);
      cells.push_back(std::move(c));
    }
    return cells;
  }

  // One run of a cell over `ps`; the engine totals it added.
  RepResult run_cell(engine::Engine& eng, const drafters::DrafterEnv& env, int32_t batch, Cell& c,
                     const std::vector<std::vector<int32_t>>& ps, const engine::SequenceParams& p, const Done& done) {
    // --budget N, dynamic, or the method's own policy (propd's controller), from the
    // factory run and serve use too.
    if (!c.policy_made) {
      if (c.key.budget > 0) c.spec.budget.budget = std::to_string(c.key.budget);
      c.policy = engine::make_budget_policy(c.spec, eng);
      c.policy_made = true;
    }
    eng.set_budget_policy(c.policy.get());
    const engine::SpecStats before = eng.totals();
    RepResult rr;
    rr.wall_s = run_prompts(
        eng, ps, batch, p,
        [&] {
          drafters::DrafterEnv e = env;
          e.pool =
              &eng.ctx().pool();  // drafters that run a model (Medusa heads, draft models) share the engine's threads
          return hooks_.make_drafter(c.spec, e);
        },
        done);
    eng.set_budget_policy(nullptr);
    rr.stats = stats_diff(eng.totals(), before);
    return rr;
  }

  // Compares an output with none's for the same prompt (none's first output becomes the
  // reference) and records the first differing position.
  static void check_output(Cell& c, int32_t rep, int64_t pi, std::vector<int32_t> out,
                           std::map<int64_t, std::vector<int32_t>>& reference) {
    auto ref = reference.find(pi);
    if (ref == reference.end()) {
      // none runs first in repetition 0 of the first batch size (rotation
      // offset 0), so only it can see a prompt without a reference.
      TREESPEC_ASSERT(c.method->name == "none", "bench: greedy reference missing");
      reference.emplace(pi, std::move(out));
      return;
    }
    if (out == ref->second) return;
    const auto& e = ref->second;
    size_t pos = 0;
    while (pos < e.size() && pos < out.size() && e[pos] == out[pos]) ++pos;
    c.mismatches.push_back({{"prompt", pi},
                            {"rep", rep},
                            {"position", pos},
                            {"expected", pos < e.size() ? e[pos] : -1},
                            {"got", pos < out.size() ? out[pos] : -1},
                            {"expected_len", e.size()},
                            {"got_len", out.size()}});
  }

  const BenchConfig& cfg_;
  const BenchHooks& hooks_;
  const std::vector<MethodSpec>& methods_;
  const std::vector<drafters::SpecConfig>& specs_;
  const std::vector<PromptSet>& sets_;
  json& report_;
  const bool rss_per_cell_;
  const bool check_outputs_;
  std::vector<std::pair<size_t, int32_t>> cell_plan_;  // (method index, budget)
  engine::SequenceParams sp_;
  core::ProgressCounter* progress_ = nullptr;
};

}  // namespace

json run_bench(const BenchConfig& cfg, const BenchHooks& hooks_in) {
  BenchHooks hooks = hooks_in;
  if (!hooks.resolve_spec) hooks.resolve_spec = resolve_spec_without_params;
  if (!hooks.make_drafter)
    hooks.make_drafter = [](const drafters::SpecConfig& c, const drafters::DrafterEnv& e) {
      return drafters::make_drafter(c, e);
    };
  check_bench_config(cfg);

  // ---- Validate everything before timing anything. ----
  const std::vector<PromptSet> sets = load_prompt_sets(cfg);
  std::vector<MethodSpec> methods = cfg.methods;
  std::vector<drafters::SpecConfig> specs;
  specs.reserve(methods.size());
  for (const auto& m : methods) specs.push_back(hooks.resolve_spec(m));
  std::vector<bool> dropped(methods.size(), false);
  json skipped = json::array();
  std::vector<LoadedModel> models;
  for (const auto& path : cfg.models) {
    LoadedModel lm = load_bench_model(path, cfg, sets, models);
    try_methods_on(lm, methods, specs, hooks, dropped, skipped);
    models.push_back(std::move(lm));
  }
  check_batches_fit(sets, cfg);
  for (size_t k = methods.size(); k-- > 0;) {
    if (!dropped[k]) continue;
    methods.erase(methods.begin() + static_cast<std::ptrdiff_t>(k));
    specs.erase(specs.begin() + static_cast<std::ptrdiff_t>(k));
  }

  json report = report_header(cfg, methods, models, sets);
  const bool greedy_ok = BenchSweep(cfg, hooks, methods, specs, sets, report).run(models);
  report["skipped_methods"] = skipped;
  report["greedy_ok"] = greedy_ok;
  return report;
}

std::string greedy_failure_message(const json& report) {
  std::string msg;
  for (const auto& c : report.at("cells")) {
    if (c.at("greedy_match").get<bool>()) continue;
    const auto& ms = c.at("mismatches");
    const auto& m = ms.at(0);
    msg += fmt::format(
        "greedy output differs from 'none': model {}, method {}, budget {}, batch {}, prompt set {}, prompt {} "
        "(rep {}): token {} is {} but none gave {} ({} mismatching outputs in this cell)\n",
        c.at("model").get<std::string>(), c.at("method").get<std::string>(),
        budget_label(c.at("budget").get<int32_t>()), c.at("batch").get<int32_t>(),
        c.at("prompt_set").get<std::string>(), m.at("prompt").get<int64_t>(), m.at("rep").get<int32_t>(),
        m.at("position").get<int64_t>(), m.at("got").get<int32_t>(), m.at("expected").get<int32_t>(), ms.size());
  }
  return msg;
}

int exit_code(const json& report) { return report.value("greedy_ok", false) ? 0 : kExitGreedyMismatch; }

}  // namespace treespec::bench
