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

#include "core/thread_pool.h"
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

std::vector<BandwidthSample> measure_read_bandwidth(const std::vector<int32_t>& threads, uint64_t bytes,
                                                    double min_seconds) {
  std::vector<BandwidthSample> out;
  for (int32_t nt : threads) {
    core::ThreadPool pool(std::max(1, nt));
    out.push_back({nt, kernels::measure_read_bandwidth(&pool, static_cast<size_t>(bytes), 3, nullptr, min_seconds)});
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
