#include "core/memory.h"

#include <fmt/format.h>
#include <sys/sysinfo.h>

#include <fstream>
#include <sstream>

namespace treespec::core {

namespace {

bool read_u64(const std::string& path, uint64_t* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::string s;
  f >> s;
  if (s.empty() || s == "max") return false;  // cgroup v2 "max": no limit
  try {
    size_t used = 0;
    *out = std::stoull(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

bool meminfo_available(uint64_t* out) {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ss(line.substr(13));
      uint64_t kb = 0;
      std::string unit;
      if (ss >> kb >> unit && unit == "kB") {
        *out = kb * 1024;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

MemoryInfo available_memory() {
  MemoryInfo m;
  if (meminfo_available(&m.available)) {
    m.source = "MemAvailable in /proc/meminfo";
  } else {
    struct sysinfo si {};
    if (sysinfo(&si) == 0) {
      m.available = (static_cast<uint64_t>(si.freeram) + si.bufferram) * si.mem_unit;
      m.source = "free RAM from sysinfo";
    } else {
      m.available = UINT64_MAX;
      m.source = "unknown";
    }
  }
  // Containers: the cgroup limit, not the host's free memory, is what the OOM killer uses.
  const struct {
    const char* limit;
    const char* usage;
  } cgroups[] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                 {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& cg : cgroups) {
    uint64_t limit = 0, usage = 0;
    if (read_u64(cg.limit, &limit) && read_u64(cg.usage, &usage)) {
      const uint64_t room = limit > usage ? limit - usage : 0;
      if (room < m.available) {
        m.available = room;
        m.source = fmt::format("cgroup limit {} minus usage", cg.limit);
      }
      break;
    }
  }
  return m;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{} bytes ({:.1f} {})", bytes, v, units[u]);
}

}  // namespace treespec::core
