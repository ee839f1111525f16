// Tokenizer encode/decode of arbitrary bytes: never crashes; encoding then decoding
// returns the input exactly (SPM with byte fallback is lossless for any byte string once
// the dummy-prefix space is accounted for).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  static const auto tok = fuzz::make_spm_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    const auto ids = tok->encode(text, true, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->n_vocab()) std::abort();
    }
    const std::string back = tok->decode(ids, special);
    if (!special && back != text) std::abort();  // byte fallback must lose nothing
  }
  // Decode arbitrary ids (interpreting bytes as ids mod vocab), and stream them.
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % tok->n_vocab());
  (void)tok->decode(ids, true);
  tokenizer::StreamDecoder dec(*tok);
  std::string streamed;
  for (int32_t id : ids) streamed += dec.push(id);
  streamed += dec.flush();
  return 0;
}
