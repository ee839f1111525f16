// llama2.c importer on arbitrary bytes: the first 4 bytes choose where the checkpoint
// ends and the tokenizer begins. Must convert or throw treespec::Error; a conversion
// must produce a GGUF image our own reader accepts, with a usable tokenizer.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "gguf/llama2c.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  if (size < 4) return 0;
  uint32_t split;
  std::memcpy(&split, data, 4);
  data += 4;
  size -= 4;
  split = size ? split % static_cast<uint32_t>(size + 1) : 0;
  std::vector<uint8_t> image;
  try {
    gguf::Llama2cConvertOptions opts;
    opts.type = (split & 1) ? tensor::DType::f16 : tensor::DType::f32;
    auto w = gguf::convert_llama2c(data, split, data + split, size - split, opts, "fuzz.bin", "fuzz_tok.bin");
    image = w.to_bytes();
  } catch (const Error&) {
    return 0;
  }
  // The converter's output is ours: it must be valid.
  try {
    auto f = gguf::GgufFile::from_bytes(image.data(), image.size(), "converted");
    auto tok = tokenizer::Tokenizer::from_gguf(*f);
    (void)tok->decode(tok->encode("a b", true, true));
  } catch (const Error&) {
    std::abort();
  }
  return 0;
}
