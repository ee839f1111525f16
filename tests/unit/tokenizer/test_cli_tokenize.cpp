// `treespec tokenize` through the built binary.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "gguf/gguf.h"

using namespace treespec;

namespace {

std::string tokenize(const std::string& args, int* rc = nullptr) {
  std::string out;
  const int r = test::run_command(test::treespec_binary() + " tokenize " + args + " 2>&1", &out);
  if (rc) *rc = r;
  return out;
}

}  // namespace

TEST(CliTokenize, LlamaSpmVocab) {
  TREESPEC_REQUIRE_SHARED();
  const std::string m = "-m '" + test::shared_dir() + "/data/tokenizer/ggml-vocab-llama-spm.gguf' ";
  int rc = -1;
  EXPECT_EQ(tokenize(m + "--no-bos 'Hello world'", &rc), "[15043, 3186]\n");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(tokenize(m + "' Hello, world!'"), "[1, 29871, 15043, 29892, 3186, 29991]\n");
  EXPECT_EQ(tokenize(m + "--no-bos ' this is 🦙.cpp'"),
            "[29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223]\n");
  // Special tokens in the text are parsed by default, like llama-tokenize.
  EXPECT_EQ(tokenize(m + "'<s>Hello</s>'"), "[1, 1, 15043, 2]\n");
  EXPECT_EQ(tokenize(m + "--no-bos --no-parse-special '<s>Hello'"), "[529, 29879, 29958, 10994]\n");
  EXPECT_EQ(tokenize(m + "--no-bos ''"), "[]\n");
}

TEST(CliTokenize, Errors) {
  int rc = 0;
  const std::string out = tokenize("-m /nonexistent/model.gguf hi", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("/nonexistent/model.gguf"), std::string::npos) << out;
  // A tokenizer model treespec does not implement (WordPiece) names itself.
  gguf::GgufWriter w;
  w.set("tokenizer.ggml.model", gguf::Value::string("bert"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"[PAD]", "hi"}));
  const std::string path = test::temp_dir() + "/bert-vocab.gguf";
  w.write(path);
  const std::string bert = tokenize("-m '" + path + "' hi", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(bert.find("'bert' is not supported"), std::string::npos) << bert;
}
