#include "cli/options.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "chat/builtin_formats.h"
#include "core/files.h"
#include "core/thread_pool.h"
#include "drafters/registry.h"
#include "grammar/json_schema.h"
#include "treespec/status.h"

namespace treespec::cli {

void add_model_options(CLI::App& app, ModelOptions& o) {
  app.add_option("-m,--model", o.model, "GGUF model file")->required();
  app.add_option("-t,--threads", o.n_threads, "threads (default: all cores)");
  app.add_option("-c,--ctx-size", o.n_ctx,
                 "context size in tokens: per sequence for run and bench, the KV cache pool all slots share for serve "
                 "(default: the model's, at most 4096)");
  app.add_option("-b,--batch-size", o.n_batch, "prompt processing chunk size")->capture_default_str();
  add_cache_type_options(app, o.cache_type_k, o.cache_type_v);
}

void add_cache_type_options(CLI::App& app, std::string& type_k, std::string& type_v) {
  app.add_option("--cache-type-k", type_k,
                 fmt::format("KV cache type for K: {} (-ctk works too)", kv::cache_type_names()))
      ->capture_default_str();
  app.add_option("--cache-type-v", type_v,
                 fmt::format("KV cache type for V: {} (-ctv works too)", kv::cache_type_names()))
      ->capture_default_str();
}

void add_chat_template_options(CLI::App& app, std::string& family, std::string& template_file) {
  app.add_option("--chat-template", family,
                 fmt::format("built-in chat format instead of the GGUF's Jinja template: {}",
                             fmt::join(chat::chat_family_names(), " | ")));
  app.add_option("--chat-template-file", template_file, "Jinja2 chat template file instead of the GGUF's");
}

void add_sampling_options(CLI::App& app, SamplingOptions& o) {
  app.add_option("--temp", o.params.temp, "temperature (0 = greedy)")->capture_default_str();
  app.add_option("--top-k", o.params.top_k, "top-k (0 = off)")->capture_default_str();
  app.add_option("--top-p", o.params.top_p, "top-p (1 = off)")->capture_default_str();
  app.add_option("--min-p", o.params.min_p, "min-p (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", o.params.repeat_penalty,
                 "penalize tokens of the last --repeat-last-n (llama.cpp's; 1 = off); speculation stays lossless")
      ->capture_default_str();
  app.add_option("--repeat-last-n", o.params.repeat_last_n,
                 "tokens the penalties look back on (0 = off, -1 = the whole context)")
      ->capture_default_str();
  app.add_option("--presence-penalty", o.params.presence_penalty,
                 "subtract from tokens present in that window (0 = off)")
      ->capture_default_str();
  app.add_option("--frequency-penalty", o.params.frequency_penalty, "subtract per occurrence in that window (0 = off)")
      ->capture_default_str();
  app.add_option("--typical", o.params.typical_p,
                 "locally typical sampling, parameter p (1 = off; after top-k, before top-p)")
      ->capture_default_str();
  app.add_option("-l,--logit-bias", o.logit_bias,
                 "TOKEN_ID(+|-)BIAS added to the token's logit, e.g. 15043+1 or 15043-inf (a ban); repeatable")
      ->expected(1)
      ->take_all();
  app.add_option("-s,--seed", o.seed, "RNG seed (-1 = random)")->capture_default_str();
  app.add_option("--verify", o.verify,
                 "tree verification at temp > 0: coupled (exact distribution, the same tokens as --spec none for a "
                 "seed) | lossless (exact distribution, rejection sampling) | typical (Medusa, lossy) | "
                 "ptd-reference (the PTD reference code's walk with argmax fallback, lossy; for measuring PTD)")
      ->capture_default_str();
  app.add_option("--typical-threshold", o.typical.threshold, "typical acceptance epsilon (lossy mode)")
      ->capture_default_str();
  app.add_option("--typical-alpha", o.typical.alpha, "typical acceptance delta (lossy mode)")->capture_default_str();
}

void add_grammar_options(CLI::App& app, GrammarOptions& o) {
  app.add_option("--grammar", o.grammar,
                 "GBNF grammar (llama.cpp's syntax) every generated token must follow; speculation stays lossless");
  app.add_option("--grammar-file", o.grammar_file, "file with a GBNF grammar");
  app.add_option("-j,--json-schema", o.json_schema, "JSON Schema the output must follow (converted to a grammar)");
  app.add_option("--json-schema-file", o.json_schema_file, "file with a JSON Schema (-jf works too)");
}

std::shared_ptr<const grammar::Grammar> resolve_grammar(const GrammarOptions& o) {
  const std::pair<const char*, const std::string*> given[] = {{"--grammar", &o.grammar},
                                                              {"--grammar-file", &o.grammar_file},
                                                              {"-j/--json-schema", &o.json_schema},
                                                              {"-jf/--json-schema-file", &o.json_schema_file}};
  const char* flag = nullptr;
  for (const auto& [name, value] : given) {
    if (value->empty()) continue;
    if (flag) throw InvalidArgument(fmt::format("give one of {} and {}, not both", flag, name));
    flag = name;
  }
  if (!flag) return nullptr;
  try {
    if (!o.grammar.empty()) return grammar::Grammar::parse(o.grammar);
    if (!o.grammar_file.empty()) return grammar::Grammar::parse(core::read_text_file(o.grammar_file, "--grammar-file"));
    const std::string text =
        !o.json_schema.empty() ? o.json_schema : core::read_text_file(o.json_schema_file, "-jf/--json-schema-file");
    nlohmann::ordered_json schema;  // properties keep the order they were written in
    try {
      schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw InvalidArgument(fmt::format("not valid JSON: {}", e.what()));
    }
    return grammar::Grammar::parse(grammar::json_schema_to_gbnf(schema));
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw InvalidArgument(fmt::format("{}: {}", flag, e.what()));
  }
}

namespace {

// A method's flags (drafters/registry.h) as CLI11 options.
class Cli11Sink final : public drafters::OptionSink {
 public:
  explicit Cli11Sink(CLI::App& app) : app_(app) {}
  void value(const drafters::OptionDesc& d, int32_t& v) override { add(d, v); }
  void value(const drafters::OptionDesc& d, float& v) override { add(d, v); }
  void value(const drafters::OptionDesc& d, double& v) override { add(d, v); }
  void value(const drafters::OptionDesc& d, std::string& v) override { add(d, v); }
  void value(const drafters::OptionDesc& d, bool& v) override { add(d, v); }
  void flag(const drafters::OptionDesc& d, bool& v, bool sets_false) override {
    app_.add_flag(sets_false ? d.names + "{false}" : d.names, v, d.help);
  }

 private:
  template <class T>
  void add(const drafters::OptionDesc& d, T& v) {
    CLI::Option* o = app_.add_option(d.names, v, d.help);
    if (d.show_default) o->capture_default_str();
  }
  CLI::App& app_;
};

std::string method_list() {
  std::vector<std::string> lines;
  for (const drafters::MethodInfo& m : drafters::methods()) lines.push_back(fmt::format("  {}: {}", m.name, m.summary));
  return fmt::format("{}", fmt::join(lines, "\n"));
}

}  // namespace

void add_spec_options(CLI::App& app, drafters::SpecConfig& c) {
  app.add_option("--spec", c.method,
                 fmt::format("speculative method: {}\n{}", fmt::join(drafters::spec_methods(), " | "), method_list()))
      ->capture_default_str();
  // Each method's own flags, in the registry's order.
  Cli11Sink sink(app);
  for (const drafters::MethodInfo& m : drafters::methods()) {
    if (m.options) m.options(sink, c);
  }
  // Early pruning for any method.
  app.add_flag("--prune", c.prune.enabled,
               "prune any method's tree after an early layer (logit lens, or the heads file's prune heads)");
  app.add_option("--prune-layer,--propd-layer", c.prune.layer,
                 "pruning: layers before the test (0 = smallest with recall >= --prune-recall)")
      ->capture_default_str();
  app.add_option("--prune-k,--propd-k", c.prune.top_k,
                 fmt::format("pruning: keep children in the parent's top-k (0 = the heads file's, else {})",
                             drafters::kDefaultPruneK))
      ->capture_default_str();
  app.add_option("--prune-recall", c.prune.recall_target,
                 "pruning: default layer = smallest whose top-k recall of the final argmax reaches this")
      ->capture_default_str();
  app.add_flag("--prune-lens", c.prune.lens, "pruning: use the logit lens even where a trained prune head exists");
  // Tree budget policy for any method.
  app.add_option("--budget", c.budget.budget,
                 "tree budget: N nodes, or dynamic (alias auto: the latency-model controller); default: the method's "
                 "own choice (lookup, lookahead, ptd, propd, eagle: the controller; medusa, draft: their tree)");
  app.add_option("--budget-nmax", c.budget.n_max, "dynamic budget: largest tree per sequence")->capture_default_str();
  app.add_option("--budget-interval", c.budget.interval, "dynamic budget: steps between re-plans")
      ->capture_default_str();
  app.add_flag("--budget-no-probe{false}", c.budget.probe, "dynamic budget: skip the start-up latency sweep");
}

namespace {

std::string spec_list(const std::vector<std::string>& methods) {
  std::vector<std::string> s;
  s.reserve(methods.size());
  for (const auto& m : methods) s.push_back("--spec " + m);
  return fmt::format("{}", fmt::join(s, " or "));
}

}  // namespace

void resolve_spec_method(const CLI::App& app, drafters::SpecConfig& c) {
  const bool named = app.get_option("--spec")->count() > 0 || c.method != "none";
  std::vector<std::string> allowed;  // methods every given flag applies to (unnamed method)
  std::string first;                 // the flag that started `allowed`
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0) continue;
    const std::vector<std::string> ms = drafters::flag_methods(o->get_name(), c.prune.enabled);
    if (ms.empty()) continue;
    const std::string flag = drafters::flag_label(o->get_name());
    if (named) {
      if (std::find(ms.begin(), ms.end(), c.method) == ms.end()) {
        throw InvalidArgument(
            fmt::format("{} is an option of {}; it does nothing with --spec {}", flag, spec_list(ms), c.method));
      }
      continue;
    }
    // Without --spec a flag selects its own method, never auto (two methods' flags stay an error).
    std::vector<std::string> own = ms;
    own.erase(std::remove(own.begin(), own.end(), std::string("auto")), own.end());
    if (own.empty())
      throw InvalidArgument(fmt::format("{} is an option of --spec auto; name the method with --spec auto", flag));
    if (first.empty()) {
      allowed = own;
      first = flag;
      continue;
    }
    std::vector<std::string> both;
    for (const auto& m : allowed) {
      if (std::find(own.begin(), own.end(), m) != own.end()) both.push_back(m);
    }
    if (both.empty()) {
      throw InvalidArgument(fmt::format("{} selects {} but {} is an option of {}; name the method with --spec", first,
                                        spec_list(allowed), flag, spec_list(own)));
    }
    allowed = std::move(both);
  }
  if (!named && !allowed.empty()) c.method = allowed.front();
  for (const drafters::MethodInfo& m : drafters::methods()) {
    if (m.check_files) m.check_files(c);
  }
}

drafters::SpecConfig resolve_method_spec(const bench::MethodSpec& m) {
  drafters::SpecConfig cfg;
  cfg.method = m.name;  // named: flags of other methods are errors
  CLI::App app{"method parameters"};
  add_spec_options(app, cfg);
  std::vector<std::string> args = m.to_flags();
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    std::vector<std::string> known;
    const std::string prefix = "--" + m.name + "-";
    for (const CLI::Option* o : app.get_options()) {
      for (const std::string& ln : o->get_lnames()) {
        const std::string n = "--" + ln;
        if (n.rfind(prefix, 0) == 0)
          known.push_back(n.substr(prefix.size()) + (o->get_expected_min() > 0 ? "=..." : ""));
      }
    }
    throw InvalidArgument(fmt::format("method spec '{}': {} (parameters of {}: {})", m.label, e.what(), m.name,
                                      known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
  }
  try {
    resolve_spec_method(app, cfg);
  } catch (const IoError& e) {  // an unreadable file stays an I/O error
    throw IoError(fmt::format("method spec '{}': {}", m.label, e.what()));
  } catch (const Error& e) {
    throw InvalidArgument(fmt::format("method spec '{}': {}", m.label, e.what()));
  }
  return cfg;
}

drafters::SpecConfig spec_config_from_string(std::string_view text) {
  const bool blank = text.find_first_not_of(" \t\r\n") == std::string_view::npos;
  const bench::MethodSpec m = bench::parse_method_item(blank ? std::string_view("none") : text);
  const auto known = drafters::spec_methods();
  if (std::find(known.begin(), known.end(), m.name) == known.end()) {
    throw InvalidArgument(
        fmt::format("unknown speculative method '{}' in '{}' (known: {})", m.name, text, fmt::join(known, ", ")));
  }
  if (m.name == "none" && !m.params.empty())
    throw InvalidArgument(fmt::format("method 'none' takes no parameters (got '{}')", text));
  return resolve_method_spec(m);
}

int32_t resolve_threads(int32_t n_threads) {
  // 0 means "all cores" (the default); a negative count is a mistake, not a request for
  // the default as in llama.cpp, so it is refused.
  if (n_threads < 0) {
    throw InvalidArgument(
        fmt::format("-t/--threads must be a positive thread count or 0 (all cores), got {}", n_threads));
  }
  if (n_threads == 0) return core::hardware_threads();
  if (n_threads > 1024) throw InvalidArgument(fmt::format("-t/--threads {} is more than 1024", n_threads));
  return n_threads;
}

sampling::LogitBias parse_logit_bias_flag(std::string_view item) {
  const size_t sign = item.find_first_of("+-");
  const bool id_ok = sign != std::string_view::npos && sign > 0 &&
                     std::all_of(item.begin(), item.begin() + static_cast<std::ptrdiff_t>(sign),
                                 [](char c) { return c >= '0' && c <= '9'; });
  const std::string value(item.substr(id_ok ? sign : 0));
  float bias = 0.0f;
  size_t used = 0;
  try {
    bias = id_ok ? std::stof(value, &used) : 0.0f;
  } catch (const std::exception&) {
    used = 0;
  }
  if (!id_ok || used != value.size() || std::isnan(bias) || value.size() < 2) {
    throw InvalidArgument(
        fmt::format("-l/--logit-bias '{}': expected TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 15043-inf", item));
  }
  int64_t id = 0;
  try {
    id = std::stoll(std::string(item.substr(0, sign)));
  } catch (const std::exception&) {
    id = -1;
  }
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument(fmt::format("-l/--logit-bias '{}': token id {} is out of range", item, item.substr(0, sign)));
  }
  if (bias == std::numeric_limits<float>::infinity()) {
    throw InvalidArgument(fmt::format("-l/--logit-bias '{}': +inf is not a bias (-inf bans a token)", item));
  }
  return {static_cast<int32_t>(id), bias};
}

sampling::SamplingParams resolve_sampling(const SamplingOptions& o) {
  sampling::SamplingParams p = o.params;
  for (const std::string& item : o.logit_bias) p.logit_bias.push_back(parse_logit_bias_flag(item));
  if (o.seed < -1) throw InvalidArgument(fmt::format("--seed must be >= 0 or -1 (random), got {}", o.seed));
  // A drawn seed is reported (run --json, the summary line) and must be one -s accepts.
  p.seed = o.seed >= 0
               ? static_cast<uint64_t>(o.seed)
               : static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count()) >> 1;
  p.validate();
  return p;
}

verify::Mode resolve_verify(const SamplingOptions& o) {
  if (o.verify == "coupled") return verify::Mode::coupled;
  if (o.verify == "lossless") return verify::Mode::lossless;
  if (o.verify == "typical") return verify::Mode::typical;
  if (o.verify == "ptd-reference") return verify::Mode::ptd_reference;
  throw InvalidArgument(
      fmt::format("--verify must be 'coupled', 'lossless', 'typical' or 'ptd-reference', got '{}'", o.verify));
}

}  // namespace treespec::cli
