// `treespec bench` through the built binary on stories260K and its golden prompts:
// outputs (table, JSON, CSV, plots), --from, --compare, --membw and error messages.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench_test_util.h"
#include "common/golden.h"
#include "common/test_util.h"

using namespace treespec;

namespace {

std::string bench_cmd(const std::string& args, int* rc, bool stderr_too = true) {
  std::string out;
  *rc = test::run_command(test::treespec_binary() + " bench " + args + (stderr_too ? " 2>&1" : " 2>/dev/null"), &out);
  return out;
}

size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST(CliBench, GoldenSweepWritesEveryOutput) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  const std::string golden = test::shared_dir() + "/models/golden/stories260K_greedy.jsonl";
  int rc = -1;
  const std::string out = bench_cmd("-m " + test::stories_gguf() + " --prompts " + golden +
                                        " -n 16 -r 1 -t 1 --batch 1,2 --spec none,lookup:draft=4 --budget own,4"
                                        " --membw-mib 8 --json " +
                                        dir + "/r.json --csv " + dir + "/r.csv --plot " + dir + "/plots",
                                    &rc, false);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("| stories260K | stories260K_greedy | 2 | lookup:draft=4 | 4 |"), std::string::npos) << out;
  EXPECT_NE(out.find("identical to none in all 6 cells"), std::string::npos) << out;

  const auto r = nlohmann::json::parse(test::read_file(dir + "/r.json"));
  EXPECT_TRUE(test::check_bench_schema(r).empty()) << ::testing::PrintToString(test::check_bench_schema(r));
  EXPECT_EQ(r["cells"].size(), 6u);
  EXPECT_EQ(r["cells"][1]["params"]["draft"], "4");
  EXPECT_NE(r["command"].get<std::string>().find("--spec none,lookup:draft=4"), std::string::npos);
  EXPECT_EQ(count_lines(test::read_file(dir + "/r.csv")), 1u + 6u);
  for (const char* f : {"speedup_vs_batch", "acceptance_by_depth", "tokens_per_s_vs_tree_size", "time_split"}) {
    EXPECT_NO_THROW(test::parse_xml(test::read_file(dir + "/plots/" + f + ".svg"))) << f;
  }

  // --from re-renders the same table; --compare of a run with itself gives ratio 1.
  const std::string again = bench_cmd("--from " + dir + "/r.json -o csv", &rc, false);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(again, test::read_file(dir + "/r.csv"));
  const std::string cmp = bench_cmd("--compare " + dir + "/r.json " + dir + "/r.json", &rc);
  EXPECT_EQ(rc, 0) << cmp;
  EXPECT_NE(cmp.find("| 1.000 |"), std::string::npos) << cmp;
  EXPECT_EQ(cmp.find("only in"), std::string::npos) << cmp;
}

TEST(CliBench, MembwAndErrors) {
  int rc = -1;
  std::string out = bench_cmd("--membw --membw-mib 8 -t 2", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("1 thread :"), std::string::npos) << out;
  EXPECT_NE(out.find("GB/s"), std::string::npos) << out;

  out = bench_cmd("--prompts x.txt", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("-m MODEL"), std::string::npos) << out;

  out = bench_cmd("--compare /nonexistent/a.json", &rc);
  EXPECT_NE(rc, 0);

  const std::string dir = test::temp_dir();
  test::run_command("echo '{}' > " + dir + "/bad.json");
  out = bench_cmd("--compare " + dir + "/bad.json " + dir + "/bad.json", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("not a treespec bench report"), std::string::npos) << out;

  TREESPEC_REQUIRE_SHARED();
  const std::string golden = test::shared_dir() + "/models/golden/stories260K_greedy.jsonl";
  const std::string base = "-m " + test::stories_gguf() + " --prompts " + golden + " -n 4 -r 1 --no-membw ";
  out = bench_cmd(base + "--spec lookup:colour=red", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("method spec 'lookup:colour=red'"), std::string::npos) << out;
  EXPECT_NE(out.find("draft=..."), std::string::npos) << out;  // lists lookup's parameters
  out = bench_cmd(base + "--spec nonesuch", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown speculative method 'nonesuch'"), std::string::npos) << out;
  out = bench_cmd(base + "--batch 16", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("batch size 16"), std::string::npos) << out;
  out = bench_cmd(base + "--budget 0", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--budget"), std::string::npos) << out;
  // --method adds variants; with --method alone the default --spec list is not added.
  out = bench_cmd(base + "--method lookup:draft=2,branches=1 --method lookup:ngram-max=2 -o json", &rc, false);
  ASSERT_EQ(rc, 0) << out;
  const auto r = nlohmann::json::parse(out);
  EXPECT_EQ(r["config"]["methods"], nlohmann::json({"none", "lookup:draft=2:branches=1", "lookup:ngram-max=2"}));
}

// llama-bench mode: --pp / --tg print its table and a JSON report with every sample; the
// method sweep's options are an error there, not silently ignored.
TEST(CliBench, PromptProcessingAndGenerationTests) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  int rc = -1;
  const std::string out = bench_cmd("-m " + test::stories_gguf() +
                                        " --pp 16,40 --tg 8 -r 3 -t 1 -ub 16 --no-progress --json " + dir + "/pp.json",
                                    &rc, false);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("| test | t/s (median) | min - max | sd |"), std::string::npos) << out;
  for (const char* t : {"| pp16 |", "| pp40 |", "| tg8 |"})
    EXPECT_NE(out.find(t), std::string::npos) << t << "\n" << out;
  const auto r = nlohmann::json::parse(test::read_file(dir + "/pp.json"));
  EXPECT_EQ(r["kind"], "pp_tg");
  EXPECT_EQ(r["config"]["n_batch"], 16);
  ASSERT_EQ(r["results"].size(), 3u);
  for (const auto& x : r["results"]) {
    ASSERT_EQ(x["samples_ts"].size(), 3u);
    EXPECT_GT(x["median_ts"].get<double>(), 0.0);
    EXPECT_LE(x["min_ts"].get<double>(), x["median_ts"].get<double>());
    EXPECT_GE(x["max_ts"].get<double>(), x["median_ts"].get<double>());
  }
  EXPECT_EQ(r["results"][1]["n_prompt"], 40);
  EXPECT_EQ(r["results"][2]["n_gen"], 8);
  const std::string bad = bench_cmd("-m " + test::stories_gguf() + " --pp 16 --spec lookup", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad.find("--spec does not apply to --pp/--tg"), std::string::npos) << bad;
  const std::string bad2 = bench_cmd("-m " + test::stories_gguf() + " --tg 0", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bad2.find("--tg"), std::string::npos) << bad2;
}
