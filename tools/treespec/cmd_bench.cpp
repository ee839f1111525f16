// treespec bench -m MODEL [-m MODEL2 ...] --prompts FILE [...] [-n N] [--spec none,lookup,...]
//   [--method NAME[:k=v,...]] [--budget own,8,16,dynamic] [--batch 1,2,4,8] [-r REPS]
//   [--json OUT.json] [--csv OUT.csv] [--plot DIR]
// treespec bench --compare A.json B.json | --from RUN.json [...] | --membw
// treespec bench -m MODEL --pp 512 --tg 128 [-r 5] [-t N]   (llama-bench's tests, src/bench/pp_tg.h)
// Thin: parsing, mapping method parameters onto the shared drafter flags, printing.
// The sweep, tables and plots live in src/bench.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/plot.h"
#include "bench/pp_tg.h"
#include "bench/report.h"
#include "cli/options.h"
#include "command.h"
#include "drafters/factory.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct BenchArgs {
  std::vector<std::string> models;
  std::vector<std::string> prompts;
  int64_t n_prompts = 0;
  int32_t n_predict = 128;
  std::string spec = "all";
  std::vector<std::string> method_args;
  std::string budgets = "own";
  std::string batches = "1";
  int32_t reps = 3;
  int32_t n_threads = 0;
  int32_t n_ctx = 0;
  int32_t max_prompt_tokens = 0;
  bool ignore_eos = false;
  bool no_warmup = false;
  bool no_membw = false;
  bool membw = false;
  int32_t membw_mib = 256;
  std::string json_out, csv_out, plot_dir, from;
  std::vector<std::string> compare;
  std::string output = "md";
  bool no_progress = false;
  std::string pp, tg;  // llama-bench mode: comma-separated lengths
  int32_t n_batch = 512;
  std::string cache_type_k = "f16", cache_type_v = "f16";
  const CLI::App* app = nullptr;  // to tell which options were given
  // Greedy unless --temp > 0; seed 1 so that runs repeat.
  cli::SamplingOptions sampling = greedy_options();
  static cli::SamplingOptions greedy_options() {
    cli::SamplingOptions o;
    o.params.temp = 0.0f;
    o.seed = 1;
    return o;
  }
};

// The command line as typed (for the report), shell-quoted where needed.
std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string out;
  size_t b = 0;
  bool first = true;
  while (b < all.size()) {
    size_t e = all.find('\0', b);
    if (e == std::string::npos) e = all.size();
    std::string arg = all.substr(b, e - b);
    if (first) {
      arg = "treespec";
      first = false;
    }
    const bool plain =
        !arg.empty() &&
        arg.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./:=,@+%") ==
            std::string::npos;
    if (!plain) {
      std::string q = "'";
      for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = q + "'";
    }
    out += (out.empty() ? "" : " ") + arg;
    b = e + 1;
  }
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError(fmt::format("cannot write '{}'", path));
  f << text;
  if (!f) throw IoError(fmt::format("cannot write '{}'", path));
}

void emit(const BenchArgs& a, const nlohmann::json& report) {
  if (a.output == "json") std::printf("%s\n", report.dump(2).c_str());
  else if (a.output == "csv") std::fputs(bench::render_csv(report).c_str(), stdout);
  else std::fputs(bench::render_markdown(report).c_str(), stdout);
  std::fflush(stdout);
  if (!a.json_out.empty()) write_text(a.json_out, report.dump(2) + "\n");
  if (!a.csv_out.empty()) write_text(a.csv_out, bench::render_csv(report));
  if (!a.plot_dir.empty()) {
    for (const auto& p : bench::write_plots(report, a.plot_dir)) std::fprintf(stderr, "bench: wrote %s\n", p.c_str());
  }
}

// --pp / --tg: llama-bench's prompt-processing and generation tests instead of the
// method sweep; the sweep's options would be ignored there, so they are an error.
int run_pp_tg_cmd(const BenchArgs& a) {
  for (const char* opt : {"--prompts", "--n-prompts", "--n-predict", "--spec", "--method", "--budget", "--batch",
                          "--max-prompt-tokens", "--ignore-eos", "--csv", "--plot", "--temp", "--verify"}) {
    if (a.app->count(opt) > 0) {
      throw InvalidArgument(
          fmt::format("{} does not apply to --pp/--tg (plain prompt processing and generation); "
                      "run the method sweep without --pp/--tg for it",
                      opt));
    }
  }
  if (a.output == "csv") throw InvalidArgument("-o csv is not available with --pp/--tg (md or json)");
  bench::PpTgConfig cfg;
  cfg.models = a.models;
  if (!a.pp.empty()) cfg.pp = bench::parse_int_list(a.pp, "--pp", 1, 1 << 20);
  if (!a.tg.empty()) cfg.tg = bench::parse_int_list(a.tg, "--tg", 1, 1 << 20);
  cfg.reps = a.app->count("--repetitions") > 0 ? a.reps : 5;  // llama-bench's default
  cfg.n_threads = cli::resolve_threads(a.n_threads);
  cfg.n_batch = a.n_batch;
  cfg.type_k = kv::parse_cache_type(a.cache_type_k, "-ctk/--cache-type-k");
  cfg.type_v = kv::parse_cache_type(a.cache_type_v, "-ctv/--cache-type-v");
  cfg.warmup = !a.no_warmup;
  cfg.command = command_line();
  const auto report = bench::run_pp_tg(cfg, a.no_progress ? nullptr : stderr);
  if (a.output == "json") {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::fputs(bench::render_pp_tg_markdown(report).c_str(), stdout);
  }
  std::fflush(stdout);
  if (!a.json_out.empty()) write_text(a.json_out, report.dump(2) + "\n");
  return 0;
}

int run_bench_cmd(const BenchArgs& a) {
  if (a.output != "md" && a.output != "csv" && a.output != "json") {
    throw InvalidArgument(fmt::format("-o must be md, csv or json, got '{}'", a.output));
  }
  if (!a.pp.empty() || !a.tg.empty()) return run_pp_tg_cmd(a);
  if (a.app != nullptr && a.app->count("--ubatch-size") > 0)
    throw InvalidArgument("-ub/--ubatch-size applies to --pp only");
  if (a.membw) {
    if (a.membw_mib < 1) throw InvalidArgument(fmt::format("--membw-mib must be >= 1, got {}", a.membw_mib));
    const auto j = bench::bandwidth_json(a.n_threads, static_cast<uint64_t>(a.membw_mib) << 20, 0.5);
    std::printf("DRAM read bandwidth (%s, %d MiB buffer, best pass):\n", j["probe"].get<std::string>().c_str(),
                a.membw_mib);
    for (const auto& s : j["samples"]) {
      std::printf("  %3d thread%s: %7.2f GB/s\n", s["n_threads"].get<int>(), s["n_threads"].get<int>() == 1 ? " " : "s",
                  s["gb_per_s"].get<double>());
    }
    if (!a.json_out.empty()) write_text(a.json_out, j.dump(2) + "\n");
    return 0;
  }
  if (!a.compare.empty()) {
    if (a.compare.size() != 2) throw InvalidArgument("--compare takes two report files: A.json B.json");
    const auto ra = bench::load_report(a.compare[0]);
    const auto rb = bench::load_report(a.compare[1]);
    std::fputs(bench::render_compare(ra, rb, a.compare[0], a.compare[1]).c_str(), stdout);
    return 0;
  }
  if (!a.from.empty()) {
    const auto report = bench::load_report(a.from);
    emit(a, report);
    return bench::exit_code(report);
  }

  if (a.models.empty()) throw InvalidArgument("bench needs -m MODEL (or --compare, --from, --membw)");
  if (a.prompts.empty())
    throw InvalidArgument("bench needs --prompts FILE (JSONL, JSON array or text; see docs/benchmarks.md)");
  bench::BenchConfig cfg;
  cfg.models = a.models;
  for (const auto& p : a.prompts) cfg.prompt_sources.push_back(bench::parse_prompt_source(p));
  cfg.n_prompts = a.n_prompts;
  if (a.n_prompts < 0) throw InvalidArgument(fmt::format("--n-prompts must be >= 0, got {}", a.n_prompts));
  cfg.n_predict = a.n_predict;
  cfg.ignore_eos = a.ignore_eos;
  cfg.max_prompt_tokens = a.max_prompt_tokens;
  const auto known = drafters::spec_methods();
  std::vector<bench::MethodSpec> methods;
  if (!a.method_args.empty() && a.spec == "all") {
    // --method alone names the methods; --spec keeps its default only without --method.
  } else {
    methods = bench::parse_spec_list(a.spec, known);
  }
  for (const auto& m : a.method_args) methods.push_back(bench::parse_method_arg(m));
  cfg.methods = bench::normalize_methods(std::move(methods), known);
  cfg.budgets = bench::parse_budget_list(a.budgets);
  cfg.batches = bench::parse_int_list(a.batches, "--batch", 1, 256);
  cfg.reps = a.reps;
  cfg.n_threads = cli::resolve_threads(a.n_threads);
  cfg.n_ctx = a.n_ctx;
  cfg.type_k = kv::parse_cache_type(a.cache_type_k, "-ctk/--cache-type-k");
  cfg.type_v = kv::parse_cache_type(a.cache_type_v, "-ctv/--cache-type-v");
  if (a.n_ctx < 0) throw InvalidArgument(fmt::format("-c/--ctx-size must be >= 0, got {}", a.n_ctx));
  if (a.max_prompt_tokens < 0)
    throw InvalidArgument(fmt::format("--max-prompt-tokens must be >= 0, got {}", a.max_prompt_tokens));
  cfg.warmup = !a.no_warmup;
  cfg.measure_bandwidth = !a.no_membw;
  if (a.membw_mib < 1) throw InvalidArgument(fmt::format("--membw-mib must be >= 1, got {}", a.membw_mib));
  cfg.bandwidth_bytes = static_cast<uint64_t>(a.membw_mib) << 20;
  cfg.command = command_line();
  cfg.sampling = cli::resolve_sampling(a.sampling);
  cfg.verify = cli::resolve_verify(a.sampling);
  cfg.typical = a.sampling.typical;

  bench::BenchHooks hooks;
  hooks.resolve_spec = cli::resolve_method_spec;
  hooks.progress = a.no_progress ? nullptr : stderr;
  const auto report = bench::run_bench(cfg, hooks);
  emit(a, report);
  const std::string failure = bench::greedy_failure_message(report);
  if (!failure.empty()) {
    std::fprintf(stderr, "treespec: error: speculative decoding changed the output (%s):\n%s",
                 report["config"].value("sampling", std::string("greedy")).c_str(), failure.c_str());
  }
  return bench::exit_code(report);
}

std::function<int()> setup_bench(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("-m,--model", a->models, "GGUF model (repeat for several)");
  sub.add_option("--prompts", a->prompts,
                 "prompt set: FILE[:field=F][:turn=K][:format=jsonl|json|text][:name=N] (JSONL, JSON array, one "
                 "prompt per line; .gz ok; repeat for several)");
  sub.add_option("--n-prompts", a->n_prompts, "use the first K prompts of each set (0 = all)")->capture_default_str();
  sub.add_option("-n,--n-predict", a->n_predict, "tokens to generate per prompt")->capture_default_str();
  sub.add_option("--spec", a->spec,
                 fmt::format("methods, comma-separated, each NAME[:KEY[=VALUE]...] (parameters are the method's "
                             "--NAME-KEY flags of `run`), or all; none is always included. Known: {}",
                             fmt::join(drafters::spec_methods(), ", ")))
      ->capture_default_str();
  sub.add_option("--method", a->method_args, "one more method variant: NAME[:KEY=VALUE,...] (repeatable)");
  sub.add_option("--budget", a->budgets,
                 "tree budgets (max nodes incl. root), comma-separated; own = each drafter's own size (default), "
                 "dynamic or auto = the budget controller (as in run and serve)")
      ->capture_default_str();
  sub.add_option("--batch", a->batches, "batch sizes (sequences decoded together), comma-separated")
      ->capture_default_str();
  sub.add_option("-r,--repetitions", a->reps, "repetitions (medians reported)")->capture_default_str();
  sub.add_option("-t,--threads", a->n_threads, "threads (default: all cores)");
  sub.add_option("-c,--ctx-size", a->n_ctx, "limit on prompt + generated tokens (default: model's, at most 4096)");
  sub.add_option("--max-prompt-tokens", a->max_prompt_tokens,
                 "cut longer prompts to BOS + their last K-1 tokens (0 = off)")
      ->capture_default_str();
  sub.add_flag("--ignore-eos", a->ignore_eos, "always generate -n tokens");
  sub.add_flag("--no-warmup", a->no_warmup, "skip the short untimed warm-up pass");
  sub.add_flag("--no-membw", a->no_membw, "do not measure DRAM bandwidth before the sweep");
  sub.add_flag("--membw", a->membw, "only measure DRAM read bandwidth with 1 and N threads, then exit");
  sub.add_option("--membw-mib", a->membw_mib, "bandwidth probe buffer size in MiB")->capture_default_str();
  sub.add_option("--json", a->json_out, "write the report JSON here (schema: docs/benchmarks.md)");
  sub.add_option("--csv", a->csv_out, "write one CSV row per cell here");
  sub.add_option("--plot", a->plot_dir, "write SVG charts into this directory");
  sub.add_option("-o,--output", a->output, "stdout format: md | csv | json")->capture_default_str();
  sub.add_option("--compare", a->compare, "print the ratio table between two reports: A.json B.json")->expected(2);
  sub.add_option("--from", a->from, "render tables and plots from a saved report instead of running");
  sub.add_flag("--no-progress", a->no_progress, "no progress bar on stderr");
  sub.add_option("--pp", a->pp,
                 "llama-bench mode: prompt processing tests of these lengths, comma-separated (e.g. 512); "
                 "prints llama-bench's table (median, min-max, sd) instead of the method sweep");
  sub.add_option("--tg", a->tg, "llama-bench mode: generation tests of these lengths, comma-separated (e.g. 128)");
  sub.add_option("--ubatch-size", a->n_batch,
                 "llama-bench mode: rows per prompt-processing forward pass (-ub works too)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cli::add_cache_type_options(sub, a->cache_type_k, a->cache_type_v);
  a->app = &sub;
  cli::add_sampling_options(sub, a->sampling);
  return [a] { return run_bench_cmd(*a); };
}

}  // namespace

TREESPEC_COMMAND("bench", "Benchmark speculative methods side by side (tables, CSV, JSON, SVG plots)", setup_bench);
