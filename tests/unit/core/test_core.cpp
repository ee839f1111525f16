#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <set>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "treespec/status.h"

using namespace treespec;

TEST(Rng, SameSeedSameSequence) {
  core::Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= x != c.next_u64();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, UniformInRangeAndRoughlyFlat) {
  core::Rng r(7);
  std::vector<int> hist(10, 0);
  for (int i = 0; i < 100000; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    hist[static_cast<int>(u * 10)]++;
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
  std::vector<int> ih(7, 0);
  for (int i = 0; i < 70000; ++i) ih[r.uniform_int(7)]++;
  for (int h : ih) EXPECT_NEAR(h, 10000, 500);
}

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int n_threads : {1, 2, 4}) {
    core::ThreadPool pool(n_threads);
    for (int rep = 0; rep < 200; ++rep) {
      const int n = 1 + rep % 37;
      std::vector<std::atomic<int>> hits(n);
      pool.run(n, [&](int task, int thread) {
        ASSERT_GE(thread, 0);
        ASSERT_LT(thread, n_threads);
        hits[task].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i << " threads " << n_threads;
    }
  }
}

TEST(ThreadPool, ParallelForCoversRangeAndNestedRunsSerially) {
  core::ThreadPool pool(3);
  std::vector<int> v(1001, 0);
  pool.parallel_for(1001, 10, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) v[i] += 1;
    // A nested job must not deadlock.
    std::atomic<int> inner{0};
    pool.run(3, [&](int, int) { inner++; });
    EXPECT_EQ(inner.load(), 3);
  });
  for (int x : v) ASSERT_EQ(x, 1);
}

TEST(AlignedBuffer, AlignedAndHugeAllocationThrows) {
  core::AlignedBuffer<float> b(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_THROW(core::AlignedBuffer<float>(size_t{1} << 61, "huge"), Error);
}

TEST(Status, ToString) {
  Status s(StatusCode::context_full, "seq 0 needs 10 rows, 3 free");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.to_string(), "context_full: seq 0 needs 10 rows, 3 free");
  EXPECT_TRUE(Status().ok());
}

// Regression: a worker that starts only after the pool's destructor has signalled stop
// must not sleep forever (the submitter finishes jobs alone when workers are late).
TEST(ThreadPool, DestroyRightAfterUseNeverHangs) {
  for (int rep = 0; rep < 200; ++rep) {
    core::ThreadPool pool(1 + rep % 4);
    std::atomic<int> n{0};
    pool.run(1 + rep % 5, [&](int, int) { n++; });
    ASSERT_EQ(n.load(), 1 + rep % 5);
  }
}
