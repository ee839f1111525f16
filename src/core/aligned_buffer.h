// Owning, 64-byte aligned, uninitialised array of trivially copyable T. Allocation
// failure raises treespec::Error naming the requested size (never a silent nullptr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "treespec/status.h"

namespace treespec::core {

void* aligned_alloc_or_throw(size_t bytes, const char* what);

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n, const char* what = "buffer") { resize(n, what); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // Discards the contents.
  void resize(size_t n, const char* what = "buffer") {
    if (n == size_) return;
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    if (n == 0) return;
    if (n > SIZE_MAX / sizeof(T)) throw Error(std::string("allocation too large for ") + what);
    data_ = static_cast<T*>(aligned_alloc_or_throw(n * sizeof(T), what));
    size_ = n;
  }
  // Grows (discarding contents) only if smaller than n.
  void reserve(size_t n, const char* what = "buffer") {
    if (n > size_) resize(n, what);
  }
  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace treespec::core
