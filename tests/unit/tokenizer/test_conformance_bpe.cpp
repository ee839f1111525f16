// llama.cpp conformance vectors for byte-level BPE (ggml-vocab-gpt-2.gguf), read like
// test_conformance.cpp reads the SPM ones (add_special = false, parse_special = false),
// plus checks on the real GPT-2 vocabulary's special token and decoding.
#include <gtest/gtest.h>

#include <sstream>

#include "tokenizer/bpe.h"
#include "tokenizer_test_util.h"

using namespace treespec;

namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// "\n__ggml_vocab_test__\n"-separated texts (the file ends with one); one line of ids
// per text.
std::vector<Case> read_vectors(const std::string& vocab_path) {
  const std::string inp = test::read_file(vocab_path + ".inp");
  const std::string out = test::read_file(vocab_path + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(out);
  size_t i = 0;
  for (std::string line; std::getline(lines, line); ++i) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    for (int32_t id; ids >> id;) v.push_back(id);
    if (i < texts.size()) cases.push_back({texts[i], std::move(v)});
  }
  EXPECT_EQ(texts.size(), i) << vocab_path;
  return cases;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

std::string gpt2_path() { return test::shared_dir() + "/data/tokenizer/ggml-vocab-gpt-2.gguf"; }

}  // namespace

TEST(TokenizerConformanceBpe, Gpt2) {
  TREESPEC_REQUIRE_SHARED();
  const auto t = test::load_tokenizer_gguf(gpt2_path());
  ASSERT_NE(dynamic_cast<const tokenizer::BpeTokenizer*>(t.tok.get()), nullptr);
  EXPECT_EQ(dynamic_cast<const tokenizer::BpeTokenizer*>(t.tok.get())->pre_tokenizer(), tokenizer::PreTokenizer::gpt2);
  const auto cases = read_vectors(gpt2_path());
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const auto& c : cases) {
    const auto ids = t.tok->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'\n got: " << show(ids) << "\nwant: " << show(c.ids);
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
