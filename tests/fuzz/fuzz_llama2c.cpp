// llama2.c importer on arbitrary bytes: the first 4 bytes choose where the checkpoint
// ends and the tokenizer begins. Must convert or throw treespec::Error.
#include <cstdint>
#include <cstring>

#include "gguf/llama2c.h"
#include "treespec/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  if (size < 4) return 0;
  uint32_t split;
  std::memcpy(&split, data, 4);
  data += 4;
  size -= 4;
  split = size ? split % static_cast<uint32_t>(size + 1) : 0;
  try {
    gguf::Llama2cConvertOptions opts;
    auto w = gguf::convert_llama2c(data, split, data + split, size - split, opts, "fuzz.bin", "fuzz_tok.bin");
    (void)w.n_tensors();
  } catch (const Error&) {
  }
  return 0;
}
