#include "golden.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/llama2c.h"
#include "test_util.h"

namespace treespec::test {

std::vector<Golden> load_goldens() {
  std::ifstream f(shared_dir() + "/models/golden/stories260K_greedy.jsonl");
  std::vector<Golden> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    Golden g;
    g.prompt = j.at("prompt");
    g.steps = j.at("steps");
    g.prompt_tokens = j.at("prompt_tokens").get<std::vector<int32_t>>();
    g.generated_tokens = j.at("generated_tokens").get<std::vector<int32_t>>();
    g.stopped_on_bos = j.at("stopped_on_bos");
    g.stdout_text = j.value("stdout", "");
    out.push_back(std::move(g));
  }
  return out;
}

std::string stories_gguf() {
  static std::once_flag once;
  static std::string path;
  std::call_once(once, [] {
    const auto dir = std::filesystem::path(TREESPEC_BINARY_DIR) / "test_models";
    std::filesystem::create_directories(dir);
    path = (dir / ("stories260K." + std::to_string(::getpid()) + ".gguf")).string();
    gguf::Llama2cConvertOptions opts;
    opts.name = "stories260K";
    gguf::convert_llama2c_files(shared_dir() + "/models/stories260K/stories260K.bin",
                                shared_dir() + "/models/stories260K/tok512.bin", path, opts);
    std::atexit([] { std::filesystem::remove(path); });
  });
  return path;
}

std::string stories_with_chat_template(const std::string& jinja, const std::string& file_name) {
  const auto src = gguf::GgufFile::open(stories_gguf());
  gguf::GgufWriter w(src->version());
  for (const auto& [key, value] : src->metadata()) {
    if (key != "general.alignment") w.set(key, value);
  }
  w.set("tokenizer.chat_template", gguf::Value::string(jinja));
  for (const auto& t : src->tensors()) w.add_tensor(t.name, t.type, t.ne, t.data, t.nbytes);
  const std::string path = temp_dir() + "/" + file_name;
  w.write(path);
  return path;
}

StoriesModel load_stories() {
  StoriesModel m;
  m.model = model::Model::load(stories_gguf());
  m.tok = tokenizer::Tokenizer::from_gguf(m.model->gguf());
  return m;
}

std::vector<Golden> decode_goldens(int32_t n_seq) {
  auto goldens = load_goldens();
  if (const char* env = std::getenv("TREESPEC_TEST_GOLDENS"); env && *env) {
    const long n = std::max<long>({std::strtol(env, nullptr, 10), static_cast<long>(n_seq), 1});
    goldens.resize(std::min(goldens.size(), static_cast<size_t>(n)));
  }
  return goldens;
}

engine::SpecStats expect_goldens(const StoriesModel& m, const DrafterMaker& make, int32_t n_seq, int32_t n_threads,
                                 const std::function<void(engine::Engine&)>& setup) {
  EXPECT_EQ(load_goldens().size(), 10u);
  const auto goldens = decode_goldens(n_seq);
  engine::EngineParams ep;
  ep.n_threads = n_threads;
  ep.n_ctx = 256;
  ep.n_slots = n_seq;
  engine::Engine eng(*m.model, ep);
  eng.set_eog_ids(m.tok->eog_ids());
  if (setup) setup(eng);
  engine::SpecStats total;
  for (size_t b = 0; b < goldens.size(); b += static_cast<size_t>(n_seq)) {
    std::vector<std::unique_ptr<engine::Sequence>> seqs;
    std::vector<engine::Sequence*> ptrs;
    for (size_t i = b; i < goldens.size() && i < b + static_cast<size_t>(n_seq); ++i) {
      const Golden& g = goldens[i];
      const auto ids = m.tok->encode(g.prompt, true, false);
      EXPECT_EQ(ids, g.prompt_tokens) << "prompt " << i;
      engine::SequenceParams sp;
      sp.sampling.temp = 0.0f;
      sp.n_predict = g.n_predict();
      seqs.push_back(std::make_unique<engine::Sequence>(ids, sp, make(*m.model)));
      EXPECT_TRUE(eng.add(*seqs.back()).ok());
      ptrs.push_back(seqs.back().get());
    }
    for (int guard = 0; guard < 10000; ++guard) {
      bool all = true;
      for (auto* s : ptrs) all &= s->finished();
      if (all) break;
      eng.step(ptrs);
    }
    for (size_t k = 0; k < seqs.size(); ++k) {
      const Golden& g = goldens[b + k];
      EXPECT_EQ(seqs[k]->generated(), g.generated_tokens)
          << "prompt " << (b + k) << " '" << g.prompt << "' with drafter " << seqs[k]->drafter().name();
      total.merge(seqs[k]->stats());
    }
  }
  return total;
}

}  // namespace treespec::test
