// llama2.c importer on arbitrary bytes. Framing: u32 split, then checkpoint bytes, then
// tokenizer bytes. If the split's top bit is set, the checkpoint ends where its own
// header says it should (so mutations of weights and tokenizer keep a checkpoint the
// importer accepts and reach the tokenizer parser and the conversion); otherwise split
// (mod the size) is where it ends. Must convert or throw treespec::Error; a conversion
// must produce a GGUF image our own reader accepts, with a usable tokenizer.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gguf/llama2c.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace {

// Bytes the checkpoint header claims (28 + 4 x floats), or 0 if it is not plausible.
uint64_t implied_size(const uint8_t* p, size_t size) {
  if (size < 28) return 0;
  int32_t h[7];
  std::memcpy(h, p, sizeof h);
  for (int i : {0, 1, 2, 3, 4, 6}) {
    if (h[i] <= 0) return 0;
  }
  if (h[5] == 0 || h[5] == INT32_MIN || h[0] % h[3] != 0) return 0;
  using u128 = unsigned __int128;
  const u128 dim = static_cast<u128>(h[0]), hid = static_cast<u128>(h[1]), L = static_cast<u128>(h[2]);
  const u128 V = static_cast<u128>(h[5] > 0 ? h[5] : -h[5]);
  const u128 kv = static_cast<u128>(h[0] / h[3]) * static_cast<u128>(h[4]);
  u128 floats = V * dim + L * dim + L * dim * dim * 2 + L * kv * dim * 2 + L * dim + L * hid * dim * 3 + dim +
                static_cast<u128>(h[6]) * static_cast<u128>(h[0] / h[3]);
  if (h[5] < 0) floats += V * dim;
  const u128 bytes = 28 + floats * 4;
  return bytes <= size ? static_cast<uint64_t>(bytes) : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  if (size < 4) return 0;
  uint32_t split;
  std::memcpy(&split, data, 4);
  data += 4;
  size -= 4;
  const bool auto_split = (split & 0x80000000u) != 0;
  uint64_t cut = size ? split % static_cast<uint32_t>(size + 1) : 0;
  if (auto_split) {
    if (const uint64_t n = implied_size(data, size)) cut = n;
  }
  std::vector<uint8_t> image;
  try {
    gguf::Llama2cConvertOptions opts;
    opts.type = (split & 1) ? tensor::DType::f16 : tensor::DType::f32;
    auto w = gguf::convert_llama2c(data, cut, data + cut, size - cut, opts, "fuzz.bin", "fuzz_tok.bin");
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
