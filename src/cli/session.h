// How `treespec run` turns options into a decoding: load the model and its tokenizer,
// size the engine, build the sequence with its drafter and the tree-budget policy. The
// C API (src/capi) builds its generations through the same functions, so a library
// caller and `treespec run` decode identically for identical settings.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/options.h"
#include "drafters/factory.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace treespec::cli {

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  double load_s = 0.0;  // seconds to load both
};

// Loads the GGUF and its tokenizer. FormatError naming the file when the tokenizer's
// vocabulary size differs from the model's; the loaders' own errors name the file too.
LoadedModel load_model(const std::string& path);

// -t/-c/-b resolved as run, serve and bench do (InvalidArgument naming the flag).
engine::EngineParams resolve_engine_params(const ModelOptions& o, const model::Hparams& hp);

// Sampling, verification mode and length limits of one sequence. n_predict: -1 =
// unlimited, otherwise >= 0 (InvalidArgument); values beyond INT32_MAX are clamped.
engine::SequenceParams resolve_sequence_params(const SamplingOptions& o, int64_t n_predict, bool ignore_eos);

// A sequence ready for Engine::generate/add, and the budget policy `spec` asks for
// (already installed on the engine; it must outlive the decoding).
struct PreparedSequence {
  std::unique_ptr<engine::Sequence> seq;
  std::unique_ptr<engine::BudgetPolicy> policy;
};

// A sequence on `ids` with the drafter of `spec` (drafters::make_drafter, seeded with the
// sampling seed); sets the engine's end-of-generation ids from the tokenizer.
std::unique_ptr<engine::Sequence> make_sequence(engine::Engine& eng, const LoadedModel& m, std::vector<int32_t> ids,
                                                const engine::SequenceParams& sp, const drafters::SpecConfig& spec);

// make_sequence plus the budget policy of `spec`, installed on the engine.
PreparedSequence prepare_sequence(engine::Engine& eng, const LoadedModel& m, std::vector<int32_t> ids,
                                  const engine::SequenceParams& sp, const drafters::SpecConfig& spec);

}  // namespace treespec::cli
