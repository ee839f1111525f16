// `treespec convert` and `treespec info` end to end through the built binary.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"

using namespace treespec;

namespace {

std::string q(const std::string& s) { return "'" + s + "'"; }

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST(CliGguf, ConvertThenInfo) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/models/stories260K/";
  const std::string out = test::temp_dir() + "/stories260K.gguf";
  std::string text;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " convert --llama2c " + q(dir + "stories260K.bin") +
                                  " --tokenizer " + q(dir + "tok512.bin") + " -o " + q(out) + " 2>&1",
                              &text),
            0)
      << text;
  EXPECT_NE(text.find("47 tensors"), std::string::npos) << text;

  ASSERT_EQ(test::run_command(test::treespec_binary() + " info " + q(out) + " 2>&1", &text), 0) << text;
  EXPECT_NE(text.find("GGUF version 3, alignment 32"), std::string::npos) << text;
  EXPECT_NE(text.find("general.name"), std::string::npos);
  EXPECT_NE(text.find("\"stories260K\""), std::string::npos);  // default name: the checkpoint's stem
  EXPECT_NE(text.find("[string x 512] [\"<unk>\", \"<s>\", \"</s>\""), std::string::npos) << text;
  EXPECT_NE(text.find("llama.attention.head_count_kv"), std::string::npos);
  EXPECT_NE(text.find("tensors: 47"), std::string::npos);
  EXPECT_NE(text.find("blk.4.ffn_down.weight"), std::string::npos);
  EXPECT_NE(text.find("[172, 64]"), std::string::npos);
  EXPECT_NE(text.find("total: 47 tensors, 260032 parameters, 1040128 bytes"), std::string::npos) << text;
}

TEST(CliGguf, ConvertF16AndName) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/models/stories260K/";
  const std::string out = test::temp_dir() + "/s16.gguf";
  std::string text;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " convert --llama2c " + q(dir + "stories260K.bin") +
                                  " --tokenizer " + q(dir + "tok512.bin") + " -o " + q(out) +
                                  " --type f16 --name tiny-story 2>&1",
                              &text),
            0)
      << text;
  ASSERT_EQ(test::run_command(test::treespec_binary() + " info " + q(out) + " 2>&1", &text), 0);
  EXPECT_NE(text.find("\"tiny-story\""), std::string::npos);
  EXPECT_NE(text.find("blk.0.attn_q.weight"), std::string::npos);
  EXPECT_NE(text.find(" f16 "), std::string::npos);
  EXPECT_NE(test::run_command(test::treespec_binary() + " convert --llama2c " + q(dir + "stories260K.bin") +
                                  " --tokenizer " + q(dir + "tok512.bin") + " -o " + q(out) + " --type q4_0 2>&1",
                              &text),
            0);
  EXPECT_NE(text.find("--type must be f32 or f16"), std::string::npos) << text;
}

TEST(CliGguf, InfoOnCorruptFileFailsWithOneLine) {
  const std::string dir = test::temp_dir();
  const std::string bad = dir + "/bad.gguf";
  {
    std::ofstream f(bad, std::ios::binary);
    f << "GGUF";
    const uint32_t version = 3;
    const uint64_t n_tensors = 1, n_kv = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&version), 4);
    f.write(reinterpret_cast<const char*>(&n_tensors), 8);
    f.write(reinterpret_cast<const char*>(&n_kv), 8);
  }
  std::string text;
  EXPECT_NE(test::run_command(test::treespec_binary() + " info " + q(bad) + " 2>&1", &text), 0);
  EXPECT_EQ(count_lines(text), 1) << text;
  EXPECT_NE(text.find("error"), std::string::npos) << text;
  EXPECT_NE(text.find("bad.gguf"), std::string::npos) << text;
  EXPECT_NE(text.find("n_kv = 1099511627776"), std::string::npos) << text;

  EXPECT_NE(test::run_command(test::treespec_binary() + " info " + q(dir + "/missing.gguf") + " 2>&1", &text), 0);
  EXPECT_EQ(count_lines(text), 1) << text;
  EXPECT_NE(text.find("missing.gguf"), std::string::npos) << text;
}

TEST(CliGguf, ConvertCorruptCheckpointFails) {
  TREESPEC_REQUIRE_SHARED();
  const std::string dir = test::temp_dir();
  const std::string model = test::read_file(test::shared_dir() + "/models/stories260K/stories260K.bin");
  {
    std::ofstream f(dir + "/cut.bin", std::ios::binary);
    f << model.substr(0, 1000);
  }
  std::string text;
  EXPECT_NE(test::run_command(test::treespec_binary() + " convert --llama2c " + q(dir + "/cut.bin") + " --tokenizer " +
                                  q(test::shared_dir() + "/models/stories260K/tok512.bin") + " -o " +
                                  q(dir + "/o.gguf") + " 2>&1",
                              &text),
            0);
  EXPECT_EQ(count_lines(text), 1) << text;
  EXPECT_NE(text.find("cut.bin: file is 1000 bytes"), std::string::npos) << text;
}
