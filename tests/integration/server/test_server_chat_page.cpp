// `treespec serve`'s chat page at `/` (src/server/web/chat.html) and the per-request
// "spec" field it uses: the page is self-contained, a request may pick any method the
// server offers and gets plain greedy's text with it, and headless Chromium can load
// the page, send a message, watch the answer stream and stop one
// (chat_page_browser.py; skipped, saying why, where Chromium is missing or cannot start).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec::test;
using nlohmann::json;

namespace {

json chat_request(const std::string& text, int max_tokens, const std::string& spec) {
  json j = {{"messages", json::array({{{"role", "user"}, {"content", text}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (!spec.empty()) j["spec"] = spec;
  return j;
}

// The chromium binary: $TREESPEC_CHROMIUM, else Debian's `chromium` on PATH; "" if none.
std::string find_chromium() {
  if (const char* e = std::getenv("TREESPEC_CHROMIUM"); e != nullptr && *e != '\0') return e;
  std::string out;
  if (run_command("command -v chromium || command -v chromium-browser", &out) != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.substr(0, out.find('\n'));
}

}  // namespace

TEST(ChatPage, RootServesTheSelfContainedPageWithoutTheApiKey) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--api-key", "secret"});
  auto c = srv.client();
  const auto res = c.Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(res->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  EXPECT_NE(res->body.find("<title>treespec chat</title>"), std::string::npos);
  // No external assets: no URL of another origin anywhere in the page.
  for (const char* bad : {"http://", "https://", "//cdn", "@import", "<link"}) {
    EXPECT_EQ(res->body.find(bad), std::string::npos) << bad;
  }
  // The API the page calls stays behind the key.
  EXPECT_EQ(get(c, "/props").status, 401);
  EXPECT_EQ(get(c, "/props", "secret").status, 200);
}

TEST(ChatPage, RequestsPickAMethodTheServerOffersAndGetPlainGreedysText) {
  // A fixed tree for every method: under the default budget controller they may rightly
  // draft nothing on this cache-resident model, and the test asserts drafts.
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookahead", "--budget", "16"});
  auto c = srv.client();
  const json props = get(c, "/props").json();
  EXPECT_EQ(props["speculative_methods"], json::array({"none", "lookup", "lookahead", "ptd"})) << props.dump();
  EXPECT_EQ(props["default_generation_settings"]["speculative"], "lookahead");

  const HttpReply plain = post_json(c, "/v1/chat/completions", chat_request("Who was king?", 48, "none").dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.json()["treespec"]["spec"], "none");
  EXPECT_EQ(plain.json()["treespec"]["num_drafts"], 0);
  for (const std::string m : {"", "lookup", "lookahead", "ptd"}) {
    const HttpReply r = post_json(c, "/v1/chat/completions", chat_request("Who was king?", 48, m).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["treespec"]["spec"], m.empty() ? "lookahead" : m);
    EXPECT_GT(r.json()["treespec"]["num_drafts"].get<int>(), 0) << m;
    EXPECT_EQ(r.json()["choices"][0]["message"]["content"], plain.json()["choices"][0]["message"]["content"]) << m;
  }
  // Streamed too (the page streams), and on /v1/completions.
  json sreq = chat_request("Who was king?", 48, "ptd");
  sreq["stream"] = true;
  const HttpReply s = post_json(c, "/v1/chat/completions", sreq.dump());
  ASSERT_EQ(s.status, 200);
  std::string text;
  json last;
  for (const std::string& e : sse_events(s.body)) {
    if (e == "[DONE]") continue;
    const json j = json::parse(e);
    if (j["choices"][0].contains("delta") && j["choices"][0]["delta"].contains("content")) {
      text += j["choices"][0]["delta"]["content"].get<std::string>();
    }
    if (j.contains("treespec")) last = j;
  }
  EXPECT_EQ(text, plain.json()["choices"][0]["message"]["content"]);
  EXPECT_EQ(last["treespec"]["spec"], "ptd");
  const HttpReply comp =
      post_json(c, "/v1/completions", json{{"prompt", "And"}, {"max_tokens", 8}, {"spec", "lookup"}}.dump());
  ASSERT_EQ(comp.status, 200) << comp.body;
  EXPECT_EQ(comp.json()["treespec"]["spec"], "lookup");

  // A method that needs files the server was not given, an unknown one, a wrong type.
  for (const json& bad : {json("medusa"), json("draft"), json("fast"), json(3)}) {
    json req = chat_request("x", 4, "");
    req["spec"] = bad;
    const HttpReply r = post_json(c, "/v1/chat/completions", req.dump());
    EXPECT_EQ(r.status, 400) << bad.dump();
    EXPECT_EQ(r.json()["error"]["param"], "spec") << r.body;
    if (bad.is_string()) {
      EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("none, lookup, lookahead, ptd"), std::string::npos)
          << r.body;
    }
  }
}

TEST(ChatPage, HeadlessChromiumSendsAMessageAndSeesTheAnswerStream) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs Debian's chromium)";
  // -t 1 and lookahead as the server's method: slow enough (a few hundred tokens/s) that
  // the second turn is still streaming when the page's Stop button is pressed.
  ServerProcess srv(kKjvModel, {"-t", "1", "-np", "1", "--spec", "lookahead"});
  auto c = srv.client();
  const std::string q = "Who was the first king of Israel?";
  const HttpReply want = post_json(c, "/v1/chat/completions", chat_request(q, 64, "none").dump());
  ASSERT_EQ(want.status, 200) << want.body;

  const std::string dir = temp_dir();
  const std::string scenario = dir + "/scenario.json";
  std::ofstream(scenario) << json{
      {"turns",
       json::array(
           {{{"message", q}, {"method", "lookup"}, {"temperature", 0}, {"max_tokens", 64}},
            {{"message", "And then?"},
             {"method", "lookahead"},
             {"temperature", 0},
             {"max_tokens", 4000},
             {"stop", true}}})}}.dump();
  std::string out;
  const int rc =
      run_command("python3 " + std::string(TREESPEC_SOURCE_DIR) + "/tests/integration/server/chat_page_browser.py '" +
                      chromium + "' http://127.0.0.1:" + std::to_string(srv.port()) + "/ " + scenario + " 2>&1",
                  &out);
  if (rc == 77) GTEST_SKIP() << out;
  ASSERT_EQ(rc, 0) << out;
  const json r = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(r["console_errors"], json::array()) << out;
  EXPECT_EQ(r["methods"], json::array({"none", "lookup", "lookahead", "ptd"}));
  ASSERT_EQ(r["turns"].size(), 2u) << out;
  // Turn 1: the streamed answer is plain greedy's text, and the page says how it went.
  const json& t1 = r["turns"][0];
  EXPECT_FALSE(t1["error"].get<bool>()) << out;
  EXPECT_EQ(t1["answer"], want.json()["choices"][0]["message"]["content"]);
  EXPECT_TRUE(t1["streaming_seen"].get<bool>()) << out;
  EXPECT_GE(t1["content_events"].get<int>(), 2) << out;
  const std::string stats = t1["stats"].get<std::string>();
  for (const char* part : {"64 tokens", "tokens/s", "tokens/step", "lookup"}) {
    EXPECT_NE(stats.find(part), std::string::npos) << part << " in " << stats;
  }
  // Turn 2: Stop ended the answer while it streamed; the server cancelled the request.
  const json& t2 = r["turns"][1];
  EXPECT_EQ(t2["stats"], "stopped") << out;
  EXPECT_TRUE(t2["streaming_seen"].get<bool>()) << out;
  EXPECT_FALSE(t2["answer"].get<std::string>().empty());
  EXPECT_GT(wait_metric(srv, "treespec:request_success_total{finished_reason=\"cancelled\"}",
                        [](double v) { return v >= 1; }),
            0.0)
      << srv.log();
}
