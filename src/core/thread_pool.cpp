#include "core/thread_pool.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include <chrono>

namespace treespec::core {

namespace {
thread_local bool t_in_job = false;
constexpr uint32_t kSpinIterations = 20000;
// Spinning threads give the core away every kYieldEvery pauses (sched_yield: returns at
// once when nothing else is runnable). With more runnable threads than cores (two
// 2-thread processes on 2 cores, as under `ctest -j 2`, or a busy server) a spinning
// worker otherwise holds a core the thread it waits for needs; docs/reliability.md,
// "CI time".
constexpr uint32_t kYieldEvery = 1024;

// Raw futex wait/wake on the 32-bit wake counter. (libstdc++ 12's atomic::wait can miss
// a notify and hang; the kernel futex is simple and reliable.)
void futex_wait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One iteration of a spin wait: a pause, or every kYieldEvery-th a sched_yield.
inline void spin_once(uint32_t spin) {
  if (spin % kYieldEvery == 0) {
    sched_yield();
  } else {
    cpu_relax();
  }
}
}  // namespace

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

namespace {
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kClosed - 1;
inline uint32_t gen_of(uint64_t c) { return static_cast<uint32_t>(c >> 32); }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  ctrl_.store(kClosed);  // generation 0 is closed: nothing to join
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  futex_wake_all(&wake_);
  for (auto& w : workers_) w.join();
}

void ThreadPool::drain(int thread) {
  for (;;) {
    const int task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    tramp_(ctx_, task, thread);
  }
}

void ThreadPool::worker_main(int thread) {
  uint32_t seen = 0;  // joining a closed job is harmless, so start from "nothing seen"
  for (;;) {
    uint32_t w = wake_.load(std::memory_order_acquire);
    for (uint32_t spin = 1; w == seen && spin <= kSpinIterations; ++spin) {
      spin_once(spin);
      w = wake_.load(std::memory_order_acquire);
    }
    // stop_ is checked before sleeping: a worker that starts after the destructor's
    // wake-up must not wait for another one.
    while (w == seen && !stop_.load(std::memory_order_acquire)) {
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      futex_wait(&wake_, seen);
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      w = wake_.load(std::memory_order_acquire);
    }
    seen = w;
    if (stop_.load()) return;
    // Join the current job if it is still open.
    uint64_t c = ctrl_.load(std::memory_order_acquire);
    bool joined = false;
    while ((c & kClosed) == 0) {
      if (ctrl_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    t_in_job = true;
    drain(thread);
    t_in_job = false;
    ctrl_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_impl(int n_tasks, Tramp tramp, void* ctx) {
  if (n_tasks <= 0) return;
  std::unique_lock<std::mutex> lock(submit_mutex_, std::try_to_lock);
  if (n_threads_ == 1 || n_tasks == 1 || t_in_job || !lock.owns_lock()) {
    for (int t = 0; t < n_tasks; ++t) tramp(ctx, t, 0);
    return;
  }
  tramp_ = tramp;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  const uint32_t gen = gen_of(ctrl_.load(std::memory_order_relaxed)) + 1;
  ctrl_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);  // open, nobody inside
  wake_.fetch_add(1, std::memory_order_release);
  if (sleepers_.load(std::memory_order_acquire) > 0) futex_wake_all(&wake_);
  t_in_job = true;
  drain(0);
  t_in_job = false;
  // Close the job; wait only for workers that joined (they are running its tasks).
  uint64_t c = ctrl_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  // A worker inside the job may be waiting for this core; unsigned: may wrap in a long wait.
  for (uint32_t spin = 1; (c & kCountMask) != 0; ++spin) {
    spin_once(spin);
    c = ctrl_.load(std::memory_order_acquire);
  }
}

}  // namespace treespec::core
