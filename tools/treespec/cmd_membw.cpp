// treespec membw [--mib N] [-t N]: DRAM read bandwidth with 1 and N threads, so reports
// can state what fraction of it a decode step achieves.
#include <cstdio>

#include "command.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace {

std::function<int()> setup_membw(CLI::App& sub) {
  auto mib = std::make_shared<int>(1024);
  auto threads = std::make_shared<int>(0);
  auto reps = std::make_shared<int>(5);
  sub.add_option("--mib", *mib, "buffer size in MiB (well above the last-level cache)")->capture_default_str();
  sub.add_option("-t,--threads", *threads, "threads for the N-thread figure (default: all available)");
  sub.add_option("--reps", *reps, "repetitions (best is reported)")->capture_default_str();
  return [mib, threads, reps]() -> int {
    using namespace treespec;
    const int n = *threads > 0 ? *threads : core::hardware_threads();
    const size_t bytes = static_cast<size_t>(*mib) << 20;
    double one_cpu = 0, all_cpu = 0;
    const double one = kernels::measure_read_bandwidth(nullptr, bytes, *reps, &one_cpu);
    core::ThreadPool pool(n);
    const double all = kernels::measure_read_bandwidth(&pool, bytes, *reps, &all_cpu);
    std::printf("read bandwidth (%d MiB buffer, best of %d): 1 thread %.2f GB/s, %d threads %.2f GB/s\n", *mib, *reps,
                one, n, all);
    std::printf(
        "per CPU-second of each thread (rate while running; differs from the above when the machine is busy): "
        "1 thread %.2f GB/s, %d threads %.2f GB/s per thread\n",
        one_cpu, n, all_cpu);
    std::printf("kernels: active ISA %s; AMX %s\n", kernels::isa_name(kernels::active_isa()),
                kernels::cpu_has_amx() ? "present (no AMX kernels yet)" : "not present on this CPU");
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("membw", "Measure DRAM read bandwidth with 1 and N threads", setup_membw);
