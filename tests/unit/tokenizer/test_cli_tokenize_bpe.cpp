// `treespec tokenize` on the byte-level BPE vocab-only GGUF (GPT-2).
#include <gtest/gtest.h>

#include "common/test_util.h"

using namespace treespec;

TEST(CliTokenize, Gpt2Vocab) {
  TREESPEC_REQUIRE_SHARED();
  const std::string cmd =
      test::treespec_binary() + " tokenize -m '" + test::shared_dir() + "/data/tokenizer/ggml-vocab-gpt-2.gguf' ";
  std::string out;
  EXPECT_EQ(test::run_command(cmd + "'Hello world' 2>&1", &out), 0);
  EXPECT_EQ(out, "[15496, 995]\n");  // GPT-2 adds no BOS
  EXPECT_EQ(test::run_command(cmd + "--no-bos ' Hello, world!' 2>&1", &out), 0);
  EXPECT_EQ(out, "[18435, 11, 995, 0]\n");
  // Special tokens in the text are parsed by default, like llama-tokenize.
  EXPECT_EQ(test::run_command(cmd + "'<|endoftext|>Hello' 2>&1", &out), 0);
  EXPECT_EQ(out, "[50256, 15496]\n");
  EXPECT_EQ(test::run_command(cmd + "--no-parse-special '<|endoftext|>' 2>&1", &out), 0);
  EXPECT_EQ(out.find("50256"), std::string::npos) << out;
  EXPECT_EQ(out.front(), '[');
  EXPECT_EQ(test::run_command(cmd + "'    Hello' 2>&1", &out), 0);
  EXPECT_EQ(out, "[220, 220, 220, 18435]\n");
}
