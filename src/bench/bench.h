// `treespec bench`: sweeps models x prompt sets x batch sizes x methods x tree budgets
// x repetitions in ONE process and reports per cell throughput, speedup over plain
// decoding measured in the same run, acceptance, rows per step, time split, peak RSS
// and whether greedy outputs equal plain decoding token for token.
//
// Method of measurement (docs/benchmarks.md):
// - Decoding is greedy (temp 0) unless --temp is given; greedy and coupled sampling
//   (the default verifier at temp > 0) must reproduce `none` exactly; a difference is
//   recorded per cell and fails the run (exit code, message naming model, method,
//   prompt).
// - Repetition-major interleaving: within one (model, prompt set, batch) group, each
//   repetition runs every cell once, the order rotated by one each repetition, so slow
//   drift of a shared machine hits all methods alike; speedup is the median of
//   per-repetition ratios against `none` of the same repetition.
// - Batch size b: the prompts flow through one Engine with b slots, b sequences stepped
//   together; a finished sequence's slot is refilled with the next prompt (continuous
//   batching). Throughput counts decode steps only (prefill is reported apart), like
//   llama-bench's tg.
// The result is a JSON document (schema in docs/benchmarks.md, kSchemaVersion); tables,
// CSV and plots are rendered from it (report.h, plot.h), so a saved run re-renders.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/method_spec.h"
#include "bench/prompts.h"
#include "drafters/factory.h"
#include "sampling/sampling.h"
#include "tensor/dtype.h"
#include "verify/verify.h"

namespace treespec::bench {

constexpr int kSchemaVersion = 1;

struct BenchConfig {
  std::vector<std::string> models;  // GGUF paths
  std::vector<PromptSource> prompt_sources;
  int64_t n_prompts = 0;               // first K of each set; 0 = all
  int32_t n_predict = 128;             // tokens per prompt (fewer on end-of-generation)
  bool ignore_eos = false;             // always generate n_predict tokens
  int32_t max_prompt_tokens = 0;       // > 0: keep BOS + the last max-1 tokens of longer prompts
  std::vector<MethodSpec> methods;     // normalized: "none" first
  std::vector<int32_t> budgets = {0};  // tree budgets (max nodes incl. root); 0 = drafter's own
  std::vector<int32_t> batches = {1};
  int32_t reps = 3;
  int32_t n_threads = 1;
  int32_t n_ctx = 0;                          // limit on prompt + generated; 0 = model's (<= 4096)
  tensor::DType type_k = tensor::DType::f16;  // KV cache types (-ctk / -ctv)
  tensor::DType type_v = tensor::DType::f16;
  bool warmup = true;  // one short untimed pass of every cell per group
  bool measure_bandwidth = true;
  uint64_t bandwidth_bytes = uint64_t{256} << 20;
  double bandwidth_seconds = 0.3;
  std::string command;  // the command line, recorded in the JSON
  // Decoding: greedy by default. At temp > 0 with the coupled verifier every method must
  // still reproduce `none` token for token (same seed); with the other verifiers outputs
  // legitimately differ and are not compared (config.outputs_checked = false).
  sampling::SamplingParams sampling = greedy_sampling();
  verify::Mode verify = verify::Mode::coupled;
  verify::TypicalParams typical;
  static sampling::SamplingParams greedy_sampling() {
    sampling::SamplingParams p;
    p.temp = 0.0f;
    p.seed = 1;
    return p;
  }
  bool outputs_checked() const { return sampling.greedy() || verify == verify::Mode::coupled; }
};

// Identifies one cell of the sweep.
struct CellKey {
  std::string model;  // display name
  std::string prompt_set;
  int32_t batch = 1;
  std::string method;  // label
  int32_t budget = 0;
};

struct BenchHooks {
  // Method spec -> drafter configuration. Default: specs without parameters only.
  std::function<drafters::SpecConfig(const MethodSpec&)> resolve_spec;
  // Drafter construction. Default: drafters::make_drafter.
  std::function<std::unique_ptr<drafters::Drafter>(const drafters::SpecConfig&, const drafters::DrafterEnv&)>
      make_drafter;
  // Sees (and may alter) every finished sequence's generated tokens before they are
  // compared with `none`. A test seam: lets a test stand in for a broken method.
  std::function<void(const CellKey&, int64_t prompt_index, std::vector<int32_t>& tokens)> on_output;
  // Progress bar with ETA; nullptr = silent.
  FILE* progress = nullptr;
};

// The default resolve_spec: SpecConfig{method = spec.name}; InvalidArgument if the spec
// has parameters (only a caller that knows the drafters' flags can map those).
drafters::SpecConfig resolve_spec_without_params(const MethodSpec& spec);

// Runs the sweep and returns the report JSON. Errors in configuration or input throw
// (InvalidArgument / FormatError / IoError) before anything is timed. A greedy
// mismatch does not throw: it is recorded (cells[].greedy_match, mismatches,
// greedy_ok) and the caller fails loudly (greedy_failure_message, exit_code).
nlohmann::json run_bench(const BenchConfig& cfg, const BenchHooks& hooks = {});

// Measures DRAM read bandwidth with 1 and n threads (n <= 0: all cores) and returns the
// "membw" JSON object the report embeds.
nlohmann::json bandwidth_json(int32_t n_threads, uint64_t bytes, double seconds);

// One line per mismatching cell naming model, prompt set, batch, method, budget, prompt
// index, repetition and the first differing token; empty when greedy_ok.
std::string greedy_failure_message(const nlohmann::json& report);

// Process exit code for a report: 0, or kExitGreedyMismatch.
constexpr int kExitGreedyMismatch = 3;
int exit_code(const nlohmann::json& report);

}  // namespace treespec::bench
