#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace treespec::core {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_write(LogLevel level, std::string_view msg) {
  static const char* names[] = {"debug", "info", "warn", "error", ""};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "treespec %s: %.*s\n", names[static_cast<int>(level)], static_cast<int>(msg.size()), msg.data());
}

}  // namespace treespec::core
