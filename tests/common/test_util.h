// Helpers shared by all tests: where ../shared is, skipping or failing when it is
// missing, temporary files, the path of the built treespec binary.
#pragma once

#include <gtest/gtest.h>

#include <string>

// 1 in AddressSanitizer / ThreadSanitizer builds, with gcc (__SANITIZE_ADDRESS__) or clang
// (__has_feature; make test-sanitize builds with clang), else 0.
#if defined(__SANITIZE_ADDRESS__)
#define TREESPEC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TREESPEC_TEST_ASAN 1
#endif
#endif
#ifndef TREESPEC_TEST_ASAN
#define TREESPEC_TEST_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TREESPEC_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TREESPEC_TEST_TSAN 1
#endif
#endif
#ifndef TREESPEC_TEST_TSAN
#define TREESPEC_TEST_TSAN 0
#endif

namespace treespec::test {

// The project's own model and its Medusa heads (models/ in the checkout; no ../shared).
inline const std::string kKjvModel = std::string(TREESPEC_SOURCE_DIR) + "/models/kjv-5m.gguf";
inline const std::string kKjvHeads = std::string(TREESPEC_SOURCE_DIR) + "/models/kjv-5m.medusa.gguf";

// ../shared beside the checkout, or $TREESPEC_SHARED.
std::string shared_dir();
// True if shared_dir() exists. When it does not: fails the test if CI=true, skips otherwise.
bool have_shared();
// Fresh empty directory under the build tree, unique per test.
std::string temp_dir();
// Path of the built treespec executable.
std::string treespec_binary();
// A path under the build tree for an expensive artefact (e.g. trained heads) that the
// processes of one build of this test binary share: ctest runs every test in its own
// process, so a once-per-process cache repeats the work per test. The name carries the
// binary's modification time, so a rebuilt binary never reads what an older build wrote.
// Write with publish_cache_file (atomic: readers see the old state or the whole file).
std::string shared_cache_path(const std::string& name);
// Holds an exclusive lock (flock) on `path`.lock while it lives: the process that finds
// no shared_cache_path file builds it under the lock, so tests that ctest starts at the
// same time wait for that one instead of each training the same heads again.
class SharedCacheLock {
 public:
  explicit SharedCacheLock(const std::string& path);
  ~SharedCacheLock();
  SharedCacheLock(const SharedCacheLock&) = delete;
  SharedCacheLock& operator=(const SharedCacheLock&) = delete;

 private:
  int fd_ = -1;
};
// Renames `tmp` (a complete file written by this process) to `path`.
void publish_cache_file(const std::string& tmp, const std::string& path);
// `s` in single quotes for /bin/sh (embedded single quotes escaped).
std::string shell_quote(const std::string& s);
// Runs a shell command, returns exit code; stdout captured into *out if given.
int run_command(const std::string& cmd, std::string* out = nullptr);
std::string read_file(const std::string& path);

// `treespec ARGS` (a shell-quoted argument string) with stdout and stderr apart.
struct CliResult {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
CliResult run_treespec(const std::string& args);

}  // namespace treespec::test

// Use at the top of a test that needs ../shared.
#define TREESPEC_REQUIRE_SHARED()                                                                              \
  do {                                                                                                         \
    if (!::treespec::test::have_shared()) {                                                                    \
      if (::treespec::test::ci_mode())                                                                         \
        FAIL() << "../shared not found at " << ::treespec::test::shared_dir()                                  \
               << " (set TREESPEC_SHARED); required when CI=true";                                             \
      GTEST_SKIP() << "../shared not found at " << ::treespec::test::shared_dir() << " (set TREESPEC_SHARED)"; \
    }                                                                                                          \
  } while (0)

namespace treespec::test {
bool ci_mode();
}
