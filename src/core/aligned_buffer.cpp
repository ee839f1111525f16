#include "core/aligned_buffer.h"

#include <fmt/format.h>

namespace treespec::core {

void* aligned_alloc_or_throw(size_t bytes, const char* what) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    throw Error(fmt::format("out of memory: cannot allocate {} bytes ({:.1f} MiB) for {}", bytes,
                            static_cast<double>(bytes) / (1024.0 * 1024.0), what));
  }
  return p;
}

}  // namespace treespec::core
