// Option groups shared by run, bench and serve: model/context/threads, sampling, and the
// speculative method with each drafter's parameters (llama.cpp flag names where they exist).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "drafters/factory.h"
#include "engine/engine.h"
#include "sampling/sampling.h"
#include "verify/verify.h"

namespace treespec::cli {

struct ModelOptions {
  std::string model;
  int32_t n_threads = 0;  // 0 = all available cores
  int32_t n_ctx = 0;      // 0 = model's training context (capped at 4096)
  int32_t n_batch = 512;
};

struct SamplingOptions {
  sampling::SamplingParams params;
  int64_t seed = -1;       // -1 = random
  std::string verify = "lossless";  // lossless | typical | ptd-reference
  verify::TypicalParams typical;
};

void add_model_options(CLI::App& app, ModelOptions& o);
void add_sampling_options(CLI::App& app, SamplingOptions& o);
void add_spec_options(CLI::App& app, drafters::SpecConfig& c);

// llama.cpp spells some flags as multi-letter words after one dash ("-np"), which CLI11
// rejects as option names; this rewrites such arguments to their long forms
// ("-np" -> "--parallel", "-md" -> "--model-draft") before parsing. Only whole
// arguments are rewritten.
std::vector<std::string> rewrite_llama_flags(int argc, char** argv);

// Resolves defaults and validates (InvalidArgument naming the flag).
int32_t resolve_threads(int32_t n_threads);
sampling::SamplingParams resolve_sampling(const SamplingOptions& o);
verify::Mode resolve_verify(const SamplingOptions& o);

}  // namespace treespec::cli
