// treespec run -m MODEL.gguf -p PROMPT -n N [--spec METHOD ...] [--json]
// Generates text from a prompt, streaming it to stdout; --json prints one JSON object
// with prompt_tokens, tokens, text and stats instead.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "cli/session.h"
#include "command.h"
#include "core/files.h"
#include "core/log.h"
#include "engine/budget_controller.h"
#include "engine/engine.h"
#include "engine/grammar_step.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct RunArgs {
  cli::ModelOptions model;
  cli::SamplingOptions sampling;
  cli::GrammarOptions grammar;
  drafters::SpecConfig spec;
  std::string prompt;
  std::string prompt_file;
  int64_t n_predict = -1;
  bool json = false;
  bool ignore_eos = false;
  bool no_parse_special = false;
  bool verbose = false;
};

int run(const RunArgs& a) {
  if (a.verbose) core::set_log_level(core::LogLevel::info);
  if (a.n_predict < -1)
    throw InvalidArgument(fmt::format("-n/--n-predict must be >= 0 or -1 (unlimited), got {}", a.n_predict));
  if (!a.prompt_file.empty() && !a.prompt.empty())
    throw InvalidArgument("give either -p/--prompt or -f/--file, not both");
  const std::string prompt = a.prompt_file.empty() ? a.prompt : core::read_text_file(a.prompt_file, "prompt file");

  const auto constraint = cli::resolve_grammar(a.grammar);  // before the model: a bad grammar fails fast
  // Model, engine and sequence as the C API builds them (cli/session.h).
  const cli::LoadedModel lm = cli::load_model(a.model.model);
  const auto& tok = lm.tok;
  const auto& hp = lm.model->hparams();
  const double t_load = lm.load_s;
  const engine::EngineParams ep = cli::resolve_engine_params(a.model, hp);
  engine::Engine eng(*lm.model, ep);
  engine::SequenceParams sp = cli::resolve_sequence_params(a.sampling, a.n_predict, a.ignore_eos);
  if (constraint) sp.grammar = {constraint, engine::make_token_mask(*tok)};
  std::vector<int32_t> ids = tok->encode(prompt, true, !a.no_parse_special);
  cli::PreparedSequence prepared = cli::prepare_sequence(eng, lm, ids, sp, a.spec);
  engine::Sequence& seq = *prepared.seq;
  const auto& policy = prepared.policy;

  tokenizer::StreamDecoder stream(*tok);
  // The prompt is echoed with the first tokens, once the engine has accepted it: a
  // prompt it refuses (too long, empty) gives its error before anything is on stdout.
  bool prompt_shown = a.json;
  auto show_prompt = [&] {
    if (prompt_shown) return;
    prompt_shown = true;
    std::fputs(tok->decode(ids).c_str(), stdout);
    std::fflush(stdout);
  };
  if (!a.json) {
    if (!ids.empty()) stream.prime(ids.back());  // empty: generate() reports it
    seq.on_tokens = [&](std::span<const int32_t> toks) {
      show_prompt();
      std::string s;
      for (int32_t t : toks) s += stream.push(t);
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    };
  }
  Status st = eng.generate(seq);
  if (!st.ok()) throw Error(st.to_string());
  show_prompt();

  const auto& stats = seq.stats();
  if (a.json) {
    tokenizer::StreamDecoder dec(*tok);
    dec.prime(ids.back());
    std::string text;
    for (int32_t t : seq.generated()) text += dec.push(t);
    text += dec.flush();
    nlohmann::json j;
    j["prompt_tokens"] = seq.prompt();
    j["tokens"] = seq.generated();
    j["text"] = text;
    nlohmann::json s = stats.to_json();
    s["finish_reason"] = engine::finish_reason_name(seq.finish_reason());
    s["context_full"] = seq.finish_reason() == engine::FinishReason::context;
    s["spec"] = a.spec.method;
    s["verify"] = sp.sampling.greedy() ? "greedy" : verify::mode_name(sp.mode);
    s["seed"] = sp.sampling.seed;  // drawn at start when -s was not given: -s SEED reproduces the run
    s["n_threads"] = ep.n_threads;
    s["n_ctx"] = ep.n_ctx;
    s["load_s"] = t_load;
    if (policy) s["budget"] = policy->stats_json();
    if (seq.drafter().prune().enabled()) {
      const auto& ps = seq.drafter().prune();
      s["prune"] = {{"layer", ps.layer},
                    {"top_k", ps.top_k},
                    {"head", ps.head ? ps.head->kind() : "none"},
                    {"n_layer", hp.n_layer}};
    }
    nlohmann::json dj = nlohmann::json::object();
    for (const auto& [k, v] : seq.drafter().counters()) dj[k] = v;
    s["drafter"] = dj;
    j["stats"] = s;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::string rest = stream.flush();
    std::fputs(rest.c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    const std::string seed = sp.sampling.greedy() ? "" : fmt::format(" | seed {}", sp.sampling.seed);
    std::fprintf(stderr, "\n%s | spec %s%s | stop: %s\n", stats.summary().c_str(), a.spec.method.c_str(), seed.c_str(),
                 engine::finish_reason_name(seq.finish_reason()));
  }
  return 0;
}

std::function<int()> setup_run(CLI::App& sub) {
  auto a = std::make_shared<RunArgs>();
  cli::add_model_options(sub, a->model);
  sub.add_option("-p,--prompt", a->prompt, "prompt text");
  sub.add_option("-f,--file", a->prompt_file, "read the prompt from a file");
  sub.add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1 = until end of generation or context)")
      ->capture_default_str();
  cli::add_sampling_options(sub, a->sampling);
  cli::add_grammar_options(sub, a->grammar);
  cli::add_spec_options(sub, a->spec);
  sub.add_flag("--json", a->json, "print one JSON object (prompt_tokens, tokens, text, stats) instead of streaming");
  sub.add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-generation tokens");
  sub.add_flag("--no-parse-special", a->no_parse_special, "treat special-token text in the prompt as plain text");
  sub.add_flag("-v,--verbose", a->verbose, "log more");
  return [a, &sub] {
    cli::resolve_spec_method(sub, a->spec);
    return run(*a);
  };
}

}  // namespace

TREESPEC_COMMAND("run", "Generate text from a prompt (streamed; --json for machine-readable output)", setup_run);
