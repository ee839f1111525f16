// docs/reliability.md, "serve": a busy port is an error naming it, --port 0 prints the
// chosen port even with -q, a model that fails to load is reported once.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/server_process.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "core/memory.h"
#include "kv/kv_cache.h"

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

// The KV pool (-c) larger than the memory left: one clear error naming what it needs,
// exit 1, before anything is allocated; --max-model-len above -c is refused too.
TEST(ServeCli, KvPoolBeyondMemoryIsAClearError) {
  test::TinyModelConfig cfg;
  cfg.n_embd = 64;
  cfg.n_head = 2;
  cfg.n_head_kv = 2;
  cfg.head_dim = 1024;  // 4 layers x 2 heads x 1024 x 2 (K, V) x 2 bytes = 32 KiB per cell
  cfg.n_layer = 4;
  const std::string path = test::temp_dir() + "/wide_heads.gguf";
  test::write_tiny_model(path, cfg);
  kv::KvShape shape{4, 2, 1024, 1, 1 << 20};
  shape.type_k = shape.type_v = tensor::DType::f16;
  const uint64_t need = kv::KvCache::required_bytes(shape);
  if (need <= core::available_memory().available)
    GTEST_SKIP() << "this machine has more than " << need << " bytes available";
  std::string out;
  EXPECT_EQ(test::run_command(test::treespec_binary() + " serve -q -m '" + path + "' --port 0 -c 1048576 2>&1", &out),
            1);
  EXPECT_NE(out.find("treespec: error: out of memory: the KV cache (1048576 cells"), std::string::npos) << out;
  EXPECT_NE(out.find(std::to_string(need) + " bytes"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::treespec_binary() + " serve -q -m '" + path +
                                  "' --port 0 -c 64 --max-model-len 128 2>&1",
                              &out),
            1);
  EXPECT_NE(out.find("--max-model-len 128 is larger than the KV cache pool (-c/--ctx-size 64)"), std::string::npos)
      << out;
}
