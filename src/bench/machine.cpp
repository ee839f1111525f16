#include "bench/machine.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/kernels.h"

namespace treespec::bench {

MachineInfo machine_info() {
  MachineInfo m;
  m.cpu_model = "unknown";
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      if (c != std::string::npos) {
        m.cpu_model = line.substr(line.find_first_not_of(" \t", c + 1));
        break;
      }
    }
  }
  m.n_cpus = core::hardware_threads();
  m.isa = kernels::isa_name(kernels::active_isa());
  utsname u{};
  if (uname(&u) == 0) m.os = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
#if defined(__clang__)
  m.compiler = fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  m.compiler = fmt::format("gcc {}", __VERSION__);
#else
  m.compiler = "unknown";
#endif
  return m;
}

namespace {

// Sums n words with independent accumulators so the loop is load-bound, not add-bound.
__attribute__((noinline)) uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

}  // namespace

std::vector<BandwidthSample> measure_read_bandwidth(const std::vector<int32_t>& threads, uint64_t bytes,
                                                    double min_seconds) {
  const size_t n_words = static_cast<size_t>(bytes / sizeof(uint64_t));
  core::AlignedBuffer<uint64_t> buf;
  buf.reserve(n_words, "bandwidth probe buffer");  // [n_words]
  std::vector<BandwidthSample> out;
  for (int32_t nt : threads) {
    core::ThreadPool pool(std::max(1, nt));
    const size_t per = (n_words + static_cast<size_t>(nt) - 1) / static_cast<size_t>(nt);
    // First touch from the threads that will read (NUMA placement), with non-zero data.
    pool.run(nt, [&](int task, int) {
      const size_t b = static_cast<size_t>(task) * per, e = std::min(n_words, b + per);
      for (size_t i = b; i < e; ++i) buf.data()[i] = i * 0x9E3779B97F4A7C15ull;
    });
    std::vector<uint64_t> sink(static_cast<size_t>(nt));
    double best = 0.0, spent = 0.0;
    for (int pass = 0; pass < 3 || spent < min_seconds; ++pass) {
      const double t0 = core::now_s();
      pool.run(nt, [&](int task, int) {
        const size_t b = static_cast<size_t>(task) * per, e = std::min(n_words, b + per);
        if (b < e) sink[static_cast<size_t>(task)] += sum_words(buf.data() + b, e - b);
      });
      const double dt = core::now_s() - t0;
      spent += dt;
      if (dt > 0) best = std::max(best, static_cast<double>(n_words * sizeof(uint64_t)) / dt / 1e9);
      if (pass > 1000) break;
    }
    volatile uint64_t keep = 0;
    for (uint64_t s : sink) keep = keep + s;
    (void)keep;
    out.push_back({nt, best});
  }
  return out;
}

bool reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

uint64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace treespec::bench
