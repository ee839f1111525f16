// GGUF reader on arbitrary bytes: must either parse or throw treespec::Error; then every
// accessor of the parsed file must stay inside the image, every typed getter must return
// or throw Error, `treespec info`'s rendering must work on every value, and building a
// tokenizer from the metadata must succeed or throw Error (then encode/decode work).
#include <cstdint>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

template <typename F>
void expect_value_or_error(F&& f) {
  try {
    (void)f();
  } catch (const Error&) {
  }
}

void probe_getters(const gguf::GgufFile& f, const std::string& key) {
  expect_value_or_error([&] { return f.get_int(key); });
  expect_value_or_error([&] { return f.get_float(key); });
  expect_value_or_error([&] { return f.get_bool(key, false); });
  expect_value_or_error([&] { return f.get_string(key); });
  expect_value_or_error([&] { return f.get_string_array(key); });
  expect_value_or_error([&] { return f.get_float_array(key); });
  expect_value_or_error([&] { return f.get_int_array(key); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<gguf::GgufFile> f;
  try {
    f = gguf::GgufFile::from_bytes(data, size, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [key, value] : f->metadata()) {
    if (f->find(key) != &value) std::abort();
    (void)gguf::value_to_display(value);
    probe_getters(*f, key);
  }
  uint64_t sum = 0;
  for (const auto& t : f->tensors()) {
    if (f->find_tensor(t.name) != &t) std::abort();
    if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];  // ASan catches any out-of-bounds view
  }
  (void)sum;
  try {
    const auto tok = tokenizer::Tokenizer::from_gguf(*f);
    const auto ids = tok->encode("Hello w\xc3\xb6rld <s> \xff", true, true);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->n_vocab()) std::abort();
    }
    (void)tok->decode(ids, true);
  } catch (const Error&) {
  }
  return 0;
}
