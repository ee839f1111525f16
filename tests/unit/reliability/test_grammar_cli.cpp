// `treespec run` under --grammar / --grammar-file / -j / -jf (docs/grammar.md): the
// output follows the grammar on SPM and byte-level BPE vocabularies; a bad grammar,
// schema or file is one clear line naming the flag, before the model is loaded.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "grammar/grammar.h"

using namespace treespec;

namespace {

std::string write(const std::string& name, const std::string& text) {
  const std::string p = test::temp_dir() + "/" + name;
  std::ofstream(p) << text;
  return p;
}

std::string run_text(const std::string& args) {
  const test::CliResult r = test::run_treespec("run -t 1 --temp 0 --json " + args);
  EXPECT_EQ(r.status, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out)["text"];
  } catch (const std::exception&) {
    ADD_FAILURE() << "not JSON: " << r.out << "\n" << r.err;
    return {};
  }
}

}  // namespace

TEST(GrammarCli, OutputFollowsTheGrammarFromEachFlag) {
  const std::string g = R"(root ::= " " [A-Z] [a-z]{1,10} (" " [a-z]{1,10}){2,6} "!")";
  const std::string text = run_text("-m " + test::kKjvModel + " -p 'And the king said' -n 60 --grammar '" + g + "'");
  EXPECT_TRUE(grammar::matches(grammar::Grammar::parse(g), text)) << text;
  EXPECT_EQ(run_text("-m " + test::kKjvModel + " -p 'And the king said' -n 60 --grammar-file " + write("g.gbnf", g)),
            text);
  EXPECT_EQ(run_text("-m " + test::kKjvModel + " -p 'And the king said' -n 60 --spec lookahead --grammar '" + g + "'"),
            text);
  // A JSON Schema, inline and from a file (-jf is llama.cpp's short form).
  const std::string schema =
      R"({"type":"object","properties":{"word":{"enum":["yea","nay"]}},"required":["word"],"additionalProperties":false})";
  const std::string j = run_text("-m " + test::kKjvModel + " -p 'And the king said' -n 60 -j '" + schema + "'");
  nlohmann::json v;
  ASSERT_NO_THROW(v = nlohmann::json::parse(j)) << j;
  EXPECT_TRUE((v == nlohmann::json{{"word", "yea"}} || v == nlohmann::json{{"word", "nay"}})) << j;
  EXPECT_EQ(run_text("-m " + test::kKjvModel + " -p 'And the king said' -n 60 -jf " + write("s.json", schema)), j);
}

TEST(GrammarCli, ByteLevelBpeVocabularyFollowsTheGrammarToo) {
  test::TinyModelConfig c;
  c.arch = "qwen2", c.qkv_bias = true, c.tied = true, c.n_vocab = 320, c.tokenizer = "gpt2", c.bpe_pre = "qwen2";
  const std::string model = test::temp_dir() + "/grammar_bpe.gguf";
  test::write_tiny_model(model, c);
  const std::string g = R"(root ::= "a" [bc ]{3,12} "d")";
  const std::string text = run_text("-m " + model + " -p 'hello' -n 40 --grammar '" + g + "'");
  EXPECT_TRUE(grammar::matches(grammar::Grammar::parse(g), text)) << text;
}

TEST(GrammarCli, BadGrammarsSchemasAndFilesAreOneClearLineBeforeTheModelLoads) {
  struct Case {
    std::string args;
    std::string says;
  };
  // The model does not exist: the grammar error must come first.
  for (const Case& k : std::vector<Case>{
           {"--grammar 'root ::= \"a'", "--grammar: grammar: line 1, column 10: unterminated literal"},
           {"--grammar 'root ::= r\nr ::= r \"x\"'", "left-recursive"},
           {"--grammar-file /nonexistent/g.gbnf", "/nonexistent/g.gbnf"},
           {"-j '{\"type\": '", "-j/--json-schema: not valid JSON"},
           {"-j '{\"type\": \"bogus\"}'", "bogus"},
           {"-jf /nonexistent/s.json", "/nonexistent/s.json"},
           {"--grammar 'root ::= \"a\"' -j '{}'", "give one of --grammar and -j/--json-schema, not both"},
       }) {
    const test::CliResult r = test::run_treespec("run -m /nonexistent/model.gguf -p x " + k.args);
    EXPECT_EQ(r.status, 1) << k.args;
    EXPECT_NE(r.err.find(k.says), std::string::npos) << k.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("model.gguf"), std::string::npos) << k.args << "\n" << r.err;
  }
  // bench does not take a grammar: refused, not ignored.
  const test::CliResult b = test::run_treespec("bench -m " + test::kKjvModel + " --grammar 'root ::= \"a\"'");
  EXPECT_NE(b.status, 0);
  EXPECT_NE(b.err.find("--grammar"), std::string::npos) << b.err;
}
