// The official OpenAI Node client against `treespec serve`: it is installed with npm into
// the build tree (once; `openai@4`), and the test skips, saying why, where node or the
// npm registry is missing. What the client gets must equal the raw HTTP answers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec::test;
using nlohmann::json;

namespace {

// The directory holding node_modules/openai, installed on first use; "" with *why set
// when it cannot be.
std::string openai_node_dir(std::string* why) {
  std::string out;
  if (run_command("command -v node >/dev/null && command -v npm >/dev/null") != 0) {
    *why = "node and npm are not installed";
    return {};
  }
  const std::string dir = std::string(TREESPEC_BINARY_DIR) + "/node_openai";
  if (std::filesystem::exists(dir + "/node_modules/openai/package.json")) return dir;
  std::filesystem::create_directories(dir);
  const int rc =
      run_command("cd '" + dir + "' && timeout 180 npm install --no-audit --no-fund --loglevel=error openai@4 2>&1",
                  &out);
  if (rc != 0) {
    *why = "npm install openai@4 failed (no registry?): " + out.substr(0, 400);
    return {};
  }
  return dir;
}
}  // namespace

TEST(ServerOpenAiNode, OfficialClientGetsWhatRawHttpGets) {
  std::string why;
  const std::string dir = openai_node_dir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  ServerProcess srv(kKjvModel, {"-t", "1", "--api-key", "sk-local", "--spec", "lookup"});
  auto c = srv.client();
  const json messages = json::array({{{"role", "user"}, {"content", "Who was the first king of Israel?"}}});
  const json chat = post_json(c, "/v1/chat/completions",
                              json{{"messages", messages}, {"max_tokens", 24}, {"temperature", 0}}.dump(), "sk-local")
                        .json();
  const json comp =
      post_json(c, "/v1/completions",
                json{{"prompt", "And it came to pass"}, {"max_tokens", 12}, {"temperature", 0}}.dump(), "sk-local")
          .json();
  const json emb =
      post_json(c, "/v1/embeddings", json{{"input", {"And it came to pass", "In the beginning"}}}.dump(), "sk-local")
          .json();

  // The raw HTTP answers of the sampling fields the script sends too.
  const json lp_comp =
      post_json(c, "/v1/completions",
                json{{"prompt", "And it came to pass"}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}}.dump(),
                "sk-local")
          .json();
  const json lp_chat =
      post_json(
          c, "/v1/chat/completions",
          json{{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}}
              .dump(),
          "sk-local")
          .json();
  // Ban the first token of the greedy chat answer: its first token id from /tokenize.
  const std::string first_word = chat["choices"][0]["message"]["content"].get<std::string>().substr(0, 3);
  const int32_t ban = post_json(c, "/tokenize", json{{"content", first_word}}.dump(), "sk-local").json()["tokens"][0];
  const json biased = post_json(c, "/v1/chat/completions",
                                json{{"messages", messages},
                                     {"max_tokens", 24},
                                     {"temperature", 0},
                                     {"logit_bias", {{std::to_string(ban), -100}}}}
                                    .dump(),
                                "sk-local")
                          .json();
  const json many =
      post_json(c, "/v1/chat/completions",
                json{{"messages", messages}, {"max_tokens", 12}, {"temperature", 1}, {"seed", 3}, {"n", 3}}.dump(),
                "sk-local")
          .json();

  // The script is copied next to node_modules so that `import 'openai'` resolves there.
  const std::string script = dir + "/openai_node_client.mjs";
  std::filesystem::copy_file(std::string(TREESPEC_SOURCE_DIR) + "/tests/integration/server/openai_node_client.mjs",
                             script, std::filesystem::copy_options::overwrite_existing);
  std::string out;
  const int rc = run_command("node '" + script + "' http://127.0.0.1:" + std::to_string(srv.port()) +
                                 "/v1 kjv-5m sk-local " + std::to_string(ban) + " 2>&1",
                             &out);
  ASSERT_EQ(rc, 0) << out << srv.log();
  const json r = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(r["chat"], chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(r["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 24);
  EXPECT_EQ(r["stream"], chat["choices"][0]["message"]["content"]);
  EXPECT_GE(r["stream_chunks"].get<int>(), 2);
  EXPECT_EQ(r["completion"], comp["choices"][0]["text"]);
  ASSERT_EQ(r["embeddings"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r["embeddings"][i].get<std::vector<float>>(), emb["data"][i]["embedding"].get<std::vector<float>>()) << i;
  }
  EXPECT_EQ(r["embedding_tokens"], emb["usage"]["prompt_tokens"]);
  EXPECT_EQ(r["models"], json::array({"kjv-5m"}));
  // Log-probabilities, logit_bias and n reach the client as raw HTTP has them.
  EXPECT_EQ(r["completion_logprobs"], lp_comp["choices"][0]["logprobs"]);
  EXPECT_EQ(r["completion_logprobs"]["tokens"].size(), 8u);
  EXPECT_EQ(r["chat_logprobs"], lp_chat["choices"][0]["logprobs"]["content"]);
  EXPECT_EQ(r["chat_logprobs"].size(), 8u);
  EXPECT_EQ(r["chat_stream_logprobs"], r["chat_logprobs"]);
  EXPECT_EQ(r["biased"], biased["choices"][0]["message"]["content"]);
  EXPECT_NE(r["biased"], r["chat"]);
  ASSERT_EQ(r["n_choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r["n_choices"][i][0], i);
    EXPECT_EQ(r["n_choices"][i][1], many["choices"][i]["message"]["content"]) << i;
  }
  EXPECT_EQ(r["n_usage"]["completion_tokens"], many["usage"]["completion_tokens"]);
  // A field we refuse reaches the client as a 400 naming it.
  // Structured output through the client: the raw answer's text, valid JSON in the schema's order.
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"king":{"type":"string","maxLength":12},"years":{"type":"integer","minimum":1,"maximum":99}},)"
      R"("required":["king","years"],"additionalProperties":false})");
  const json structured =
      post_json(c, "/v1/chat/completions",
                nlohmann::ordered_json{{"messages", messages},
                                       {"max_tokens", 64},
                                       {"temperature", 0},
                                       {"response_format",
                                        {{"type", "json_schema"},
                                         {"json_schema", {{"name", "reign"}, {"strict", true}, {"schema", schema}}}}}}
                    .dump(),
                "sk-local")
          .json();
  EXPECT_EQ(r["structured"], structured["choices"][0]["message"]["content"]);
  EXPECT_EQ(r["structured_finish"], "stop") << r["structured"];
  const nlohmann::ordered_json reign = nlohmann::ordered_json::parse(r["structured"].get<std::string>());
  EXPECT_EQ(reign.begin().key(), "king") << reign.dump();
  EXPECT_TRUE(reign["years"].is_number_integer() && reign["years"] >= 1 && reign["years"] <= 99) << reign.dump();
  EXPECT_EQ(r["refused"]["status"], 400) << out;
  EXPECT_EQ(r["refused"]["param"], "echo") << out;
}
