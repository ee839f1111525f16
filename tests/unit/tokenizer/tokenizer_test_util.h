// Shared helpers for the tokenizer tests: loading the shared vocab files and the
// stories260K tokenizer converted in memory.
#pragma once

#include <memory>
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

}  // namespace treespec::test
