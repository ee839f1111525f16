// Prompt sets: every file of ../shared/data/prompts, the goldens, text files, options
// and malformed input.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

#include "bench/prompts.h"
#include "common/test_util.h"
#include "treespec/status.h"

using namespace treespec;

namespace {

std::string prompts_dir() { return test::shared_dir() + "/data/prompts/"; }

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string what_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Prompts, ParseSource) {
  auto s = bench::parse_prompt_source("/a/b.jsonl");
  EXPECT_EQ(s.path, "/a/b.jsonl");
  EXPECT_TRUE(s.field.empty());
  s = bench::parse_prompt_source("/a/b:c.jsonl:field=turns:turn=1:name=mt");
  EXPECT_EQ(s.path, "/a/b:c.jsonl");
  EXPECT_EQ(s.field, "turns");
  EXPECT_EQ(s.turn, 1);
  EXPECT_EQ(s.name, "mt");
  s = bench::parse_prompt_source("x.dat:format=text");
  EXPECT_EQ(s.format, "text");
  EXPECT_THROW(bench::parse_prompt_source("x:turn=-1"), InvalidArgument);
  EXPECT_THROW(bench::parse_prompt_source("x:turn=a"), InvalidArgument);
  EXPECT_THROW(bench::parse_prompt_source("x:format=xml"), InvalidArgument);
  EXPECT_THROW(bench::parse_prompt_source(":field=a"), InvalidArgument);
}

TEST(Prompts, SharedSets) {
  TREESPEC_REQUIRE_SHARED();
  // Spec-Bench and MT-Bench: "turns", first turn by default, second on request.
  auto sb = bench::load_prompts(bench::parse_prompt_source(prompts_dir() + "spec_bench_question.jsonl"));
  EXPECT_EQ(sb.name, "spec_bench_question");
  EXPECT_EQ(sb.format, "jsonl");
  EXPECT_EQ(sb.field, "turns");
  EXPECT_GT(sb.n_available, 400);
  EXPECT_EQ(sb.prompts.front().rfind("Compose an engaging travel blog post", 0), 0u);

  auto mt = bench::load_prompts(bench::parse_prompt_source(prompts_dir() + "mt_bench_question.jsonl:turn=1"), 5);
  EXPECT_EQ(mt.prompts.size(), 5u);
  EXPECT_EQ(mt.n_available, 80);
  EXPECT_EQ(mt.prompts.front(), "Rewrite your previous response. Start every sentence with the letter A.");

  auto gsm = bench::load_prompts(bench::parse_prompt_source(prompts_dir() + "gsm8k_test.jsonl"), 3);
  EXPECT_EQ(gsm.field, "question");
  EXPECT_EQ(gsm.prompts.front().rfind("Janet", 0), 0u);

  auto he = bench::load_prompts(bench::parse_prompt_source(prompts_dir() + "HumanEval.jsonl.gz"));
  EXPECT_EQ(he.name, "HumanEval");
  EXPECT_EQ(he.field, "prompt");
  EXPECT_EQ(he.n_available, 164);
  EXPECT_NE(he.prompts.front().find("def has_close_elements"), std::string::npos);

  auto mbpp = bench::load_prompts(bench::parse_prompt_source(prompts_dir() + "sanitized-mbpp.json"));
  EXPECT_EQ(mbpp.format, "json");
  EXPECT_EQ(mbpp.field, "prompt");
  EXPECT_EQ(mbpp.prompts.front(), "Write a function to find the shared elements from the given two lists.");

  auto ts = bench::load_prompts(bench::parse_prompt_source(prompts_dir() + "tinystories_sample.txt"));
  EXPECT_EQ(ts.format, "text");
  EXPECT_GT(ts.n_available, 10);
  for (const auto& p : ts.prompts) EXPECT_FALSE(p.empty());
  EXPECT_EQ(ts.prompts.front().rfind("Once upon a time there was a little boy named Ben.", 0), 0u);

  auto golden =
      bench::load_prompts(bench::parse_prompt_source(test::shared_dir() + "/models/golden/stories260K_greedy.jsonl"));
  ASSERT_EQ(golden.prompts.size(), 10u);
  EXPECT_EQ(golden.prompts[0], "");  // the empty prompt is kept: BOS alone conditions it
  EXPECT_EQ(golden.prompts[1], "Once upon a time");
}

TEST(Prompts, TextAndGzipFiles) {
  const std::string dir = test::temp_dir();
  write(dir + "/p.txt", "first\r\n\n  \nsecond line\nthird");
  auto s = bench::load_prompts(bench::parse_prompt_source(dir + "/p.txt"));
  EXPECT_EQ(s.prompts, (std::vector<std::string>{"first", "second line", "third"}));
  s = bench::load_prompts(bench::parse_prompt_source(dir + "/p.txt"), 2);
  EXPECT_EQ(s.prompts.size(), 2u);
  EXPECT_EQ(s.n_available, 3);

  // A gzip file written with zlib round-trips; a truncated one is a clear error.
  const std::string text = "{\"text\": \"a\"}\n{\"text\": \"b\"}\n";
  gzFile gz = gzopen((dir + "/q.jsonl.gz").c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  s = bench::load_prompts(bench::parse_prompt_source(dir + "/q.jsonl.gz"));
  EXPECT_EQ(s.field, "text");
  EXPECT_EQ(s.prompts, (std::vector<std::string>{"a", "b"}));
  const std::string gzdata = test::read_file(dir + "/q.jsonl.gz");
  write(dir + "/cut.jsonl.gz", gzdata.substr(0, gzdata.size() / 2));
  const std::string err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/cut.jsonl.gz")); });
  EXPECT_NE(err.find("cut.jsonl.gz"), std::string::npos) << err;
  EXPECT_NE(err.find("gzip"), std::string::npos) << err;
}

TEST(Prompts, MalformedInputNamesFileLineAndField) {
  const std::string dir = test::temp_dir();
  write(dir + "/bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \"ok\"\n");
  std::string err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/bad.jsonl")); });
  EXPECT_NE(err.find("bad.jsonl:2"), std::string::npos) << err;

  write(dir + "/nofield.jsonl", "{\"id\": 1}\n");
  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/nofield.jsonl")); });
  EXPECT_NE(err.find("nofield.jsonl:1"), std::string::npos) << err;
  EXPECT_NE(err.find("field=NAME"), std::string::npos) << err;

  write(dir + "/missing.jsonl", "{\"q\": \"a\"}\n{\"r\": \"b\"}\n");
  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/missing.jsonl:field=q")); });
  EXPECT_NE(err.find("missing.jsonl:2"), std::string::npos) << err;
  EXPECT_NE(err.find("'q'"), std::string::npos) << err;

  write(dir + "/turns.jsonl", "{\"turns\": [\"only one\"]}\n");
  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/turns.jsonl:turn=1")); });
  EXPECT_NE(err.find("turn 1"), std::string::npos) << err;

  write(dir + "/num.jsonl", "{\"prompt\": 3}\n");
  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/num.jsonl")); });
  EXPECT_NE(err.find("'prompt'"), std::string::npos) << err;

  write(dir + "/obj.json", "{\"prompt\": \"x\"}");
  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/obj.json")); });
  EXPECT_NE(err.find("JSON array"), std::string::npos) << err;

  write(dir + "/empty.txt", "\n\n");
  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/empty.txt")); });
  EXPECT_NE(err.find("no prompts"), std::string::npos) << err;

  err = what_of([&] { bench::load_prompts(bench::parse_prompt_source(dir + "/nope.jsonl")); });
  EXPECT_NE(err.find("nope.jsonl"), std::string::npos) << err;

  EXPECT_THROW(bench::load_prompts(bench::parse_prompt_source(dir + "/empty.txt:field=x")), InvalidArgument);
}
