// Persistent worker pool for kernels. The calling thread takes part in every job, so a
// pool of n threads starts n-1 workers once. Workers spin briefly after a job (decode
// steps arrive back to back), yielding the core every 1024 pauses of spinning (other threads
// may need it: more threads than cores), and then sleep on an atomic, so idle pools cost
// nothing.
// A job submitted from inside a job, or while another thread holds the pool, runs
// serially on the caller: never a deadlock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace treespec::core {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(task, thread) for every task in [0, n_tasks), spread over the threads;
  // returns when all are done. thread is in [0, n_threads()).
  template <typename F>
  void run(int n_tasks, F&& fn) {
    auto tramp = [](void* ctx, int task, int thread) { (*static_cast<F*>(ctx))(task, thread); };
    run_impl(n_tasks, tramp, static_cast<void*>(&fn));
  }

  // Splits [0, n) into about n_threads() * 4 chunks of at least `grain` items and calls
  // fn(begin, end, thread) for each.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t n_chunks = n_threads_ == 1 ? 1 : n_threads_ * 4;
    if (n / n_chunks < grain) n_chunks = (n + grain - 1) / grain;
    if (n_chunks < 1) n_chunks = 1;
    if (n_chunks == 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    const int64_t chunk = (n + n_chunks - 1) / n_chunks;
    run(static_cast<int>(n_chunks), [&](int task, int thread) {
      const int64_t b = task * chunk;
      const int64_t e = b + chunk < n ? b + chunk : n;
      if (b < e) fn(b, e, thread);
    });
  }

 private:
  using Tramp = void (*)(void*, int, int);
  void run_impl(int n_tasks, Tramp tramp, void* ctx);
  void worker_main(int thread);
  void drain(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;

  // Current job. Written by the submitter before it publishes a new generation in
  // ctrl_; stable while any worker is inside the job.
  Tramp tramp_ = nullptr;
  void* ctx_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_task_{0};
  // ctrl_: generation (high 32 bits) | closed flag (bit 31) | workers inside (low 31 bits).
  // A worker joins only while its generation is open, so a late worker never touches a
  // job the submitter has already finished: the submitter never waits for a thread the
  // OS has not scheduled yet (important on busy machines).
  std::atomic<uint64_t> ctrl_{0};
  std::atomic<uint32_t> wake_{0};  // bumped per job; sleeping workers wait on it (futex)
  std::atomic<int> sleepers_{0};   // workers in (or entering) futex_wait: skip the syscall when 0
  std::atomic<bool> stop_{false};
};

// Number of hardware threads available to this process (at least 1).
int hardware_threads();

// `pool` when given, else a one-thread pool made into `own` (code that runs between the
// engine's passes on its pool, or alone in tests).
inline ThreadPool& pool_or_own(ThreadPool* pool, std::unique_ptr<ThreadPool>& own) {
  if (pool) return *pool;
  own = std::make_unique<ThreadPool>(1);
  return *own;
}

}  // namespace treespec::core
