// llama.cpp conformance vectors for byte-level BPE (ggml-vocab-gpt-2.gguf), read like
// test_conformance.cpp reads the SPM ones (add_special = false, parse_special = false),
// plus checks on the real GPT-2 vocabulary's special token and decoding.
#include <gtest/gtest.h>

#include <sstream>

#include "tokenizer/bpe.h"
#include "tokenizer_test_util.h"

using namespace treespec;

namespace {

std::string gpt2_path() { return test::shared_dir() + "/data/tokenizer/ggml-vocab-gpt-2.gguf"; }

}  // namespace

TEST(TokenizerConformanceBpe, Gpt2) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_tokenizer_gguf(gpt2_path());
  ASSERT_NE(dynamic_cast<const tokenizer::BpeTokenizer*>(t.tok.get()), nullptr);
  EXPECT_EQ(dynamic_cast<const tokenizer::BpeTokenizer*>(t.tok.get())->pre_tokenizer(), tokenizer::PreTokenizer::gpt2);
  const auto cases = test::read_conformance_cases(gpt2_path());
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const auto& c : cases) {
    const auto ids = t.tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'\n got: " << test::ids_text(ids)
                          << "\nwant: " << test::ids_text(c.ids);
    failures += ids != c.ids;
    // Byte-level BPE has no dummy prefix: decoding gives the text back exactly.
    EXPECT_EQ(t.tok->decode(ids), c.text);
  }
  EXPECT_EQ(failures, 0);
}

TEST(TokenizerConformanceBpe, Gpt2SpecialTokenAndFlags) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_tokenizer_gguf(gpt2_path());
  const auto& tok = *t.tok;
  EXPECT_EQ(tok.n_vocab(), 50257);
  EXPECT_EQ(tok.bos_id(), 50256);
  EXPECT_EQ(tok.eos_id(), 50256);
  EXPECT_FALSE(tok.vocab().add_bos);  // no add_bos_token key: llama.cpp's BPE default
  EXPECT_EQ(tok.encode("Hello world", true), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.encode("<|endoftext|>Hello", false, true), (std::vector<int32_t>{50256, 15496}));
  const auto plain = tok.encode("<|endoftext|>Hello", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok.decode(plain), "<|endoftext|>Hello");
  EXPECT_EQ(tok.token_to_piece(50256), "");
  EXPECT_EQ(tok.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(tok.token_to_piece(18435), " Hello");
  EXPECT_TRUE(tok.is_eog(50256));
}
