#include "test_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace treespec::test {

namespace fs = std::filesystem;

std::string shared_dir() {
  if (const char* env = std::getenv("TREESPEC_SHARED"); env && *env) return env;
  return (fs::path(TREESPEC_SOURCE_DIR) / ".." / "shared").lexically_normal().string();
}

bool ci_mode() {
  const char* ci = std::getenv("CI");
  return ci && (std::string(ci) == "true" || std::string(ci) == "1");
}

bool have_shared() { return fs::is_directory(shared_dir()); }

std::string temp_dir() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "test";
  for (auto& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.') c = '_';
  }
  fs::path dir = fs::path(TREESPEC_BINARY_DIR) / "test_tmp" /
                 (name + "." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string shared_cache_path(const std::string& name) {
  struct stat st {};
  const long long stamp = ::stat("/proc/self/exe", &st) == 0
                              ? static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec
                              : 0;
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  const fs::path dir = fs::path(TREESPEC_BINARY_DIR) / "test_cache";
  fs::create_directories(dir);
  return (dir / (exe.filename().string() + "." + std::to_string(stamp) + "." + name)).string();
}

void publish_cache_file(const std::string& tmp, const std::string& path) { fs::rename(tmp, path); }

SharedCacheLock::SharedCacheLock(const std::string& path) {
  fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path + ".lock: " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) throw std::runtime_error("cannot lock " + path + ".lock: " + std::strerror(errno));
  }
}

SharedCacheLock::~SharedCacheLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::string treespec_binary() { return (fs::path(TREESPEC_BINARY_DIR) / "tools" / "treespec" / "treespec").string(); }

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int run_command(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  std::string acc;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) acc.append(buf.data(), n);
  const int status = ::pclose(p);
  if (out) *out = std::move(acc);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CliResult run_treespec(const std::string& args) {
  const std::string err_path = temp_dir() + "/stderr.txt";
  CliResult r;
  r.status = run_command(treespec_binary() + " " + args + " 2>'" + err_path + "'", &r.out);
  r.err = read_file(err_path);
  return r;
}

}  // namespace treespec::test
