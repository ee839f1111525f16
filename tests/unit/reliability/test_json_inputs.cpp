// JSON files users hand to treespec (tree choices, bench prompt sets and reports,
// train-heads prompts). Regression for a fuzz finding (fuzz_tree_choices): a number too
// large for a double (1e400) makes nlohmann::json throw out_of_range, not parse_error;
// the readers caught only parse_error, so the library let a non-treespec exception
// escape (a std::terminate in callers that catch treespec::Error only; an unnamed-file
// message in the CLI). Each reader now reports it as a FormatError naming the file.
#include <gtest/gtest.h>

#include <fstream>

#include "bench/prompts.h"
#include "bench/report.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "tree/tree_choices.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = test::temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

template <typename F>
void expect_format_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FormatError, got: " << e.what();
  }
}

}  // namespace

TEST(JsonInputs, TreeChoicesNumberOverflowIsFormatError) {
  for (const char* text : {"1e400", "[[1e400]]", R"({"trees": {"a": [[0], [-1e999]]}})",
                           "977777777e377777"}) {  // the fuzzer's input, cut to its first token
    expect_format_error([&] { (void)tree::parse_tree_choices(text, "", "choices.json"); }, "choices.json");
  }
  const std::string path = write_text("choices.json", "[[0], [1e400]]");
  expect_format_error([&] { (void)tree::load_tree_choices(path); }, path);
}

TEST(JsonInputs, BenchPromptsNumberOverflowIsFormatError) {
  const std::string jsonl = write_text("p.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": 1e400}\n");
  expect_format_error([&] { (void)bench::load_prompts(bench::parse_prompt_source(jsonl)); }, jsonl + ":2");
  const std::string json = write_text("p.json", "[{\"prompt\": 1e400}]");
  expect_format_error([&] { (void)bench::load_prompts(bench::parse_prompt_source(json)); }, json);
}

TEST(JsonInputs, BenchReportNumberOverflowIsFormatError) {
  const std::string path = write_text("report.json", "{\"schema\": \"treespec-bench\", \"x\": 1e400}");
  expect_format_error([&] { (void)bench::load_report(path); }, path);
}

TEST(JsonInputs, TrainHeadsPromptsNumberOverflowNamesTheLine) {
  const std::string model = test::temp_dir() + "/tiny.gguf";
  test::write_tiny_model(model, test::TinyModelConfig{});
  const std::string prompts = write_text("prompts.txt", "once upon a time\n{\"prompt\": 1e400}\n");
  std::string out;
  const int status = test::run_command(test::treespec_binary() + " train-heads -m '" + model + "' -o '" +
                                           test::temp_dir() + "/heads.gguf' --prompts '" + prompts + "' 2>&1",
                                       &out);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find(prompts + ":2: line starts with '{' but is not JSON"), std::string::npos) << out;
}
