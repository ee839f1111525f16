// Always-on invariant checks. A failed TREESPEC_ASSERT is a bug in treespec, never a
// reaction to user input (user input gets an Error or a Status).
#pragma once

namespace treespec::core {
[[noreturn]] void assert_fail(const char* cond, const char* msg, const char* file, int line);
}

#define TREESPEC_ASSERT(cond, msg)                                                \
  do {                                                                            \
    if (!(cond)) ::treespec::core::assert_fail(#cond, (msg), __FILE__, __LINE__); \
  } while (0)
