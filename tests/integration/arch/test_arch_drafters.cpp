// Every drafter on every newer family (Qwen3, Gemma 2, Gemma 3, Phi-3 with and without
// LongRoPE, SmolLM3: Q/K norms, soft-capping, sliding windows, fused matrices, RoPE-free
// layers), end to end through the binary: `bench` at batch 1 and 3 and `run`, each
// method's greedy tokens equal plain greedy. Heads (Medusa + ProPD prune heads) are
// trained here on each tiny model; their quality only sets how often drafts are accepted,
// and equality must hold whatever they propose.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "common/arch_families.h"
#include "common/test_util.h"

using namespace treespec;
using nlohmann::json;

namespace {

const char* const kPrompts[] = {"Once upon a time there was", "The numbers 1234 and 5678 were",
                                "Hello world! How are you today?", "The quick brown fox jumps over"};

void sh(const std::string& cmd) {
  std::string out;
  ASSERT_EQ(test::run_command(cmd + " 2>&1", &out), 0) << cmd << "\n" << out;
}

class ArchDrafters : public ::testing::TestWithParam<test::Family> {};

TEST_P(ArchDrafters, EveryMethodEqualsPlainGreedy) {
  test::Family fam = GetParam();
  fam.cfg.tokenizer = "gpt2", fam.cfg.bpe_pre = "qwen2", fam.cfg.n_vocab = 320;
  fam.cfg.weight_scale = 1.0f;  // varied greedy text
  const std::string dir = test::temp_dir();
  const std::string model = dir + "/m.gguf", heads = dir + "/h.gguf", prompts = dir + "/p.txt";
  test::write_tiny_model(model, fam.cfg);
  {
    std::ofstream f(prompts);
    for (const char* p : kPrompts) f << p << "\n";
  }
  const std::string bin = test::treespec_binary();
  ASSERT_NO_FATAL_FAILURE(
      sh(bin + " train-heads -m " + model + " -o " + heads + " --prompts " + prompts +
         " --steps 40 --samples 16 --seq-len 32 --batch 64 --prune-layer 1 --prune-steps 30 -q -t 2"));
  const std::string report = dir + "/bench.json";
  ASSERT_NO_FATAL_FAILURE(sh(bin + " bench -m " + model + " --prompts " + prompts +
                             " -n 32 --batch 1,3 -r 1 --no-membw --no-progress --no-warmup -t 2 --temp 0"
                             " --spec none,lookup,lookahead,ptd,draft:layers=0+1 --method medusa:--heads=" +
                             heads + " --method propd:heads=" + heads + " --method auto:--heads=" + heads +
                             ",--draft-layers=0+1 --json " + report));
  std::ifstream f(report);
  const json j = json::parse(f);
  EXPECT_TRUE(j.at("greedy_ok").get<bool>());
  EXPECT_TRUE(j.at("config").at("outputs_checked").get<bool>());
  int n_cells = 0;
  double accepted_extra = 0;  // tokens beyond one per step, over all speculative cells
  for (const auto& cell : j.at("cells")) {
    ++n_cells;
    EXPECT_TRUE(cell.at("greedy_match").get<bool>())
        << fam.name << ": " << cell.at("method") << " at batch " << cell.at("batch");
    accepted_extra += cell.at("mean_accepted_length").get<double>() - 1.0;
  }
  EXPECT_EQ(n_cells, 16) << "8 methods x batch 1 and 3";
  EXPECT_GT(accepted_extra, 0.0) << "no drafts accepted: the trees were never exercised";

  // run: each method on the first prompt.
  auto run = [&](const std::string& flags) {
    std::string out;
    const std::string cmd = bin + " run -m " + model + " -p '" + kPrompts[0] + "' -n 32 --temp 0 -t 2 --json " + flags;
    EXPECT_EQ(test::run_command(cmd + " 2>/dev/null", &out), 0) << cmd;
    return json::parse(out).at("tokens");
  };
  const json plain = run("--spec none");
  for (const std::string flags :
       {"--spec lookup", "--spec lookahead", "--spec ptd", "--spec draft --draft-layers 0+1"}) {
    EXPECT_EQ(run(flags), plain) << fam.name << " " << flags;
  }
  for (const std::string spec : {"medusa", "propd"}) {
    EXPECT_EQ(run("--spec " + spec + " --heads " + heads), plain) << fam.name << " " << spec;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ArchDrafters, ::testing::ValuesIn(test::newer_families()),
                         [](const ::testing::TestParamInfo<test::Family>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
