// The kernels' run-time ISA detection (CPUID + XGETBV, written by hand because clang 14,
// used for the fuzz build, rejects __builtin_cpu_supports("f16c")) must agree with the
// kernel's view of the CPU: the flags in /proc/cpuinfo, which Linux clears for features
// whose register state it does not enable.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "kernels/kernels.h"

using namespace treespec;

namespace {

std::set<std::string> cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      std::istringstream ss(line.substr(line.find(':') + 1));
      std::string flag;
      while (ss >> flag) flags.insert(flag);
      break;
    }
  }
  return flags;
}

}  // namespace

TEST(CpuFeatures, IsaDetectionAgreesWithProcCpuinfo) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 only";
#else
  const auto flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  auto has = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (!flags.count(n)) return false;
    }
    return true;
  };
  const bool avx2 = has({"avx2", "fma", "f16c"});
  const bool avx512 = avx2 && has({"avx512f", "avx512bw", "avx512vl", "avx512dq"});
  const bool vnni = avx512 && has({"avx512_vnni"});
  EXPECT_TRUE(kernels::isa_supported(kernels::Isa::scalar));
  EXPECT_EQ(kernels::isa_supported(kernels::Isa::avx2), avx2);
  EXPECT_EQ(kernels::isa_supported(kernels::Isa::avx512), avx512);
  EXPECT_EQ(kernels::isa_supported(kernels::Isa::avx512_vnni), vnni);
#endif
}
