// Who may call `treespec serve`: --api-key-file (several keys), CORS (preflights,
// Access-Control-Allow-Origin on every response, --cors-origins), and the metrics'
// model_name label and --metrics-prefix vllm (vLLM's dashboards unchanged).
#include <gtest/gtest.h>

#include <fstream>

#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec::test;

TEST(ServerAccess, ApiKeyFileCorsAndVllmMetricNames) {
  const std::string keys = temp_dir() + "/keys.txt";
  std::ofstream(keys) << "# two keys\nfirst-key\n\nsecond-key\n";
  ServerProcess srv(kKjvModel, {"-t", "1", "--api-key", "cli-key", "--api-key-file", keys, "--cors-origins",
                                "http://localhost:3000,https://app.example", "--metrics-prefix", "vllm", "-a", "kjv"});
  auto c = srv.client();
  const httplib::Headers from_app = {{"Origin", "http://localhost:3000"}};

  // Preflight: no key needed; the allowed origin, methods and the asked headers come back.
  auto pre = c.Options("/v1/chat/completions", {{"Origin", "http://localhost:3000"},
                                                {"Access-Control-Request-Method", "POST"},
                                                {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  auto denied = c.Options("/v1/chat/completions", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_NE(denied->body.find("https://evil.example"), std::string::npos) << denied->body;

  // Every key works; a 401 still carries the CORS header (so a page can show the error).
  for (const std::string k : {"cli-key", "first-key", "second-key"}) {
    httplib::Headers h = from_app;
    h.emplace("Authorization", "Bearer " + k);
    auto r = c.Get("/props", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << k;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
    EXPECT_EQ(r->get_header_value("Vary"), "Origin");
  }
  auto bad = c.Get("/props", {{"Origin", "https://app.example"}, {"Authorization", "Bearer # two keys"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401);
  EXPECT_EQ(bad->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  auto other = c.Get("/health", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));

  // A streamed answer has it too.
  httplib::Headers h = from_app;
  h.emplace("Authorization", "Bearer first-key");
  auto s = c.Post("/v1/completions", h, R"({"prompt":"And","max_tokens":4,"stream":true})", "application/json");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 200);
  EXPECT_EQ(s->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");

  // Metrics: vLLM's names, every series labelled with the served model name.
  wait_metric(srv, "vllm:request_success_total{finished_reason=\"length\"}", [](double v) { return v >= 1; });
  auto m = c.Get("/metrics", {{"Authorization", "Bearer second-key"}});
  ASSERT_TRUE(m);
  std::istringstream in(m->body);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++n;
    EXPECT_EQ(line.rfind("vllm:", 0), 0u) << line;
    EXPECT_NE(line.find("{model_name=\"kjv\""), std::string::npos) << line;
  }
  EXPECT_GT(n, 40);
  EXPECT_NE(m->body.find("vllm:time_per_output_token_seconds_count{model_name=\"kjv\"} 1\n"), std::string::npos)
      << m->body;
}

TEST(ServerAccess, BadAccessOptionsAreErrorsNamingThem) {
  const std::string empty = temp_dir() + "/empty.txt";
  std::ofstream(empty) << "\n# nothing\n";
  struct Case {
    std::string args, expect;
  };
  for (const Case& k : std::vector<Case>{{"--cors-origins localhost:3000", "'localhost:3000' is not an origin"},
                                         {"--api-key-file /nonexistent/keys.txt", "/nonexistent/keys.txt"},
                                         {"--api-key-file " + empty, "holds no key"},
                                         {"--metrics-prefix 9lives", "--metrics-prefix '9lives'"}}) {
    const CliResult r = run_treespec("serve -m " + kKjvModel + " --port 0 " + k.args);
    EXPECT_NE(r.status, 0) << k.args;
    EXPECT_NE(r.err.find(k.expect), std::string::npos) << k.args << ": " << r.err;
  }
}
