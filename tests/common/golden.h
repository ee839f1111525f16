// stories260K goldens: the converted model (made once per test binary from ../shared)
// and the reference greedy outputs, plus a checker every drafter's equality test uses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drafters/drafter.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace treespec::test {

struct Golden {
  std::string prompt;
  int32_t steps = 0;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> generated_tokens;
  bool stopped_on_bos = false;
  std::string stdout_text;
  // -n that reproduces the golden: steps - len(prompt_tokens) + 1.
  int32_t n_predict() const { return steps - static_cast<int32_t>(prompt_tokens.size()) + 1; }
};

std::vector<Golden> load_goldens();  // requires have_shared()

// Path of stories260K converted to GGUF (F32), created on first use in the build tree.
std::string stories_gguf();
// A copy of stories_gguf() with tokenizer.chat_template = jinja, written to
// temp_dir()/file_name (through our GGUF writer).
std::string stories_with_chat_template(const std::string& jinja, const std::string& file_name);

struct StoriesModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};
StoriesModel load_stories();

// The goldens a test that decodes every golden runs: all, or with TREESPEC_TEST_GOLDENS=N
// in the environment the first max(N, n_seq) (`make test-sanitize` sets 4: the same code
// on fewer prompts, still batched).
std::vector<Golden> decode_goldens(int32_t n_seq = 1);

// Runs every golden prompt of decode_goldens(n_seq) greedily (temp 0) through an Engine with the
// drafter made by `make` and checks prompt and generated tokens exactly; n_seq > 1 runs
// the prompts in batches of n_seq sequences stepped together. Returns the merged stats.
// `setup`, when given, sees the Engine before the first prompt (e.g. to install a
// budget policy).
using DrafterMaker = std::function<std::unique_ptr<drafters::Drafter>(const model::Model&)>;
engine::SpecStats expect_goldens(const StoriesModel& m, const DrafterMaker& make, int32_t n_seq = 1,
                                 int32_t n_threads = 1, const std::function<void(engine::Engine&)>& setup = {});

}  // namespace treespec::test
