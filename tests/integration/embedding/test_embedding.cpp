// The embeddable library as a user gets it: the build installed into a temporary prefix
// (the install step `cmake --install` runs, with the manifest kept in the temporary
// directory so that `make uninstall`'s one in the build tree is left alone), then
// examples/c/simple.c compiled with `cc simple.c $(pkg-config --cflags --libs treespec)`,
// statically against libtreespec.a, and through find_package(treespec); each prints
// exactly what `treespec run --temp 0` prints. The Python module, from the source tree
// and as `make install-python` installs it, gives the same text.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/test_util.h"

namespace fs = std::filesystem;
using treespec::test::run_command;
using treespec::test::shell_quote;

namespace {

const std::string kSrc = TREESPEC_SOURCE_DIR;
const std::string kBin = TREESPEC_BINARY_DIR;
const std::string kModel = kSrc + "/models/kjv-5m.gguf";
const std::string kHeads = kSrc + "/models/kjv-5m.medusa.gguf";

bool sanitized() {
  // The instrumented libtreespec.so cannot be loaded by an uninstrumented program.
  return TREESPEC_TEST_ASAN || TREESPEC_TEST_TSAN;
}

// Installs the build tree into DIR/prefix once per test binary (component "" or "python").
std::string installed_prefix(bool python = false) {
  static std::string dir;
  static bool python_done = false;
  if (dir.empty()) {
    dir = fs::absolute(fs::path(kBin) / "test_tmp" / ("embedding." + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string out;
    const int rc =
        run_command("cd " + shell_quote(dir) + " && cmake -DCMAKE_INSTALL_PREFIX=" + shell_quote(dir + "/prefix") +
                        " -P " + shell_quote(kBin + "/cmake_install.cmake") + " 2>&1",
                    &out);
    EXPECT_EQ(rc, 0) << out;
  }
  if (python && !python_done) {
    std::string out;
    const int rc =
        run_command("cd " + shell_quote(dir) + " && cmake -DCMAKE_INSTALL_COMPONENT=python -DCMAKE_INSTALL_PREFIX=" +
                        shell_quote(dir + "/prefix") + " -P " + shell_quote(kBin + "/cmake_install.cmake") + " 2>&1",
                    &out);
    EXPECT_EQ(rc, 0) << out;
    python_done = true;
  }
  return dir + "/prefix";
}

std::string treespec_run(const std::string& prompt, int n) {
  const auto r = treespec::test::run_treespec("run -m " + shell_quote(kModel) + " -p " + shell_quote(prompt) + " -n " +
                                              std::to_string(n) + " --temp 0");
  EXPECT_EQ(r.status, 0) << r.err;
  return r.out;
}

struct Case {
  std::string prompt;
  int n;
};
const Case kCases[] = {{"And it came to pass", 48}, {"In the beginning God", 0}, {"The LORD is my shepherd; I", 96}};

}  // namespace

TEST(Embedding, InstallLaysOutTheFiles) {
  if (sanitized()) GTEST_SKIP() << "sanitizer build";
  const std::string p = installed_prefix();
  for (const char* f : {"bin/treespec", "lib/libtreespec.so", "lib/libtreespec.so.0", "lib/libtreespec.a",
                        "include/treespec.h", "lib/pkgconfig/treespec.pc", "lib/cmake/treespec/treespecConfig.cmake",
                        "lib/cmake/treespec/treespecConfigVersion.cmake", "lib/cmake/treespec/treespecTargets.cmake"}) {
    EXPECT_TRUE(fs::exists(p + "/" + f)) << f;
  }
  std::string out;
  ASSERT_EQ(run_command("readelf -d " + shell_quote(p + "/lib/libtreespec.so") + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("Library soname: [libtreespec.so.0]"), std::string::npos) << out;
  // Only the C API is exported: every defined dynamic symbol is treespec_* (or the
  // version node).
  ASSERT_EQ(run_command("nm -D --defined-only " + shell_quote(p + "/lib/libtreespec.so") + " | awk '{print $3}'", &out),
            0);
  int n_api = 0;
  std::string others;
  size_t b = 0;
  while (b < out.size()) {
    size_t e = out.find('\n', b);
    if (e == std::string::npos) e = out.size();
    const std::string sym = out.substr(b, e - b);
    b = e + 1;
    if (sym.empty() || sym == "TREESPEC_0") continue;
    if (sym.rfind("treespec_", 0) == 0) ++n_api;
    else others += sym + " ";
  }
  EXPECT_GE(n_api, 15);
  EXPECT_EQ(others, "") << "symbols outside the C API are exported";
}

TEST(Embedding, SimpleCViaPkgConfigPrintsWhatRunPrints) {
  if (sanitized()) GTEST_SKIP() << "sanitizer build";
  const std::string p = installed_prefix();
  const std::string dir = treespec::test::temp_dir();
  std::string out;
  // Exactly the documented command, plus warnings as errors for the C11 header.
  const std::string env = "PKG_CONFIG_PATH=" + shell_quote(p + "/lib/pkgconfig");
  ASSERT_EQ(run_command("cd " + shell_quote(dir) + " && " + env + " cc -std=c11 -Wall -Wextra -Wpedantic -Werror " +
                            shell_quote(kSrc + "/examples/c/simple.c") + " $(" + env +
                            " pkg-config --cflags --libs treespec) -o simple 2>&1",
                        &out),
            0)
      << out;
  // Statically: libtreespec.a alone, with the private libraries pkg-config --static lists.
  ASSERT_EQ(run_command("cd " + shell_quote(dir) + " && cc " + shell_quote(kSrc + "/examples/c/simple.c") + " $(" +
                            env + " pkg-config --cflags treespec) " + shell_quote(p + "/lib/libtreespec.a") + " $(" +
                            env + " pkg-config --static --libs treespec | sed 's/-ltreespec//') -o simple_static 2>&1",
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command("ldd " + shell_quote(dir + "/simple_static"), &out), 0);
  EXPECT_EQ(out.find("libtreespec"), std::string::npos) << out;
  for (const Case& c : kCases) {
    const std::string want = treespec_run(c.prompt, c.n);
    ASSERT_FALSE(want.empty());
    std::string got;
    EXPECT_EQ(run_command("LD_LIBRARY_PATH=" + shell_quote(p + "/lib") + " " + shell_quote(dir + "/simple") + " " +
                              shell_quote(kModel) + " " + shell_quote(c.prompt) + " " + std::to_string(c.n),
                          &got),
              0);
    EXPECT_EQ(got, want) << c.prompt;
    EXPECT_EQ(run_command(shell_quote(dir + "/simple_static") + " " + shell_quote(kModel) + " " +
                              shell_quote(c.prompt) + " " + std::to_string(c.n),
                          &got),
              0);
    EXPECT_EQ(got, want) << c.prompt;
  }
  // The installed binary is the same program.
  std::string installed;
  ASSERT_EQ(run_command(shell_quote(p + "/bin/treespec") + " run -m " + shell_quote(kModel) +
                            " -p 'And it came to pass' -n 48 --temp 0 2>/dev/null",
                        &installed),
            0);
  EXPECT_EQ(installed, treespec_run("And it came to pass", 48));
  // Bad input: a message naming the file, exit status 1, no crash.
  std::string err;
  EXPECT_EQ(run_command("LD_LIBRARY_PATH=" + shell_quote(p + "/lib") + " " + shell_quote(dir + "/simple") +
                            " /nonexistent/m.gguf hi 4 2>&1",
                        &err),
            1);
  EXPECT_NE(err.find("/nonexistent/m.gguf"), std::string::npos) << err;
}

TEST(Embedding, FindPackageGivesTheImportedTarget) {
  if (sanitized()) GTEST_SKIP() << "sanitizer build";
  const std::string p = installed_prefix();
  const std::string dir = treespec::test::temp_dir();
  treespec::test::run_command("mkdir -p " + shell_quote(dir + "/proj"));
  {
    FILE* f = std::fopen((dir + "/proj/CMakeLists.txt").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(
        f,
        "cmake_minimum_required(VERSION 3.16)\nproject(use_treespec C)\nfind_package(treespec 0.1 REQUIRED)\n"
        "add_executable(simple %s/examples/c/simple.c)\ntarget_link_libraries(simple PRIVATE treespec::treespec)\n",
        kSrc.c_str());
    std::fclose(f);
  }
  std::string out;
  ASSERT_EQ(run_command("cmake -S " + shell_quote(dir + "/proj") + " -B " + shell_quote(dir + "/b") +
                            " -DCMAKE_PREFIX_PATH=" + shell_quote(p) + " >/dev/null 2>&1 && cmake --build " +
                            shell_quote(dir + "/b") + " 2>&1",
                        &out),
            0)
      << out;
  // The imported target carries the library's location (build-tree rpath), so no LD_LIBRARY_PATH.
  ASSERT_EQ(run_command(shell_quote(dir + "/b/simple") + " " + shell_quote(kModel) + " 'And it came to pass' 32", &out),
            0);
  EXPECT_EQ(out, treespec_run("And it came to pass", 32));
}

TEST(Embedding, PythonGreedyGenerateEqualsRun) {
  if (sanitized()) GTEST_SKIP() << "sanitizer build";
  const std::string py = TREESPEC_PYTHON;
  if (py.empty()) GTEST_SKIP() << "no python3 found at configure time";
  const std::string script = shell_quote(kSrc + "/tests/integration/embedding/check_python.py");
  const std::string want = treespec_run("And it came to pass", 48);
  // From the source tree, the library named by TREESPEC_LIBRARY.
  std::string got;
  EXPECT_EQ(run_command("PYTHONPATH=" + shell_quote(kSrc + "/python") + " TREESPEC_LIBRARY=" +
                            shell_quote(kBin + "/src/capi/libtreespec.so.0") + " " + shell_quote(py) + " " + script +
                            " " + shell_quote(kModel) + " 'And it came to pass' 48 " + shell_quote(kHeads) + " 2>&1",
                        &got),
            0)
      << got;
  EXPECT_EQ(got, want);
  // As `make install-python` installs it: the module finds PREFIX/lib by itself.
  const std::string p = installed_prefix(true);
  ASSERT_TRUE(fs::exists(p + "/" + TREESPEC_PYTHON_SITE + "/treespec/_install.py"));
  EXPECT_EQ(run_command("env -u TREESPEC_LIBRARY PYTHONPATH=" + shell_quote(p + "/" + TREESPEC_PYTHON_SITE) + " " +
                            shell_quote(py) + " " + script + " " + shell_quote(kModel) +
                            " 'And it came to pass' 48 2>&1",
                        &got),
            0)
      << got;
  EXPECT_EQ(got, want);
  // A wrong TREESPEC_LIBRARY is an error naming it.
  EXPECT_NE(run_command("PYTHONPATH=" + shell_quote(kSrc + "/python") +
                            " TREESPEC_LIBRARY=/nonexistent/libtreespec.so " + shell_quote(py) +
                            " -c 'import treespec; treespec.Model(\"x\")' 2>&1",
                        &got),
            0);
  EXPECT_NE(got.find("/nonexistent/libtreespec.so"), std::string::npos) << got;
}

TEST(Embedding, PipInstallWorksOffline) {
  if (sanitized()) GTEST_SKIP() << "sanitizer build";
  const std::string py = TREESPEC_PYTHON;
  std::string out;
  if (py.empty() || run_command(shell_quote(py) + " -m pip --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no pip";
  // From a copy of the files pip needs, so the source tree gets no build directories.
  const std::string dir = treespec::test::temp_dir();
  ASSERT_EQ(run_command("mkdir -p " + shell_quote(dir + "/src") + " && cp -r " + shell_quote(kSrc + "/pyproject.toml") +
                            " " + shell_quote(kSrc + "/setup.cfg") + " " + shell_quote(kSrc + "/README.md") + " " +
                            shell_quote(kSrc + "/python") + " " + shell_quote(dir + "/src") + " 2>&1",
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command("cd " + shell_quote(dir + "/src") + " && PIP_NO_INDEX=1 " + shell_quote(py) +
                            " -m pip install --no-build-isolation --no-deps --disable-pip-version-check --target " +
                            shell_quote(dir + "/site") + " . 2>&1",
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command("cd " + shell_quote(dir) + " && PYTHONPATH=" + shell_quote(dir + "/site") +
                            " TREESPEC_LIBRARY=" + shell_quote(kBin + "/src/capi/libtreespec.so.0") + " " +
                            shell_quote(py) + " -c 'import treespec; m = treespec.Model(\"" + kModel +
                            "\"); print(treespec.__file__); print(m.generate(\"And it came to pass\", max_tokens=8, "
                            "temperature=0))' 2>&1",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find(dir + "/site/treespec/__init__.py"), std::string::npos) << out;
}
