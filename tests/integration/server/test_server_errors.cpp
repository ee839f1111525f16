// Robustness: every bad input gets the right status and an OpenAI-style error body;
// API keys; a full queue; slow and vanishing clients; loading; signals.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

#include "common/golden.h"
#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec;
using namespace treespec::test;
using nlohmann::json;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Status and a well-formed OpenAI error body of the expected type.
void expect_error(const HttpReply& r, int status, const std::string& type, const std::string& what = {}) {
  EXPECT_EQ(r.status, status) << r.body;
  const json j = r.json();
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  EXPECT_EQ(j["error"]["type"], type) << r.body;
  EXPECT_TRUE(j["error"].contains("code"));
  if (!what.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(what), std::string::npos) << r.body;
  }
}

double wait_at_least(ServerProcess& s, const std::string& series, double value, double timeout_s) {
  return wait_metric(
      s, series, [&](double v) { return v >= value; }, timeout_s);
}

int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A request that keeps its slot busy for a long time (no EOS, long context).
json long_request() {
  return {{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"temperature", 0}, {"ignore_eos", true}};
}

}  // namespace

TEST(ServerErrors, BadRequestsGetOpenAiErrors) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-c", "64", "--max-body", "1"});
  auto c = srv.client();
  const std::string ct = "/v1/completions";
  expect_error(post_json(c, ct, "{\"prompt\": "), 400, "invalid_request_error", "JSON");
  expect_error(post_json(c, ct, "[1,2,3]"), 400, "invalid_request_error", "object");
  expect_error(post_json(c, ct, ""), 400, "invalid_request_error");
  expect_error(post_json(c, ct, "{}"), 400, "invalid_request_error", "prompt");
  expect_error(post_json(c, ct, R"({"prompt": 42})"), 400, "invalid_request_error", "prompt");
  expect_error(post_json(c, ct, R"({"prompt": "x", "max_tokens": "ten"})"), 400, "invalid_request_error", "max_tokens");
  expect_error(post_json(c, ct, R"({"prompt": "x", "temperature": -1})"), 400, "invalid_request_error", "temperature");
  expect_error(post_json(c, ct, R"({"prompt": "x", "n": 17})"), 400, "invalid_request_error", "n");
  expect_error(post_json(c, ct, R"({"prompt": "x", "stream": "yes"})"), 400, "invalid_request_error", "stream");
  expect_error(post_json(c, ct, R"({"prompt": [1, 99999]})"), 400, "invalid_request_error", "vocabulary");
  expect_error(post_json(c, ct, "{\"prompt\": \"caf\xc3\x28\"}"), 400, "invalid_request_error", "UTF-8");
  expect_error(post_json(c, "/v1/chat/completions", R"({"messages": "hi"})"), 400, "invalid_request_error", "messages");
  expect_error(post_json(c, "/v1/chat/completions", R"({"messages": []})"), 400, "invalid_request_error", "messages");
  expect_error(post_json(c, "/v1/chat/completions", R"({"messages": [{"content": "x"}]})"), 400,
               "invalid_request_error", "role");
  expect_error(post_json(c, "/tokenize", R"({"text": "x"})"), 400, "invalid_request_error", "content");
  expect_error(post_json(c, "/detokenize", R"({"tokens": [1, -1]})"), 400, "invalid_request_error", "tokens");

  // Unknown model: 404 with OpenAI's code.
  HttpReply r = post_json(c, ct, R"({"model": "gpt-17", "prompt": "x"})");
  expect_error(r, 404, "invalid_request_error", "gpt-17");
  EXPECT_EQ(r.json()["error"]["code"], "model_not_found");
  // The served id is accepted.
  const std::string id = get(c, "/v1/models").json()["data"][0]["id"];
  EXPECT_EQ(post_json(c, ct, json{{"model", id}, {"prompt", "x"}, {"max_tokens", 2}}.dump()).status, 200);

  // Prompt longer than the context (64): 400.
  std::string long_prompt;
  for (int i = 0; i < 80; ++i) long_prompt += " the cat";
  r = post_json(c, ct, json{{"prompt", long_prompt}}.dump());
  expect_error(r, 400, "invalid_request_error", "context");
  EXPECT_EQ(r.json()["error"]["code"], "context_length_exceeded");

  // max_tokens beyond the context: clamped to the room left, finish_reason "length".
  r = post_json(
      c, ct,
      json{{"prompt", "Once upon a time"}, {"max_tokens", 100000}, {"temperature", 0}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>(), 64 - j["usage"]["prompt_tokens"].get<int>() + 1);

  // Oversized body (limit 1 KiB): 413 with a JSON error.
  expect_error(post_json(c, ct, json{{"prompt", std::string(4000, 'a')}}.dump()), 413, "invalid_request_error",
               "larger");
  // Unknown route: 404 JSON.
  expect_error(get(c, "/v2/nothing"), 404, "not_found_error");
  // Still healthy after all that.
  EXPECT_EQ(get(c, "/health").status, 200);
  EXPECT_EQ(srv.stop(SIGTERM, 30.0), 0) << srv.log();
}

TEST(ServerErrors, ApiKeyEnforcedExceptHealthAndModels) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-c", "64", "--api-key", "sekret"});
  auto c = srv.client();
  const std::string body = R"({"prompt": "Once", "max_tokens": 3})";
  expect_error(post_json(c, "/v1/completions", body), 401, "authentication_error");
  expect_error(post_json(c, "/v1/completions", body, "wrong"), 401, "authentication_error");
  expect_error(post_json(c, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}]})"), 401,
               "authentication_error");
  expect_error(post_json(c, "/tokenize", R"({"content":"x"})"), 401, "authentication_error");
  expect_error(get(c, "/metrics"), 401, "authentication_error");
  EXPECT_EQ(post_json(c, "/v1/completions", body, "sekret").status, 200);
  EXPECT_EQ(get(c, "/metrics", "sekret").status, 200);
  EXPECT_EQ(get(c, "/health").status, 200);
  EXPECT_EQ(get(c, "/v1/models").status, 200);
}

TEST(ServerErrors, HealthIs503WhileLoading) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-c", "64", "--test-load-delay", "1.5"}, /*wait_ready=*/false);
  auto c = srv.client();
  expect_error(get(c, "/health"), 503, "unavailable_error", "Loading");
  expect_error(post_json(c, "/v1/completions", R"({"prompt": "x"})"), 503, "unavailable_error");
  EXPECT_EQ(get(c, "/v1/models").status, 200);  // the id is known before loading
  EXPECT_TRUE(srv.wait_healthy(30.0));
  EXPECT_EQ(post_json(c, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
}

TEST(ServerErrors, FullQueueAnswers503) {
  TREESPEC_REQUIRE_SHARED();
  // lookahead makes each token ~20x dearer on this cache-resident model, so the long
  // request below cannot finish on its own before the client hangs up (with the fast
  // kernels plain decoding runs 4000 tokens in under a second).
  ServerProcess srv(stories_gguf(), {"-t", "1", "-np", "1", "-c", "4096", "--max-queue", "0", "--spec", "lookahead"});
  // Occupy the only slot with a long streamed request; hang up once the 503 is checked.
  std::atomic<bool> got_data{false};
  std::atomic<bool> release{false};
  std::thread holder([&] {
    auto c = srv.client(60.0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    json b = long_request();
    b["stream"] = true;
    req.body = b.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      got_data = true;
      return !release.load();
    };
    c.send(req);
  });
  const double deadline = now_s() + 20.0;
  while (!got_data && now_s() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(got_data);
  auto c = srv.client();
  const HttpReply r = post_json(c, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  release = true;
  holder.join();
  expect_error(r, 503, "unavailable_error");
  EXPECT_EQ(r.json()["error"]["code"], "queue_full");
  // The hung-up stream was cancelled, the slot is free again.
  EXPECT_GE(wait_at_least(srv, "treespec:request_success_total{finished_reason=\"cancelled\"}", 1.0, 20.0), 1.0)
      << srv.log();
  EXPECT_EQ(post_json(c, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
}

TEST(ServerErrors, ClientDisconnectCancelsNonStreamingRequest) {
  TREESPEC_REQUIRE_SHARED();
  // lookahead: slow enough that 4000 tokens cannot finish within the client's 0.5 s.
  ServerProcess srv(stories_gguf(), {"-t", "1", "-np", "1", "-c", "4096", "--spec", "lookahead"});
  {
    auto c = srv.client(0.5);  // gives up after 0.5 s and closes the connection
    const HttpReply r = post_json(c, "/v1/completions", long_request().dump());
    EXPECT_EQ(r.status, -1);
  }
  EXPECT_GE(wait_at_least(srv, "treespec:request_success_total{finished_reason=\"cancelled\"}", 1.0, 20.0), 1.0)
      << srv.log();
  EXPECT_EQ(wait_metric(srv, "treespec:num_requests_running", [](double v) { return v == 0.0; }), 0.0);
  auto c = srv.client();
  EXPECT_LT(metric(get(c, "/metrics").body, "treespec:generation_tokens_total"), 4000.0);
}

TEST(ServerErrors, SlowClientIsTimedOutOthersServed) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-c", "64", "--timeout", "1"});
  const int fd = connect_raw(srv.port());
  ASSERT_GE(fd, 0);
  const std::string partial =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"pro";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL), static_cast<ssize_t>(partial.size()));
  // Meanwhile another client is served.
  auto c = srv.client();
  EXPECT_EQ(post_json(c, "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
  // The stalled request is answered 400 (JSON) after --timeout and the connection closed.
  const double t0 = now_s();
  bool closed = false;
  std::string got;
  while (now_s() - t0 < 10.0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      got.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(now_s() - t0, 4.0);
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_NE(got.find("\"invalid_request_error\""), std::string::npos) << got;
  EXPECT_NE(got.find("--timeout"), std::string::npos) << got;
  EXPECT_EQ(get(c, "/health").status, 200);
}

TEST(ServerErrors, SigtermWithIdleServerExitsZero) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-c", "64"});
  EXPECT_EQ(srv.stop(SIGTERM, 30.0), 0) << srv.log();
  ServerProcess srv2(stories_gguf(), {"-t", "1", "-c", "64"});
  EXPECT_EQ(srv2.stop(SIGINT, 30.0), 0) << srv2.log();
}

TEST(ServerErrors, SigtermFinishesOrCancelsInFlightRequests) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-np", "2", "-c", "4096", "--shutdown-grace", "0.5"});
  HttpReply streamed, plain;
  std::atomic<int> started{0};
  std::thread a([&] {
    auto c = srv.client(60.0);
    json b = long_request();
    b["stream"] = true;
    ++started;
    streamed = post_json(c, "/v1/completions", b.dump());
  });
  std::thread b([&] {
    auto c = srv.client(60.0);
    ++started;
    plain = post_json(c, "/v1/completions", long_request().dump());
  });
  // Wait until both are generating.
  EXPECT_GE(wait_at_least(srv, "treespec:num_requests_running", 2.0, 20.0), 2.0);
  EXPECT_EQ(srv.stop(SIGTERM, 30.0), 0);
  a.join();
  b.join();
  // Both clients got a complete, well-formed answer.
  ASSERT_EQ(streamed.status, 200);
  const auto ev = sse_events(streamed.body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  ASSERT_EQ(plain.status, 200) << plain.body;
  const std::string fr = plain.json()["choices"][0]["finish_reason"];
  EXPECT_TRUE(fr == "cancelled" || fr == "length") << fr;
}

TEST(ServerErrors, BadCommandLineFailsFast) {
  TREESPEC_REQUIRE_SHARED();
  std::string out;
  const std::string b = treespec_binary() + " serve -m " + stories_gguf() + " --port 0 ";
  EXPECT_NE(run_command(b + "--spec nosuch 2>&1", &out), 0);
  EXPECT_NE(out.find("nosuch"), std::string::npos) << out;
  EXPECT_NE(run_command(b + "--spec medusa --heads /nonexistent_heads.gguf 2>&1", &out), 0);
  EXPECT_NE(out.find("nonexistent_heads.gguf"), std::string::npos) << out;
  EXPECT_NE(run_command(b + "-np 0 2>&1", &out), 0);
  EXPECT_NE(out.find("parallel"), std::string::npos) << out;
  EXPECT_NE(run_command(b + "--chat-template vicuna 2>&1", &out), 0);
  EXPECT_NE(out.find("vicuna"), std::string::npos) << out;
  EXPECT_NE(run_command(treespec_binary() + " serve -m /nonexistent.gguf --port 0 2>&1", &out), 0);
  EXPECT_NE(out.find("nonexistent"), std::string::npos) << out;
  // A file that is not a GGUF: listens, fails to load, exits 1 with the reason.
  const std::string bad = temp_dir() + "/bad.gguf";
  run_command("echo garbage > " + bad);
  EXPECT_EQ(run_command(treespec_binary() + " serve -m " + bad + " --port 0 2>&1", &out), 1);
  EXPECT_NE(out.find("error"), std::string::npos) << out;
}
