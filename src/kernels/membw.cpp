// DRAM read bandwidth probe: every thread streams its own contiguous slice of a buffer
// much larger than the last-level cache, with 16-byte SSE2 loads (baseline x86-64: four
// independent accumulators keep enough loads in flight to saturate one core's share).
#include <emmintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>

#include "core/aligned_buffer.h"
#include "core/timer.h"
#include "kernels/kernels.h"

namespace treespec::kernels {

namespace {
std::atomic<uint64_t> g_sink{0};  // keeps the loads from being optimised away

uint64_t read_slice(const uint8_t* p, size_t bytes) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  const auto* v = reinterpret_cast<const __m128i*>(p);
  const size_t n = bytes / 64;
  for (size_t i = 0; i < n; ++i) {
    a0 = _mm_add_epi64(a0, _mm_load_si128(v + 4 * i));
    a1 = _mm_add_epi64(a1, _mm_load_si128(v + 4 * i + 1));
    a2 = _mm_add_epi64(a2, _mm_load_si128(v + 4 * i + 2));
    a3 = _mm_add_epi64(a3, _mm_load_si128(v + 4 * i + 3));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
  uint64_t out[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), s);
  return out[0] + out[1];
}
}  // namespace

double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double measure_read_bandwidth(core::ThreadPool* pool, size_t bytes, int reps, double* per_cpu_s, double min_seconds) {
  const int n_threads = pool ? pool->n_threads() : 1;
  bytes = std::max<size_t>(bytes, size_t{64} * 1024 * static_cast<size_t>(n_threads));
  const size_t slice = bytes / static_cast<size_t>(n_threads) / 64 * 64;
  core::AlignedBuffer<uint8_t> buf(slice * static_cast<size_t>(n_threads), "bandwidth probe buffer");
  std::memset(buf.data(), 1, buf.size());  // touch every page so reads hit real memory
  double best = 0.0, best_cpu = 0.0, spent = 0.0;
  for (int r = 0; (r < std::max(1, reps) || spent < min_seconds) && r < std::max(1000, reps); ++r) {
    const double c0 = process_cpu_s();
    const double t0 = core::now_s();
    if (pool && n_threads > 1) {
      pool->run(n_threads, [&](int task, int) {
        g_sink.fetch_add(read_slice(buf.data() + static_cast<size_t>(task) * slice, slice), std::memory_order_relaxed);
      });
    } else {
      g_sink.fetch_add(read_slice(buf.data(), slice), std::memory_order_relaxed);
    }
    const double dt = core::now_s() - t0;
    const double dc = process_cpu_s() - c0;
    spent += dt;
    const double total = static_cast<double>(slice) * n_threads;
    if (dt > 0) best = std::max(best, total / dt / 1e9);
    if (dc > 0) best_cpu = std::max(best_cpu, total / (dc / n_threads) / 1e9);
  }
  if (per_cpu_s) *per_cpu_s = best_cpu;
  return best;
}

}  // namespace treespec::kernels
