#include "core/aligned_buffer.h"

#include <fmt/format.h>

namespace treespec::core {

void* aligned_alloc_or_throw(size_t bytes, const char* what) {
  // Rounding up to the alignment must not wrap around: SIZE_MAX - 10 bytes would become
  // a 0-byte allocation that callers then index as if it were huge.
  void* p = bytes > SIZE_MAX - 63 ? nullptr : std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) {
    throw Error(fmt::format("out of memory: cannot allocate {} bytes ({:.1f} MiB) for {}", bytes,
                            static_cast<double>(bytes) / (1024.0 * 1024.0), what));
  }
  return p;
}

}  // namespace treespec::core
