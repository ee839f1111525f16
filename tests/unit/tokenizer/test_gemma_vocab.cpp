// Gemma's SentencePiece conventions on a Gemma-style vocabulary (tests/common/tiny_model.h,
// tokenizer "gemma": byte fallback, <start_of_turn> / <end_of_turn> controls, no space
// prefix). ../shared/data has no llama.cpp vectors for Gemma, so the expected ids below
// are ik_llama.cpp's (llama-cli --verbose-prompt, commit 8337e4cd3) on this very
// vocabulary, as scripts/tokenize_vs_anchor.sh prints them; rerun that script when the
// fixture changes.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/test_util.h"
#include "common/tiny_model.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace treespec;

namespace {

std::unique_ptr<tokenizer::Tokenizer> gemma_tokenizer() {
  test::TinyModelConfig c;
  c.arch = "gemma2";
  c.post_norms = true;
  c.tokenizer = "gemma";
  c.n_vocab = 1024;
  const std::string path = test::temp_dir() + "/gemma_vocab.gguf";
  test::write_tiny_model(path, c);
  const auto f = gguf::GgufFile::open(path);
  return tokenizer::Tokenizer::from_gguf(*f);
}

struct GemmaCase {
  const char* text;
  std::vector<int32_t> ids;  // with the BOS the vocabulary adds
};

const GemmaCase kReference[] = {
    {"<start_of_turn>user\nHow are you today?<end_of_turn>\n<start_of_turn>model\n",
     {2, 4, 268, 278, 322, 262, 511, 815, 816, 926, 5, 262, 4, 274, 388, 377, 262}},
    {"emoji \xF0\x9F\x98\x80 and CJK \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E and accents caf\xC3\xA9",
     {2,   267, 274, 270, 298, 273, 445, 246, 165, 158, 134, 803, 445, 73,  80,  81,  445, 236,
      157, 171, 236, 162, 178, 238, 176, 164, 803, 577, 266, 313, 265, 421, 755, 287, 201, 175}},
    {"   leading and trailing spaces   ",
     {2, 776, 445, 330, 271, 281, 491, 803, 727, 271, 273, 326, 367, 611, 349, 313, 278, 776, 445}},
    {"unknown words: zebra quixotic",
     {2, 363, 286, 265, 531, 732, 495, 64, 445, 300, 267, 402, 271, 823, 297, 270, 317, 266}},
};

}  // namespace

TEST(GemmaVocab, MatchesTheReferenceEnginesIds) {
  const auto tok = gemma_tokenizer();
  for (const GemmaCase& c : kReference) EXPECT_EQ(tok->encode(c.text, true, true), c.ids) << c.text;
}

TEST(GemmaVocab, NoSpacePrefixAndExactRoundTrip) {
  const auto tok = gemma_tokenizer();
  const int32_t world = tok->token_id("\xe2\x96\x81world");
  ASSERT_GE(world, 0);
  // The first word gets no U+2581 (add_space_prefix false); a leading space stays text.
  EXPECT_EQ(tok->encode("Hello world", true, true), (std::vector<int32_t>{2, tok->token_id("Hello"), world}));
  for (const char* t :
       {"Hello world", " Hello world", "a\n\nb\tc", "   x   ", "caf\xC3\xA9 \xF0\x9F\x98\x80", "I'm fine"}) {
    EXPECT_EQ(tok->decode(tok->encode(t, false, true)), t) << t;
  }
}

TEST(GemmaVocab, TurnMarkersAreSpecialAndEndOfTurnEndsGeneration) {
  const auto tok = gemma_tokenizer();
  const int32_t sot = tok->token_id("<start_of_turn>"), eot = tok->token_id("<end_of_turn>");
  ASSERT_EQ(sot, 4);
  ASSERT_EQ(eot, 5);
  EXPECT_EQ(tok->encode("<start_of_turn>", false, true), (std::vector<int32_t>{sot}));
  const auto plain = tok->encode("<start_of_turn>", false, false);  // as text: never the control token
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), sot), 0);
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_TRUE(tok->is_eog(1));  // <eos>
  EXPECT_FALSE(tok->is_eog(sot));
  EXPECT_EQ(tok->bos_id(), 2);
}
