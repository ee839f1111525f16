#include "core/mapped_files.h"

#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX sigaction, not <csignal>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace treespec::core {

namespace {

// One registry slot. state: 0 free, 1 being written, 2 ready. The handler reads only
// ready slots and only plain fields, so it stays async-signal-safe.
struct Slot {
  std::atomic<int> state{0};
  uintptr_t begin = 0;
  uintptr_t end = 0;
  char path[512] = {};
};
Slot g_slots[kMaxMappedFiles];

void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void write_u64(uint64_t v) {
  char buf[24];
  int i = 23;
  buf[i] = '\0';
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && i > 0);
  write_str(buf + i);
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  // si_addr is meaningful only for faults the kernel raised (si_code > 0); a SIGBUS
  // sent with kill/raise keeps its default action.
  const bool fault = info != nullptr && info->si_code > 0;
  const auto addr = fault ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  for (const Slot& s : g_slots) {
    if (!fault) break;
    if (s.state.load(std::memory_order_acquire) != 2 || addr < s.begin || addr >= s.end) continue;
    write_str("\ntreespec: error: model file '");
    write_str(s.path);
    write_str("' was truncated or rewritten while in use (bus error reading byte ");
    write_u64(addr - s.begin);
    write_str(
        " of its mapping); treespec reads weights from the file in place and needs it unchanged: replace a "
        "model by writing a new file and renaming it over the old one\n");
    ::_exit(kMappedFileFaultExit);
  }
  // Not a mapped model file: a genuine bug. Crash as the default action would.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int register_mapped_file(const void* base, size_t size, const char* path) {
  for (int i = 0; i < kMaxMappedFiles; ++i) {
    Slot& s = g_slots[i];
    int expected = 0;
    if (!s.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    s.begin = reinterpret_cast<uintptr_t>(base);
    s.end = s.begin + size;
    std::strncpy(s.path, path ? path : "?", sizeof s.path - 1);
    s.path[sizeof s.path - 1] = '\0';
    s.state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_mapped_file(int handle) {
  if (handle < 0 || handle >= kMaxMappedFiles) return;
  g_slots[handle].state.store(0, std::memory_order_release);
}

void install_mapped_file_fault_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace treespec::core
