#include "cli/options.h"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "chat/builtin_formats.h"
#include "core/files.h"
#include "core/thread_pool.h"
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

void add_spec_options(CLI::App& app, drafters::SpecConfig& c) {
  app.add_option("--spec", c.method, fmt::format("speculative method: {}", fmt::join(drafters::spec_methods(), " | ")))
      ->capture_default_str();
  app.add_option("--lookup-ngram-min", c.lookup.ngram_min, "lookup: shortest n-gram matched")->capture_default_str();
  app.add_option("--lookup-ngram-max", c.lookup.ngram_max, "lookup: longest n-gram matched")->capture_default_str();
  app.add_option("--lookup-draft", c.lookup.draft_len, "lookup: tokens per continuation")->capture_default_str();
  app.add_option("--lookup-branches", c.lookup.max_branches, "lookup: continuations merged into the tree")
      ->capture_default_str();
  auto& p = c.ptd;
  app.add_option("--ptd-depth", p.max_depth,
                 "ptd: draft subtree height that slides; draft depth that starts pool insertion")
      ->capture_default_str();
  app.add_option("--ptd-width", p.width, "ptd: children per draft node")->capture_default_str();
  app.add_option("--ptd-spine", p.spine, "ptd: spine length of the draft tree")->capture_default_str();
  app.add_option("--ptd-init-depth", p.init_depth, "ptd: seed chains have random length 1..N (0 = no seeds)")
      ->capture_default_str();
  app.add_option("--ptd-seeds", p.n_seeds, "ptd: seed chains drawn from the prompt")->capture_default_str();
  app.add_option("--ptd-trie-cap", p.trie_cap, "ptd: nodes per pool trie before its oldest branch is dropped")
      ->capture_default_str();
  app.add_option("--ptd-eos-climb", p.eos_climb, "ptd: EOS pruning cuts the ancestor this many levels up")
      ->capture_default_str();
  app.add_option("--ptd-draft-rows", p.max_draft_rows, "ptd: max draft-tree rows per step")->capture_default_str();
  app.add_option("--ptd-trie-rows", p.max_trie_rows, "ptd: max guess-trie rows per step")->capture_default_str();
  app.add_option("--ptd-real-eos", p.real_eos,
                 "ptd fix: EOS pruning at the model's end-of-generation ids (0 = reference: id 2)")
      ->capture_default_str();
  app.add_option("--ptd-reinsert", p.reinsert,
                 "ptd fix: re-insert verified trie subtrees under their own tokens (0 = reference)")
      ->capture_default_str();
  app.add_option("--ptd-live-feedback", p.live_feedback,
                 "ptd fix: guesses and feedback on the live trie (0 = reference: snapshot replacement)")
      ->capture_default_str();
  app.add_option("--lookahead-n", c.lookahead.ngram, "lookahead: n-gram size N (window levels + 1)")
      ->capture_default_str();
  app.add_option("--lookahead-w", c.lookahead.window, "lookahead: Jacobi window width W")->capture_default_str();
  app.add_option("--lookahead-g", c.lookahead.guess, "lookahead: n-grams kept per first token and verified per step G")
      ->capture_default_str();
  app.add_option("--heads,--medusa-heads,--auto-heads", c.medusa.heads_path,
                 "medusa (and auto's Medusa arms): heads file (default: heads stored in the model file)");
  app.add_option("--tree,--medusa-tree", c.medusa.tree,
                 "medusa: tree shape: auto:N (best-first from the heads' calibration, N nodes incl. root), a name in "
                 "the tree file (e.g. medusa_mc_sim_7b_63), FILE.json or FILE.json:NAME")
      ->capture_default_str();
  app.add_option("--tree-file,--medusa-tree-file", c.medusa.tree_file,
                 "medusa: tree choices JSON for --tree NAME (default: $TREESPEC_SHARED/data/tree_choices.json, "
                 "../shared/data/tree_choices.json)");
  app.add_option("--tree-nodes,--medusa-tree-nodes", c.medusa.tree_nodes,
                 "medusa: keep only the first N tree nodes incl. the root (0 = all)")
      ->capture_default_str();
  app.add_option("--medusa-topk", c.medusa.top_k, "medusa: candidates per head")->capture_default_str();
  // ProPD (docs/propd.md): Medusa heads (--heads / --propd-heads), early pruning, dynamic trees.
  app.add_option("--propd-heads", c.propd.heads_path,
                 "propd: Medusa + prune heads file (default: --heads, then the model file)");
  app.add_option("--propd-nmax", c.propd.n_max, "propd: largest tree Nmax (nodes incl. the root)")
      ->capture_default_str();
  app.add_option("--propd-interval", c.propd.interval, "propd: steps between re-plans and tree rebuilds (R)")
      ->capture_default_str();
  app.add_flag("--propd-no-prune,--no-prune", c.propd.no_prune, "propd: no early pruning (ablation)");
  app.add_flag("--propd-static-tree,--static-tree", c.propd.static_tree,
               "propd: fixed Nmax tree, no dynamic sizing (ablation)");
  app.add_option("--propd-tree", c.propd.tree,
                 "propd --static-tree: the tree (a --tree spec; default: best-first from the calibration)");
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
  app.add_option(
      "--budget", c.budget.budget,
      "tree budget: N nodes, or dynamic (alias auto: the latency-model controller); default: each drafter's own size");
  app.add_option("--budget-nmax", c.budget.n_max, "dynamic budget: largest tree per sequence")->capture_default_str();
  app.add_option("--budget-interval", c.budget.interval, "dynamic budget: steps between re-plans")
      ->capture_default_str();
  app.add_flag("--budget-no-probe{false}", c.budget.probe, "dynamic budget: skip the start-up latency sweep");
  // --spec auto (docs/auto.md).
  app.add_option(
      "--auto-arms", c.automatic.arms,
      "auto: methods to choose from, a comma list of none, lookup, ptd, medusa, draft (default: none, lookup, ptd, "
      "medusa when heads are given or in the model, draft when -md or --draft-layers is given)");
  app.add_option(
         "--auto-explore", c.automatic.explore,
         "auto: share of decode time spent on trials of the arms that cannot be graded without running (ptd, draft)")
      ->capture_default_str();
  app.add_option("--auto-trial", c.automatic.trial_steps, "auto: consecutive steps per trial of an arm")
      ->capture_default_str();
  app.add_option("--auto-shadow-every", c.automatic.shadow_every,
                 "auto: Medusa's heads run for one sequence every N-th step (4x rarer while Medusa is far from the "
                 "best), so its arms are graded while another drafts")
      ->capture_default_str();
  auto& d = c.draft;
  app.add_option("--model-draft,--draft-model", d.model_path,
                 "draft: draft model GGUF with the target's vocabulary (llama.cpp -md)");
  app.add_option("--draft-layers", d.layers,
                 "draft: run only these layers of the draft model, e.g. 0,1 or 0-2,4; '+' also separates items, e.g. "
                 "0-2+4 (without -md: self-drafting with the "
                 "target's own layers, final norm and output)");
  app.add_option("--draft-max,--draft,--draft-n", d.n_draft_max, "draft: tokens per chain / tree depth")
      ->capture_default_str();
  app.add_option("--draft-min,--draft-n-min", d.n_draft_min, "draft: drafts shorter than this are not verified")
      ->capture_default_str();
  app.add_option(
         "--draft-p-min", d.p_min,
         "draft: stop below a node when the draft probability of its children (chain: the top token) is below this")
      ->capture_default_str();
  app.add_flag("--draft-tree", d.tree, "draft: draft a tree (branches where the draft's other candidates are likely)");
  app.add_option("--draft-p-split", d.p_split,
                 "draft tree: a non-top candidate with this draft probability becomes a branch")
      ->capture_default_str();
  app.add_option("--draft-tree-nodes", d.n_tree_nodes, "draft tree: nodes incl. the root (when no budget is set)")
      ->capture_default_str();
  app.add_option("--draft-tree-width", d.tree_width, "draft tree: nodes expanded per draft forward pass")
      ->capture_default_str();
}

namespace {

// The methods a given flag applies to, the one it selects first; empty: any method.
std::vector<std::string> methods_of(const std::string& name, bool prune) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  // --spec auto takes the options of the methods it chooses from (its arms).
  if (starts("--auto-")) return {"auto"};
  if (starts("--lookup-")) return {"lookup", "auto"};
  if (starts("--lookahead-")) return {"lookahead"};
  if (starts("--ptd-")) return {"ptd", "auto"};
  if (starts("--draft-") || name == "--model-draft") return {"draft", "auto"};
  if (name == "--tree" || name == "--tree-nodes") return {"medusa", "auto"};
  if (name == "--medusa-topk" || name == "--tree-file") return {"medusa", "propd", "auto"};
  // --prune reads the prune heads of a heads file with any method.
  if (name == "--heads")
    return prune ? std::vector<std::string>{} : std::vector<std::string>{"medusa", "propd", "auto"};
  if (name == "--propd-heads") return prune ? std::vector<std::string>{} : std::vector<std::string>{"propd"};
  if (starts("--propd-")) return {"propd"};
  return {};
}

std::string flag_label(const std::string& name) { return name == "--model-draft" ? "-md/--model-draft" : name; }

std::string spec_list(const std::vector<std::string>& methods) {
  std::vector<std::string> s;
  for (const auto& m : methods) s.push_back("--spec " + m);
  return fmt::format("{}", fmt::join(s, " or "));
}

void check_readable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  if (!std::ifstream(path, std::ios::binary)) throw IoError(fmt::format("{}: cannot open '{}'", flag, path));
}

}  // namespace

void resolve_spec_method(const CLI::App& app, drafters::SpecConfig& c) {
  const bool named = app.get_option("--spec")->count() > 0 || c.method != "none";
  std::vector<std::string> allowed;  // methods every given flag applies to (unnamed method)
  std::string first;                 // the flag that started `allowed`
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0) continue;
    const std::vector<std::string> ms = methods_of(o->get_name(), c.prune.enabled);
    if (ms.empty()) continue;
    const std::string flag = flag_label(o->get_name());
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
  check_readable(c.draft.model_path, "-md/--model-draft");
  check_readable(c.medusa.heads_path, "--heads");
  check_readable(c.propd.heads_path, "--propd-heads");
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
