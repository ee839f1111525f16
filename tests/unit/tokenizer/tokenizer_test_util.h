// Shared helpers for the tokenizer tests: loading the shared vocab files and the
// stories260K tokenizer converted in memory, reading llama.cpp's conformance vectors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gguf/gguf.h"
#include "gguf/llama2c.h"
#include "tokenizer/tokenizer.h"

namespace treespec::test {

struct LoadedTokenizer {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

inline LoadedTokenizer load_tokenizer_gguf(const std::string& path) {
  LoadedTokenizer t;
  t.file = gguf::GgufFile::open(path);
  t.tok = tokenizer::Tokenizer::from_gguf(*t.file);
  return t;
}

// stories260K converted in memory (no file written); needs ../shared.
inline LoadedTokenizer load_stories_tokenizer() {
  const std::string dir = shared_dir() + "/models/stories260K/";
  const std::string model = read_file(dir + "stories260K.bin");
  const std::string tok = read_file(dir + "tok512.bin");
  const auto w = gguf::convert_llama2c(reinterpret_cast<const uint8_t*>(model.data()), model.size(),
                                       reinterpret_cast<const uint8_t*>(tok.data()), tok.size(), {});
  const auto bytes = w.to_bytes();
  LoadedTokenizer t;
  t.file = gguf::GgufFile::from_bytes(bytes.data(), bytes.size(), "stories260K.gguf");
  t.tok = tokenizer::Tokenizer::from_gguf(*t.file);
  return t;
}

// One llama.cpp tokenizer conformance case (../shared/data/tokenizer/*.gguf.inp/.out).
struct ConformanceCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The cases of `vocab_path`, read as llama.cpp's test-tokenizer-0 reads them: the .inp
// texts are separated by "\n__ggml_vocab_test__\n" (the file ends with one), .out has one
// line of ids per text. A count mismatch fails the calling test.
inline std::vector<ConformanceCase> read_conformance_cases(const std::string& vocab_path) {
  const std::string inp = read_file(vocab_path + ".inp");
  const std::string out = read_file(vocab_path + ".out");
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
  std::vector<std::vector<int32_t>> expected;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    for (int32_t id; ids >> id;) v.push_back(id);
    expected.push_back(std::move(v));
  }
  EXPECT_EQ(texts.size(), expected.size()) << vocab_path;
  std::vector<ConformanceCase> cases;
  for (size_t i = 0; i < std::min(texts.size(), expected.size()); ++i) cases.push_back({texts[i], expected[i]});
  return cases;
}

// Token ids as "1 2 3 " for failure messages.
inline std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace treespec::test
