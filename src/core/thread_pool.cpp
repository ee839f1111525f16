#include "core/thread_pool.h"

#include <sched.h>

#include <chrono>

namespace treespec::core {

namespace {
thread_local bool t_in_job = false;
constexpr int kSpinIterations = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
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

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
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
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    t_in_job = true;
    drain(thread);
    t_in_job = false;
    workers_done_.fetch_add(1, std::memory_order_acq_rel);
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
  workers_done_.store(0, std::memory_order_relaxed);
  next_task_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  t_in_job = true;
  drain(0);
  t_in_job = false;
  const int n_workers = n_threads_ - 1;
  while (workers_done_.load(std::memory_order_acquire) < n_workers) cpu_relax();
}

}  // namespace treespec::core
