// Option groups shared by run, bench and serve: model/context/threads, sampling, and the
// speculative method with each drafter's parameters (llama.cpp flag names where they exist).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/method_spec.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "sampling/sampling.h"
#include "verify/verify.h"

// CLI11 is header-only and costs ~9 s per TU that includes it (~40 s under the
// sanitizers): only the files that build option tables include it (options.cpp and the
// tool's commands, via command.h), not the C API and the session code.
namespace CLI {
class App;
}

namespace treespec::cli {

struct ModelOptions {
  std::string model;
  int32_t n_threads = 0;  // 0 = all available cores
  int32_t n_ctx = 0;      // 0 = model's training context (capped at 4096)
  int32_t n_batch = 512;
  std::string cache_type_k = "f16";  // -ctk/--cache-type-k
  std::string cache_type_v = "f16";  // -ctv/--cache-type-v
};
// The -ctk / -ctv pair of one command, as tensor types (InvalidArgument naming the flag).
void add_cache_type_options(CLI::App& app, std::string& type_k, std::string& type_v);

struct SamplingOptions {
  sampling::SamplingParams params;
  int64_t seed = -1;               // -1 = random
  std::string verify = "coupled";  // coupled | lossless | typical | ptd-reference
  verify::TypicalParams typical;
  std::vector<std::string> logit_bias;  // -l/--logit-bias items, TOKEN_ID(+|-)BIAS (resolve_sampling parses them)
};

// One -l/--logit-bias item as llama.cpp writes it: TOKEN_ID followed by +BIAS or -BIAS,
// e.g. 15043+1, 15043-0.5, 15043-inf (a ban). InvalidArgument naming the flag.
sampling::LogitBias parse_logit_bias_flag(std::string_view item);

// Constrained output (docs/grammar.md): llama.cpp's --grammar, --grammar-file,
// -j/--json-schema and -jf/--json-schema-file; at most one of them.
struct GrammarOptions {
  std::string grammar;           // GBNF text
  std::string grammar_file;      // GBNF file
  std::string json_schema;       // JSON Schema text
  std::string json_schema_file;  // JSON Schema file
};
void add_grammar_options(CLI::App& app, GrammarOptions& o);
// The grammar they give (null when none), parsed before any model is loaded:
// InvalidArgument naming the flag for a bad grammar or schema or two of them at once,
// IoError naming the flag and path for an unreadable file.
std::shared_ptr<const grammar::Grammar> resolve_grammar(const GrammarOptions& o);

void add_model_options(CLI::App& app, ModelOptions& o);
// --chat-template NAME (a built-in format) and --chat-template-file F (Jinja2), which
// override the GGUF's template (chat/formatter.h); serve and chat.
void add_chat_template_options(CLI::App& app, std::string& family, std::string& template_file);
void add_sampling_options(CLI::App& app, SamplingOptions& o);
void add_spec_options(CLI::App& app, drafters::SpecConfig& c);

// After parsing `app` (which has add_spec_options): a drafter's own flags (-md, --heads,
// --draft-*, --ptd-*, ...) select their method when no method was named (--spec absent
// and c.method "none"), and are an InvalidArgument when the named method does not use
// them; never ignored. Then the files they name (-md, --heads, --propd-heads) must be
// readable (IoError naming the flag and the path), before any model is loaded.
void resolve_spec_method(const CLI::App& app, drafters::SpecConfig& c);

// Maps a method spec (bench/method_spec.h) onto the drafter flags `run` has
// (add_spec_options), so every drafter's parameters work without their callers knowing
// them: `lookup:draft=4` is `--spec lookup --lookup-draft 4`, `medusa:heads=F` is
// `--spec medusa --medusa-heads F` (= --heads F). Then resolve_spec_method. InvalidArgument
// naming the spec (and the method's parameters when one is unknown); IoError for an
// unreadable file it names.
drafters::SpecConfig resolve_method_spec(const bench::MethodSpec& m);

// One method string as the C API takes it: a --spec item, NAME[:KEY[=VALUE]...] (e.g.
// "ptd", "lookup:draft=4", "medusa:heads=FILE:tree=auto:16"); empty = "none". The name
// must be one of drafters::spec_methods() (InvalidArgument listing them).
drafters::SpecConfig spec_config_from_string(std::string_view text);

// Resolves defaults and validates (InvalidArgument naming the flag).
int32_t resolve_threads(int32_t n_threads);
sampling::SamplingParams resolve_sampling(const SamplingOptions& o);
verify::Mode resolve_verify(const SamplingOptions& o);

}  // namespace treespec::cli
