// GGUF reader on arbitrary bytes: must either parse or throw treespec::Error; then every
// accessor of the parsed file must stay inside the image.
#include <cstdint>

#include "gguf/gguf.h"
#include "treespec/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  try {
    auto f = gguf::GgufFile::from_bytes(data, size, "fuzz");
    for (const auto& [key, value] : f->metadata()) {
      (void)f->find(key);
      if (value.type() == gguf::ValueType::array) (void)value.items().size();
    }
    uint64_t sum = 0;
    for (const auto& t : f->tensors()) {
      if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];  // ASan catches any out-of-bounds view
    }
    (void)sum;
    (void)f->get_string("general.architecture", "");
  } catch (const Error&) {
  }
  return 0;
}
