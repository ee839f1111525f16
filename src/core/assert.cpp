#include "core/assert.h"

#include <cstdio>
#include <cstdlib>

namespace treespec::core {

void assert_fail(const char* cond, const char* msg, const char* file, int line) {
  std::fprintf(stderr, "treespec: internal error: %s (%s) at %s:%d\n", msg ? msg : "", cond, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace treespec::core
