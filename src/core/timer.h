// Monotonic wall-clock helpers.
#pragma once

#include <chrono>
#include <cstdint>

namespace treespec::core {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double now_s() { return static_cast<double>(now_ns()) * 1e-9; }

// Accumulates elapsed seconds into a double on destruction.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& sink) : sink_(sink), t0_(now_ns()) {}
  ~ScopedTimer() { sink_ += static_cast<double>(now_ns() - t0_) * 1e-9; }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& sink_;
  int64_t t0_;
};

}  // namespace treespec::core
