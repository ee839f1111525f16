// docs/reliability.md, "serve": a busy port is an error naming it, --port 0 prints the
// chosen port even with -q, a model that fails to load is reported once.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/server_process.h"
#include "common/test_util.h"
#include "common/tiny_model.h"

using namespace treespec;

namespace {

const std::string& tiny_model() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/tiny.gguf";
    test::write_tiny_model(p, test::TinyModelConfig{});
    return p;
  }();
  return path;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

// Item 1: no SO_REUSEPORT; a second server on the port fails at once, naming the port
// (`timeout` bounds the test if it started and shared the port instead).
TEST(ServeCli, BusyPortIsAnErrorNamingThePort) {
  test::ServerProcess first(tiny_model(), {"-t", "1"});
  const std::string port = std::to_string(first.port());
  std::string out;
  const int rc = test::run_command("timeout 30 " + test::treespec_binary() + " serve -m '" + tiny_model() +
                                       "' -t 1 --host 127.0.0.1 --port " + port + " 2>&1",
                                   &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("port " + port + " is already in use"), std::string::npos) << out;
  EXPECT_TRUE(first.running());
}

// Item 1: the chosen port is printed with -q as well (ServerProcess reads it back).
TEST(ServeCli, PortZeroIsPrintedEvenWithQuiet) {
  test::ServerProcess s(tiny_model(), {"-t", "1", "-q"});
  EXPECT_GT(s.port(), 0);
  EXPECT_EQ(count_of(s.log(), "listening on http://127.0.0.1:" + std::to_string(s.port())), 1u) << s.log();
  auto c = s.client();
  EXPECT_EQ(test::get(c, "/health").status, 200);
}

// Item 2: a file that is not a GGUF: one error line, not the log line and the error.
TEST(ServeCli, ModelLoadFailureIsReportedOnce) {
  const std::string bad = test::temp_dir() + "/notgguf.gguf";
  test::run_command("echo garbage > '" + bad + "'");
  std::string out;
  EXPECT_EQ(test::run_command(test::treespec_binary() + " serve -q -m '" + bad + "' --port 0 2>&1", &out), 1);
  size_t error_lines = 0;
  for (size_t b = 0; b < out.size();) {
    const size_t e = std::min(out.find('\n', b), out.size());
    if (out.substr(b, e - b).find("error") != std::string::npos) ++error_lines;
    b = e + 1;
  }
  EXPECT_EQ(error_lines, 1u) << out;
  EXPECT_NE(out.find("treespec: error:"), std::string::npos) << out;
}
