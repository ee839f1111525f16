// llama.cpp tokenizer conformance vectors (../shared/data/tokenizer/*.gguf.inp/.out),
// read as llama.cpp's test-tokenizer-0 reads them: the .inp texts are separated by
// "\n__ggml_vocab_test__\n" (the file ends with one), .out has one line of ids per text;
// encoding uses add_special = false and parse_special = false.
#include <gtest/gtest.h>

#include <sstream>

#include "tokenizer_test_util.h"

using namespace treespec;

namespace {

void run_conformance(const std::string& name) {
  const std::string path = test::shared_dir() + "/data/tokenizer/" + name;
  const auto t = test::load_tokenizer_gguf(path);
  const auto cases = test::read_conformance_cases(path);
  ASSERT_GT(cases.size(), 40u);
  int failures = 0;
  for (const auto& c : cases) {
    const auto ids = t.tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'\n got: " << test::ids_text(ids)
                          << "\nwant: " << test::ids_text(c.ids);
    failures += ids != c.ids;
    // Decoding gives the text back (these vectors are valid UTF-8), except for the
    // dummy-prefix space, which decode() drops only after BOS.
    std::string text = t.tok->decode(ids);
    if (!c.text.empty()) {
      ASSERT_FALSE(text.empty());
      EXPECT_EQ(text[0], ' ');
      text.erase(0, 1);
    }
    EXPECT_EQ(text, c.text);
  }
  EXPECT_EQ(failures, 0) << name;
}

}  // namespace

TEST(TokenizerConformance, VectorFileFormat) {
  TREESPEC_REQUIRE_SHARED();
  const auto cases = test::read_conformance_cases(test::shared_dir() + "/data/tokenizer/ggml-vocab-llama-spm.gguf");
  ASSERT_EQ(cases.size(), 46u);
  EXPECT_EQ(cases[0].text, "ied 4 \xc2\xbd months");
  EXPECT_EQ(cases[2].text, "");  // an empty text gives an empty line of ids
  EXPECT_TRUE(cases[2].ids.empty());
  EXPECT_EQ(cases[6].text, "\t");
  EXPECT_EQ(cases[7].text, "\n");  // a text that is one newline
  EXPECT_EQ(cases[8].text, "\n\n");
}

TEST(TokenizerConformance, LlamaSpm) {
  TREESPEC_REQUIRE_SHARED();
  run_conformance("ggml-vocab-llama-spm.gguf");
}

TEST(TokenizerConformance, Phi3) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_tokenizer_gguf(test::shared_dir() + "/data/tokenizer/ggml-vocab-phi-3.gguf");
  EXPECT_EQ(t.tok->vocab().model, "llama");
  run_conformance("ggml-vocab-phi-3.gguf");
}

TEST(TokenizerConformance, Phi3SpecialTokens) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_tokenizer_gguf(test::shared_dir() + "/data/tokenizer/ggml-vocab-phi-3.gguf");
  const auto& tok = *t.tok;
  // eos is <|endoftext|>; <|end|> is found by its spelling as the end-of-turn token.
  EXPECT_EQ(tok.eos_id(), 32000);
  EXPECT_EQ(tok.vocab().eot_id, 32007);
  EXPECT_EQ(tok.eog_ids(), (std::vector<int32_t>{32000, 32007}));
  // Phi-3 strips whitespace after its special tokens (llama.cpp's RSTRIP attribute),
  // except after <s> / <unk> / <|endoftext|>.
  const int32_t user = tok.token_id("<|user|>");
  const int32_t end = tok.token_id("<|end|>");
  ASSERT_EQ(user, 32010);
  EXPECT_EQ(tok.encode("<|user|>\nHi<|end|>\n", false, true), tok.encode("<|user|>Hi<|end|>", false, true));
  const auto ids = tok.encode("<|user|>\nHi<|end|>", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), user);
  EXPECT_EQ(ids.back(), end);
  EXPECT_NE(tok.encode("<|endoftext|> x", false, true), tok.encode("<|endoftext|>x", false, true));
  EXPECT_EQ(tok.encode("<|end|> x", false, true), tok.encode("<|end|>x", false, true));
  // </s> is user-defined in this vocab: matched even without parse_special.
  EXPECT_EQ(tok.encode("a</s>", false, false).back(), 2);
}
