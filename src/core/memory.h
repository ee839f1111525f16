// How much memory this process can still take, for refusing a request before
// allocating it (a huge KV cache) instead of being killed by the OOM killer while
// filling it.
#pragma once

#include <cstdint>
#include <string>

namespace treespec::core {

struct MemoryInfo {
  uint64_t available = 0;  // bytes
  std::string source;      // where the figure came from, for messages
};

// The smaller of MemAvailable (/proc/meminfo; sysinfo free + buffer RAM if that is
// unreadable) and the room left under a cgroup memory limit (v2 memory.max -
// memory.current, or v1 memory.limit_in_bytes - memory.usage_in_bytes), if one is set.
MemoryInfo available_memory();

// "12345 bytes (11.8 KiB)": exact bytes plus a readable binary unit.
std::string format_bytes(uint64_t bytes);

}  // namespace treespec::core
