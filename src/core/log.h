// Minimal leveled logging to stderr. Library code logs; it never prints to stdout.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace treespec::core {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3, none = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_write(LogLevel level, std::string_view msg);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace treespec::core

#define TS_LOG_DEBUG(...) ::treespec::core::log(::treespec::core::LogLevel::debug, __VA_ARGS__)
#define TS_LOG_INFO(...) ::treespec::core::log(::treespec::core::LogLevel::info, __VA_ARGS__)
#define TS_LOG_WARN(...) ::treespec::core::log(::treespec::core::LogLevel::warn, __VA_ARGS__)
#define TS_LOG_ERROR(...) ::treespec::core::log(::treespec::core::LogLevel::error, __VA_ARGS__)
