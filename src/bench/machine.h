// What a benchmark report must say about the machine it ran on: CPU, cores, the kernel
// ISA in use, the DRAM read bandwidth (the physical limit of a memory-bound decode step)
// and the process's peak resident memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace treespec::bench {

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name" ("unknown" if absent)
  int32_t n_cpus = 0;     // hardware threads available to this process
  std::string isa;        // kernels::active_isa()
  std::string os;         // uname sysname release machine
  std::string compiler;   // compiler that built treespec
};
MachineInfo machine_info();

struct BandwidthSample {
  int32_t n_threads = 0;
  double gb_per_s = 0.0;  // 1e9 bytes per second, best pass
};

// DRAM read bandwidth with each thread count of `threads`: kernels::measure_read_bandwidth
// (the one probe; `treespec membw` runs it too) on a pool of that many threads, best of at
// least 3 passes lasting `min_seconds` in all. One sample per entry of `threads`.
// The bench records which probe ran (`probe` in the JSON) so reports stay comparable.
std::vector<BandwidthSample> measure_read_bandwidth(const std::vector<int32_t>& threads, uint64_t bytes,
                                                    double min_seconds);
constexpr const char* kBandwidthProbe = "kernels.read_sse2";

// Peak resident set size tracking. reset_peak_rss() asks Linux to restart the peak
// (writing 5 to /proc/self/clear_refs); it returns false where that is not allowed, and
// peak_rss_bytes() then reports the process-lifetime peak.
bool reset_peak_rss();
uint64_t peak_rss_bytes();

}  // namespace treespec::bench
