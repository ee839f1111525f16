// stories260K: the converted GGUF's tokenizer against the llama2.c reference goldens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer_test_util.h"

using namespace treespec;

namespace {

struct Golden {
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> generated;
  std::string stdout_text;
};

std::vector<Golden> read_goldens() {
  std::istringstream in(test::read_file(test::shared_dir() + "/models/golden/stories260K_greedy.jsonl"));
  std::vector<Golden> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({j.at("prompt").get<std::string>(), j.at("prompt_tokens").get<std::vector<int32_t>>(),
                   j.at("generated_tokens").get<std::vector<int32_t>>(), j.at("stdout").get<std::string>()});
  }
  return out;
}

}  // namespace

TEST(StoriesTokenizer, VocabMetadata) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_stories_tokenizer();
  const auto& tok = *t.tok;
  EXPECT_EQ(tok.n_vocab(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.vocab().unk_id, 0);
  EXPECT_EQ(tok.vocab().eot_id, 1);  // the model ends a story with BOS
  EXPECT_TRUE(tok.is_eog(1));
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(0));
  EXPECT_FALSE(tok.is_eog(403));
  EXPECT_EQ(tok.eog_ids(), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(tok.is_control(1));
  EXPECT_TRUE(tok.is_byte(3));
  EXPECT_EQ(tok.byte_token('\n'), 13);
  EXPECT_TRUE(tok.vocab().add_bos);
  EXPECT_FALSE(tok.vocab().add_eos);
  EXPECT_EQ(tok.vocab().tokens[1], "<s>");
  EXPECT_EQ(tok.vocab().tokens[2], "</s>");
}

TEST(StoriesTokenizer, GoldenPromptsEncodeExactly) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_stories_tokenizer();
  const auto goldens = read_goldens();
  ASSERT_EQ(goldens.size(), 10u);
  for (const auto& g : goldens) {
    EXPECT_EQ(t.tok->encode(g.prompt, /*add_special=*/true), g.prompt_tokens) << "prompt '" << g.prompt << "'";
  }
  EXPECT_EQ(t.tok->encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(t.tok->encode("", false).empty());
}

// llama2.c prints each piece after the first (BOS) position, dropping the leading space
// of the piece right after BOS and any single-byte piece that is neither printable nor
// whitespace, then a final newline. Our decode() follows the same rules; the goldens'
// texts contain no such unprintable bytes, so decode + "\n" must equal stdout exactly.
TEST(StoriesTokenizer, DecodeReproducesReferenceStdout) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_stories_tokenizer();
  for (const auto& g : read_goldens()) {
    std::vector<int32_t> all = g.prompt_tokens;
    all.insert(all.end(), g.generated.begin(), g.generated.end());
    EXPECT_EQ(t.tok->decode(all) + "\n", g.stdout_text) << "prompt '" << g.prompt << "'";
    // Streaming gives the same text.
    tokenizer::StreamDecoder sd(*t.tok);
    std::string streamed;
    for (int32_t id : all) streamed += sd.push(id);
    streamed += sd.flush();
    EXPECT_EQ(streamed, t.tok->decode(all));
    // Streaming only the generated part after prime() with the prompt's last token.
    tokenizer::StreamDecoder gen(*t.tok);
    gen.prime(g.prompt_tokens.back());
    std::string gen_text;
    for (int32_t id : g.generated) gen_text += gen.push(id);
    gen_text += gen.flush();
    EXPECT_EQ(t.tok->decode(g.prompt_tokens) + gen_text, t.tok->decode(all));
  }
}

TEST(StoriesTokenizer, RoundTripsArbitraryBytes) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_stories_tokenizer();
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint8_t>(state >> 56);
  };
  for (int it = 0; it < 300; ++it) {
    std::string s;
    const int n = next() % 40;
    for (int i = 0; i < n; ++i) {
      // Mix ASCII text, spaces and arbitrary (often invalid UTF-8) bytes.
      const uint8_t r = next();
      s += r < 100 ? static_cast<char>('a' + r % 26) : r < 140 ? ' ' : static_cast<char>(next());
    }
    const auto ids = t.tok->encode(s, true);
    EXPECT_EQ(t.tok->decode(ids), s) << "iteration " << it;
  }
}
