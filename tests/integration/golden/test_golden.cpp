// stories260K end to end: plain greedy and every training-free drafter reproduce the
// reference llama2.c goldens exactly, alone and in batches; `treespec run --json` too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/golden.h"
#include "common/test_util.h"
#include "drafters/factory.h"

using namespace treespec;

namespace {
test::DrafterMaker maker(const std::string& method) {
  return [method](const model::Model& m) {
    drafters::SpecConfig cfg;
    cfg.method = method;
    return drafters::make_drafter(cfg, drafters::DrafterEnv{&m, {}, 1});
  };
}
}  // namespace

TEST(Golden, PlainGreedyMatchesReference) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto st = test::expect_goldens(m, maker("none"));
  EXPECT_DOUBLE_EQ(st.mean_accepted_length(), 1.0);
}

TEST(Golden, PlainGreedyTwoThreadsMatchesReference) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  test::expect_goldens(m, maker("none"), 1, 2);
}

TEST(Golden, LookupMatchesPlainGreedy) {
  TREESPEC_REQUIRE_SHARED();
  const auto m = test::load_stories();
  const auto st = test::expect_goldens(m, maker("lookup"));
  EXPECT_GT(st.mean_accepted_length(), 1.2);  // it does speculate
  const auto st4 = test::expect_goldens(m, maker("lookup"), 4);
  EXPECT_GT(st4.n_accepted, 0);
}

TEST(Golden, RunJsonReproducesEveryGolden) {
  TREESPEC_REQUIRE_SHARED();
  const std::string model = test::stories_gguf();
  for (const auto& g : test::load_goldens()) {
    std::string out;
    const std::string prompt = test::shell_quote(g.prompt);
    const std::string cmd = test::treespec_binary() + " run -m " + model + " -p " + prompt + " -n " +
                            std::to_string(g.n_predict()) + " --temp 0 -t 1 --json";
    ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j.at("prompt_tokens").get<std::vector<int32_t>>(), g.prompt_tokens) << g.prompt;
    EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), g.generated_tokens) << g.prompt;
    EXPECT_TRUE(j.at("stats").contains("tokens_per_s"));
    EXPECT_EQ(j.at("stats").at("finish_reason"), g.stopped_on_bos ? "eog" : "length");
  }
}
