// `treespec bench --pp 512 --tg 128`: llama-bench's two standard tests on a model, for
// side-by-side numbers with llama.cpp (benchmarks/vs_llama.py runs both interleaved).
//
//   ppN: prompt processing, N tokens from an empty context in chunks of n_batch rows
//        (as the engine prefills), logits for the last row of each chunk;
//   tgN: text generation, N one-row steps from an empty context;
// arbitrary token ids (the cost does not depend on them), one untimed warm-up run per
// test, `reps` timed runs: tokens per second as median, min, max and standard deviation.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/dtype.h"

namespace treespec::bench {

struct PpTgConfig {
  std::vector<std::string> models;
  std::vector<int32_t> pp;  // prompt lengths (ppN tests)
  std::vector<int32_t> tg;  // generation lengths (tgN tests)
  int32_t reps = 5;
  int32_t n_threads = 1;
  int32_t n_batch = 512;                      // rows per prefill forward pass
  tensor::DType type_k = tensor::DType::f16;  // KV cache types (llama-bench's -ctk / -ctv, f16 there too)
  tensor::DType type_v = tensor::DType::f16;
  bool warmup = true;
  std::string command;  // recorded in the report
};

// Runs every model x test; progress lines on `progress` (nullptr: quiet). Report JSON:
// {"kind": "pp_tg", "command", "machine", "config", "results": [{"model", "size_bytes",
// "n_params", "n_threads", "test", "n_prompt", "n_gen", "samples_ts", "median_ts",
// "min_ts", "max_ts", "stddev_ts"}]} (docs/benchmarks.md).
nlohmann::json run_pp_tg(const PpTgConfig& cfg, std::FILE* progress);

// llama-bench's table: model | size | params | threads | test | t/s (median) | min-max | sd.
std::string render_pp_tg_markdown(const nlohmann::json& report);

}  // namespace treespec::bench
