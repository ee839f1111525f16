// `treespec run` on a tiny random model: a full context is a normal finish reported in
// the JSON stats (exit 0), a prompt longer than the context is one clear error line and a
// non-zero exit, and the lookahead flags reach the drafter.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "common/test_util.h"
#include "common/tiny_model.h"

using namespace treespec;

namespace {
std::string tiny_path() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/tiny_cli.gguf";
    test::write_tiny_model(p, test::TinyModelConfig{});
    return p;
  }();
  return path;
}
std::string run_cmd(const std::string& args) {
  return test::treespec_binary() + " run -m " + tiny_path() + " -t 1 " + args + " 2>&1";
}
}  // namespace

TEST(RunCli, ContextFullIsReportedAndExitsZero) {
  for (const char* spec : {"none", "lookup", "lookahead --lookahead-n 3 --lookahead-w 3 --lookahead-g 2"}) {
    SCOPED_TRACE(spec);
    std::string out;
    const std::string cmd = run_cmd(std::string("-p 't5t6t7' -c 12 -n -1 --ignore-eos --temp 0 --json --spec ") + spec);
    ASSERT_EQ(test::run_command(cmd, &out), 0) << cmd << "\n" << out;
    const auto j = nlohmann::json::parse(out);
    const auto& st = j.at("stats");
    EXPECT_EQ(st.at("context_full"), true);
    EXPECT_EQ(st.at("finish_reason"), "context");
    const auto n_prompt = j.at("prompt_tokens").size();
    EXPECT_EQ(j.at("tokens").size(), 12 - n_prompt + 1);
    for (const char* key :
         {"steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "mean_accepted_length",
          "mean_acceptance_length", "acceptance_by_depth", "accepted_per_pos", "rows_per_step", "time_s"}) {
      EXPECT_TRUE(st.contains(key)) << key;
    }
  }
}

TEST(RunCli, PromptLongerThanContextIsAnError) {
  std::string out;
  const std::string cmd = run_cmd("-p 't5t6t7t8t9t10t11t12t13t14t15t16' -c 4 -n 8 --temp 0 --spec lookahead");
  EXPECT_NE(test::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("context holds 4"), std::string::npos) << out;
  EXPECT_NE(out.find("error"), std::string::npos) << out;
}

TEST(RunCli, LookaheadFlagsAreValidated) {
  std::string out;
  EXPECT_NE(test::run_command(run_cmd("-p 't5' -n 4 --spec lookahead --lookahead-n 1"), &out), 0);
  EXPECT_NE(out.find("n-gram size N"), std::string::npos) << out;
  EXPECT_NE(test::run_command(run_cmd("-p 't5' -n 4 --spec lookahead --lookahead-w 0"), &out), 0);
  EXPECT_NE(out.find("window W"), std::string::npos) << out;
  EXPECT_NE(test::run_command(run_cmd("-p 't5' -n 4 --spec lookahead --lookahead-g 0"), &out), 0);
  EXPECT_NE(out.find("guess set G"), std::string::npos) << out;
  // The summary line on stderr names the method and the counters.
  ASSERT_EQ(test::run_command(run_cmd("-p 't5t6' -n 20 --temp 0 --ignore-eos --spec lookahead"), &out), 0) << out;
  EXPECT_NE(out.find("spec lookahead"), std::string::npos) << out;
  EXPECT_NE(out.find("tok/step"), std::string::npos) << out;
}

TEST(RunCli, LogitBiasAndTypicalFlagsReachTheSampler) {
  // llama.cpp's spelling: TOKEN_ID(+|-)BIAS, repeatable; -inf bans.
  const std::string base = "-p 't5t6' -n 12 --temp 0 --ignore-eos --json";
  std::string out;
  ASSERT_EQ(test::run_command(run_cmd(base) + " 2>/dev/null", &out), 0) << out;
  const auto plain = nlohmann::json::parse(out).at("tokens").get<std::vector<int32_t>>();
  const std::string ban =
      " -l " + std::to_string(plain.at(0)) + "-inf --logit-bias " + std::to_string(plain.at(0)) + "+1";
  for (const char* spec : {"none", "lookup"}) {
    ASSERT_EQ(test::run_command(run_cmd(base + ban + " --spec " + spec) + " 2>/dev/null", &out), 0) << out;
    const auto banned = nlohmann::json::parse(out).at("tokens").get<std::vector<int32_t>>();
    EXPECT_EQ(std::count(banned.begin(), banned.end(), plain[0]), 0) << spec;
  }
  for (const char* bad : {"-l 5", "-l x+1", "-l 5+abc", "-l 5+inf", "-l 99999999+1", "--typical 1.5"}) {
    EXPECT_NE(test::run_command(run_cmd(std::string("-p 't5' -n 2 ") + bad), &out), 0) << bad;
    EXPECT_NE(out.find(std::string(bad).substr(0, 2) == "-l" ? "logit" : "typical_p"), std::string::npos)
        << bad << ": " << out;
  }
  EXPECT_EQ(test::run_command(run_cmd("-p 't5' -n 4 --temp 1 --typical 0.5"), &out), 0) << out;
}
