// `treespec run --spec draft` with llama.cpp's flags (-md, --draft-max, --draft-p-min) and
// ours (--draft-layers, --draft-tree): same greedy tokens as --spec none, the drafter's
// counters in the JSON stats, a clear error for an incompatible draft; and `treespec
// bench` method specs (draft:layers=0-1:tree) reaching the same flags.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "model/quantize.h"

using namespace treespec;

namespace {

nlohmann::json run_json(const std::string& args) {
  std::string out;
  const std::string cmd = test::treespec_binary() + " run -m " + test::stories_gguf() +
                          " -t 1 -p 'Once upon a time' -n 48 --temp 0 --json " + args + " 2>&1";
  EXPECT_EQ(test::run_command(cmd, &out), 0) << cmd << "\n" << out;
  return nlohmann::json::parse(out);
}

}  // namespace

TEST(DraftCli, RunMatchesPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const std::string q8 = test::temp_dir() + "/q8.gguf";
  model::quantize_gguf(test::stories_gguf(), q8, tensor::DType::q8_0);
  const auto plain = run_json("--spec none");
  for (const std::string& args : {"--spec draft -md " + q8 + " --draft-max 6 --draft-p-min 0.5",
                                  "--spec draft --model-draft " + q8 + " --draft-tree --draft-tree-nodes 12",
                                  std::string("--spec draft --draft-layers 0-1 --draft-tree --draft-p-split 0.05"),
                                  std::string("--spec draft --draft-layers 0,1,2,4 --draft 4 --draft-min 2")}) {
    SCOPED_TRACE(args);
    const auto j = run_json(args);
    EXPECT_EQ(j.at("tokens"), plain.at("tokens"));
    const auto& st = j.at("stats");
    EXPECT_EQ(st.at("spec"), "draft");
    EXPECT_GT(st.at("num_accepted_tokens").get<int64_t>(), 0);
    EXPECT_GT(st.at("drafter").at("draft_forwards").get<double>(), 0.0);
  }
}

TEST(DraftCli, IncompatibleDraftIsOneClearError) {
  TREESPEC_REQUIRE_SHARED();
  const std::string tiny = test::temp_dir() + "/tiny.gguf";
  test::write_tiny_model(tiny, test::TinyModelConfig{});
  std::string out;
  const std::string cmd = test::treespec_binary() + " run -m " + test::stories_gguf() +
                          " -t 1 -p 'Once' -n 4 --spec draft -md " + tiny + " 2>&1";
  EXPECT_NE(test::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("vocabulary size differs (draft 64 tokens, target 512)"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::treespec_binary() + " run -m " + test::stories_gguf() +
                                  " -t 1 -p 'Once' -n 4 --spec draft 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("--draft-layers"), std::string::npos) << out;
}

TEST(DraftCli, BenchMethodSpecs) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  std::string out;
  const std::string cmd =
      test::treespec_binary() + " bench -m " + test::stories_gguf() + " --prompts " + test::shared_dir() +
      "/models/golden/stories260K_greedy.jsonl:name=golden --n-prompts 2 -n 16 -r 1 -t 1 " +
      "--spec none,draft:layers=0-1,draft:layers=0-1:tree:tree-nodes=10 --json " + dir + "/b.json 2>&1";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  const auto j = nlohmann::json::parse(test::read_file(dir + "/b.json"));
  int n_draft = 0;
  for (const auto& c : j.at("cells")) {
    if (c.at("method_name") != "draft") continue;
    ++n_draft;
    EXPECT_GT(c.at("mean_accepted_length").get<double>(), 1.0) << c.at("method");
  }
  EXPECT_EQ(n_draft, 2);
}
