// treespec serve on stories260K: completions and chat, plain and streamed; greedy output
// equals `treespec run`; tokenize/detokenize; models, health, metrics; stop strings.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <memory>

#include "common/golden.h"
#include "common/server_process.h"
#include "common/test_util.h"
#include "common/tiny_model.h"
#include "gguf/gguf.h"

using namespace treespec;
using namespace treespec::test;
using nlohmann::json;

namespace {

// `treespec run --json` greedy reference for a prompt.
json run_reference(const std::string& prompt, int n, const std::string& extra = "") {
  std::string out;
  const std::string cmd = treespec_binary() + " run -m " + stories_gguf() + " -p " + shell_quote(prompt) + " -n " +
                          std::to_string(n) + " --temp 0 -t 1 -c 256 --json " + extra;
  EXPECT_EQ(run_command(cmd, &out), 0) << cmd;
  return json::parse(out);
}

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_shared()) return;
    plain_ = new ServerProcess(stories_gguf(), {"-t", "1", "-np", "2", "-c", "256"});
    // A fixed tree: MetricsCountersMove asserts drafts, which the default budget controller
    // may rightly not make on this cache-resident model.
    lookup_ =
        new ServerProcess(stories_gguf(), {"-t", "1", "-np", "2", "-c", "256", "--spec", "lookup", "--budget", "8"});
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete lookup_;
    plain_ = lookup_ = nullptr;
  }
  void SetUp() override { TREESPEC_REQUIRE_SHARED(); }

  static ServerProcess* plain_;
  static ServerProcess* lookup_;
};
ServerProcess* ServerApi::plain_ = nullptr;
ServerProcess* ServerApi::lookup_ = nullptr;

json completion(ServerProcess& s, const json& body) {
  auto c = s.client();
  const HttpReply r = post_json(c, "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json();
}

// Token counts of a usage object without prompt_tokens_details (its cached_tokens depends
// on which earlier requests left their prompts in the prefix cache).
json counts(json usage) {
  usage.erase("prompt_tokens_details");
  return usage;
}

// Streams a request; returns the concatenated text, checks the SSE framing.
std::string streamed_text(ServerProcess& s, const std::string& path, json body, json* last_chunk = nullptr,
                          json* usage_chunk = nullptr) {
  body["stream"] = true;
  auto c = s.client();
  const HttpReply r = post_json(c, path, body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  const auto events = sse_events(r.body);
  EXPECT_GE(events.size(), 2u);
  if (events.empty()) return {};
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int n_finish = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json j = json::parse(events[i]);
    if (j.at("choices").empty()) {  // the include_usage chunk
      if (usage_chunk) *usage_chunk = j;
      continue;
    }
    const json& ch = j.at("choices").at(0);
    if (path == "/v1/chat/completions") {
      EXPECT_EQ(j.at("object"), "chat.completion.chunk");
      if (i == 0) {
        EXPECT_EQ(ch.at("delta").at("role"), "assistant");
      }
      text += ch.at("delta").value("content", "");
    } else {
      EXPECT_EQ(j.at("object"), "text_completion");
      text += ch.at("text").get<std::string>();
    }
    if (!ch.at("finish_reason").is_null()) {
      ++n_finish;
      if (last_chunk) *last_chunk = j;
    }
  }
  EXPECT_EQ(n_finish, 1);
  return text;
}

}  // namespace

TEST_F(ServerApi, HealthModelsAndMetricsEndpoints) {
  auto c = plain_->client();
  const HttpReply h = get(c, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.json()["status"], "ok");
  const HttpReply m = get(c, "/v1/models");
  ASSERT_EQ(m.status, 200);
  const json mj = m.json();
  EXPECT_EQ(mj["object"], "list");
  ASSERT_EQ(mj["data"].size(), 1u);
  EXPECT_EQ(mj["data"][0]["object"], "model");
  EXPECT_FALSE(mj["data"][0]["id"].get<std::string>().empty());
  EXPECT_EQ(mj["data"][0]["meta"]["n_ctx"], 256);
  EXPECT_EQ(get(c, "/models").status, 200);
  const HttpReply mt = get(c, "/metrics");
  EXPECT_EQ(mt.status, 200);
  EXPECT_EQ(metric(mt.body, "treespec:model_ready"), 1.0);
  EXPECT_EQ(metric(mt.body, "treespec:num_slots"), 2.0);
}

// The prompt cache: a request that starts with an earlier request's prompt reuses its
// whole KV blocks (OpenAI's usage.prompt_tokens_details.cached_tokens), still answers what
// `run` answers, and /metrics counts it; the shared pool's usage is a gauge.
TEST_F(ServerApi, RepeatedPromptPrefixIsReusedAndCounted) {
  const std::string system =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.";
  const json r1 = completion(*plain_, {{"prompt", system + " One day"}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_TRUE(r1.contains("usage")) << r1.dump();
  const json r2 = completion(*plain_, {{"prompt", system + " Then"}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_TRUE(r2.contains("usage")) << r2.dump();
  EXPECT_GE(r2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << r2.dump();
  EXPECT_EQ(r2["choices"][0]["text"], run_reference(system + " Then", 8).at("text"));
  auto c = plain_->client();
  const HttpReply mt = get(c, "/metrics");
  EXPECT_GE(metric(mt.body, "treespec:prefix_cache_hits_total"), 16.0) << mt.body;
  EXPECT_GE(metric(mt.body, "treespec:prefix_cache_queries_total"),
            metric(mt.body, "treespec:prefix_cache_hits_total"));
  const double usage = metric(mt.body, "treespec:kv_cache_usage_perc");
  EXPECT_GT(usage, 0.0) << "the finished prompts stay cached";
  EXPECT_LE(usage, 1.0);
  EXPECT_EQ(metric(mt.body, "treespec:num_preemptions_total"), 0.0);
  const json meta = get(c, "/v1/models").json()["data"][0]["meta"];
  EXPECT_EQ(meta["n_kv_cells"], 256);
  EXPECT_EQ(meta["cache_type_k"], "f16");
  const HttpReply props = get(c, "/props");
  ASSERT_EQ(props.status, 200) << props.body;
  const json pj = props.json();
  EXPECT_EQ(pj["total_slots"], 2);
  EXPECT_EQ(pj["default_generation_settings"]["n_ctx"], 256);
  EXPECT_EQ(pj["kv_cache"]["n_cells"], 256);
  EXPECT_EQ(pj["kv_cache"]["n_blocks"], 16);
  EXPECT_EQ(pj["kv_cache"]["type_v"], "f16");
  EXPECT_TRUE(pj["kv_cache"]["prefix_cache"].get<bool>());
  EXPECT_FALSE(pj["model_path"].get<std::string>().empty());
}

TEST_F(ServerApi, GreedyCompletionEqualsTreespecRun) {
  for (const std::string prompt : {"Once upon a time", "The little dog", "Lily and Ben went to the park."}) {
    const json ref = run_reference(prompt, 40);
    for (ServerProcess* s : {plain_, lookup_}) {
      const json r = completion(*s, {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}});
      ASSERT_TRUE(r.contains("choices")) << r.dump();
      EXPECT_EQ(r["object"], "text_completion");
      EXPECT_EQ(r["choices"][0]["text"], ref["text"]) << prompt;
      EXPECT_EQ(r["usage"]["prompt_tokens"], ref["prompt_tokens"].size());
      EXPECT_EQ(r["usage"]["completion_tokens"], ref["tokens"].size());
      EXPECT_EQ(r["usage"]["total_tokens"], ref["prompt_tokens"].size() + ref["tokens"].size());
      EXPECT_EQ(r["choices"][0]["finish_reason"], ref["stats"]["finish_reason"] == "length" ? "length" : "stop");
      EXPECT_TRUE(r["choices"][0].contains("logprobs"));
      EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
      // Speculative statistics extension.
      const json& ts = r["treespec"];
      for (const char* k :
           {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "mean_accepted_length", "tokens_per_s"}) {
        EXPECT_TRUE(ts.contains(k)) << k;
      }
      EXPECT_EQ(ts["spec"], s == plain_ ? "none" : "lookup");
      if (s == plain_) {
        EXPECT_EQ(ts["num_drafts"], 0);
      }
      EXPECT_EQ(r["timings"]["draft_n"], ts["num_draft_tokens"]);
    }
  }
}

TEST_F(ServerApi, TokenPromptAndDefaultMaxTokens) {
  const json ref = run_reference("Once upon a time", 16);
  // A token-id prompt gives the same output as the text prompt.
  const json r = completion(*plain_, {{"prompt", ref["prompt_tokens"]}, {"temperature", 0}});
  EXPECT_EQ(r["choices"][0]["text"], ref["text"]);
  EXPECT_EQ(r["usage"]["completion_tokens"], 16);  // OpenAI's default max_tokens for completions
  const json r1 =
      completion(*plain_, {{"prompt", json::array({"Once upon a time"})}, {"temperature", 0}, {"max_tokens", 16}});
  EXPECT_EQ(r1["choices"][0]["text"], ref["text"]);
}

TEST_F(ServerApi, StreamedCompletionEqualsPlain) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}};
  for (ServerProcess* s : {plain_, lookup_}) {
    const json plain = completion(*s, body);
    json last, usage;
    json b = body;
    b["stream_options"] = {{"include_usage", true}};
    EXPECT_EQ(streamed_text(*s, "/v1/completions", b, &last, &usage), plain["choices"][0]["text"]);
    EXPECT_EQ(last["choices"][0]["finish_reason"], plain["choices"][0]["finish_reason"]);
    EXPECT_EQ(counts(usage["usage"]), counts(plain["usage"]));
    EXPECT_TRUE(last.contains("treespec"));
  }
}

TEST_F(ServerApi, ChatUsesFallbackTranscriptTemplate) {
  // stories260K has no tokenizer.chat_template: the plain "role: content" transcript is
  // used, with "\nuser:" as an extra stop string.
  const std::string transcript = "system: Tell a story.\nuser: Once upon a time\nassistant:";
  const json msgs = json::array(
      {{{"role", "system"}, {"content", "Tell a story."}}, {{"role", "user"}, {"content", "Once upon a time"}}});
  auto c = plain_->client();
  const HttpReply r =
      post_json(c, "/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 50}, {"temperature", 0}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const json same =
      completion(*plain_, {{"prompt", transcript}, {"max_tokens", 50}, {"temperature", 0}, {"stop", "\nuser:"}});
  EXPECT_EQ(j["choices"][0]["message"]["content"], same["choices"][0]["text"]);
  // The same counts; the second request reused the first one's prompt blocks.
  for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"})
    EXPECT_EQ(j["usage"][k], same["usage"][k]) << k;
  EXPECT_GE(same["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << same.dump();
  // And the same as `treespec run` up to the stop string.
  const json ref = run_reference(transcript, 50);
  const std::string ref_text = ref["text"];
  EXPECT_EQ(ref_text.substr(0, ref_text.find("\nuser:")), j["choices"][0]["message"]["content"]);
  // Streamed chat equals plain chat.
  EXPECT_EQ(streamed_text(*lookup_, "/v1/chat/completions",
                          json{{"messages", msgs}, {"max_tokens", 50}, {"temperature", 0}}),
            j["choices"][0]["message"]["content"]);
}

TEST_F(ServerApi, StopStringsTrimAndFinishWithStop) {
  const json base = completion(*plain_, {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}});
  const std::string full = base["choices"][0]["text"];
  ASSERT_GT(full.size(), 40u);
  // A stop string from the middle of the output (first occurrence decides).
  const std::string stop = full.substr(25, 4);
  const std::string expect = full.substr(0, full.find(stop));
  for (ServerProcess* s : {plain_, lookup_}) {
    const json body = {{"prompt", "Once upon a time"},
                       {"max_tokens", 60},
                       {"temperature", 0},
                       {"stop", {"zzzz", stop}}};
    const json r = completion(*s, body);
    EXPECT_EQ(r["choices"][0]["text"], expect);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), base["usage"]["completion_tokens"].get<int>());
    json last;
    EXPECT_EQ(streamed_text(*s, "/v1/completions", body, &last), expect);
    EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(counts(last["usage"]), counts(r["usage"]));  // same token count with and without streaming
  }
}

TEST_F(ServerApi, SeededSamplingIsReproducible) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 1.0}, {"seed", 1234}};
  const json a = completion(*plain_, body);
  const json b = completion(*plain_, body);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], b["usage"]["completion_tokens"]);
}

TEST_F(ServerApi, TokenizeAndDetokenize) {
  const json ref = run_reference("Hello world", 1);
  auto c = plain_->client();
  HttpReply r = post_json(c, "/tokenize", json{{"content", "Hello world"}, {"add_special", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["tokens"], ref["prompt_tokens"]);
  r = post_json(c, "/tokenize", json{{"content", "Hello world"}}.dump());
  const json no_bos = r.json()["tokens"];
  EXPECT_EQ(no_bos.size() + 1, ref["prompt_tokens"].size());  // add_special defaults to false
  r = post_json(c, "/tokenize", json{{"content", "Hello world"}, {"with_pieces", true}}.dump());
  ASSERT_EQ(r.status, 200);
  std::string joined;
  const json pieces = r.json()["tokens"];
  ASSERT_EQ(pieces.size(), no_bos.size());
  for (const auto& p : pieces) {
    EXPECT_TRUE(p.contains("id"));
    joined += p["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, " Hello world");  // SentencePiece dummy prefix
  r = post_json(c, "/detokenize", json{{"tokens", no_bos}}.dump());
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["content"], " Hello world");
}

TEST_F(ServerApi, MetricsCountersMove) {
  auto c = lookup_->client();
  const std::string before = get(c, "/metrics").body;
  const json r = completion(*lookup_, {{"prompt", "Once upon a time"}, {"max_tokens", 50}, {"temperature", 0}});
  // Wait until the request's bookkeeping has landed, then read everything at once.
  wait_metric(*lookup_, "treespec:e2e_request_latency_seconds_count",
              [&](double v) { return v >= metric(before, "treespec:e2e_request_latency_seconds_count") + 1; });
  wait_metric(*lookup_, "treespec:http_requests_total{path=\"/v1/completions\",status=\"200\"}", [&](double v) {
    return v >=
           std::max(0.0, metric(before, "treespec:http_requests_total{path=\"/v1/completions\",status=\"200\"}")) + 1;
  });
  wait_metric(*lookup_, "treespec:num_requests_running", [](double v) { return v == 0.0; });
  const std::string after = get(c, "/metrics").body;
  const int n_gen = r["usage"]["completion_tokens"];
  const int n_prompt = r["usage"]["prompt_tokens"];
  // Absent series (nothing counted yet) count as 0.
  auto delta = [&](const std::string& series) {
    return std::max(0.0, metric(after, series)) - std::max(0.0, metric(before, series));
  };
  EXPECT_EQ(delta("treespec:generation_tokens_total"), n_gen);
  EXPECT_EQ(delta("treespec:prompt_tokens_total"), n_prompt);
  EXPECT_EQ(delta("treespec:http_requests_total{path=\"/v1/completions\",status=\"200\"}"), 1.0);
  EXPECT_EQ(delta("treespec:time_to_first_token_seconds_count"), 1.0);
  EXPECT_EQ(delta("treespec:e2e_request_latency_seconds_count"), 1.0);
  EXPECT_GE(delta("treespec:request_success_total{finished_reason=\"length\"}") +
                delta("treespec:request_success_total{finished_reason=\"stop\"}"),
            1.0);
  // Speculative counters with vLLM's names, equal to the request's own statistics.
  EXPECT_EQ(delta("treespec:spec_decode_num_drafts_total"), r["treespec"]["num_drafts"].get<double>());
  EXPECT_EQ(delta("treespec:spec_decode_num_draft_tokens_total"), r["treespec"]["num_draft_tokens"].get<double>());
  EXPECT_EQ(delta("treespec:spec_decode_num_accepted_tokens_total"),
            r["treespec"]["num_accepted_tokens"].get<double>());
  EXPECT_GT(r["treespec"]["num_drafts"].get<int>(), 0);
  EXPECT_GE(metric(after, "treespec:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"}"), 0.0);
  EXPECT_EQ(metric(after, "treespec:num_requests_running"), 0.0);
  EXPECT_EQ(metric(after, "treespec:num_requests_waiting"), 0.0);
}

TEST(ServerChatTemplate, GgufTemplateIsDetectedAndApplied) {
  TREESPEC_REQUIRE_SHARED();
  const std::string model = stories_with_chat_template(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      "chatml.gguf");
  ServerProcess srv(model, {"-t", "1", "-c", "256"});
  auto c = srv.client();
  EXPECT_EQ(get(c, "/v1/models").json()["data"][0]["meta"]["chat_template"], "chatml");
  const json msgs = json::array({{{"role", "user"}, {"content", "Once upon a time"}}});
  const HttpReply chat =
      post_json(c, "/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 30}, {"temperature", 0}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  const HttpReply same =
      post_json(c, "/v1/completions",
                json{{"prompt", "<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n"},
                     {"max_tokens", 30},
                     {"temperature", 0}}
                    .dump());
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(chat.json()["choices"][0]["message"]["content"], same.json()["choices"][0]["text"]);
  EXPECT_EQ(counts(chat.json()["usage"]), counts(same.json()["usage"]));
  // --chat-template overrides the GGUF's.
  ServerProcess plain(model, {"-t", "1", "-c", "256", "--chat-template", "plain"});
  auto c2 = plain.client();
  EXPECT_EQ(get(c2, "/v1/models").json()["data"][0]["meta"]["chat_template"], "plain");
}

TEST(ServerChatTemplate, Qwen2ChatmlUsesRealSpecialTokens) {
  // A tiny random Qwen2 model with a byte-level BPE vocabulary in which <|im_start|> and
  // <|im_end|> are special tokens, and a ChatML template in its metadata: the rendered
  // chat must tokenize those markers as the special ids, not as text. (The template goes
  // through the Jinja interpreter, so it asks for the generation prompt itself.)
  test::TinyModelConfig cfg;
  cfg.arch = "qwen2";
  cfg.qkv_bias = true;
  cfg.tokenizer = "gpt2";
  cfg.bpe_pre = "qwen2";
  cfg.n_vocab = 320;
  cfg.customize = [](gguf::GgufWriter& w) {
    w.set("tokenizer.chat_template",
          gguf::Value::string("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                              "message['content'] + '<|im_end|>\\n'}}{% endfor %}"
                              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"));
  };
  const std::string path = temp_dir() + "/qwen2.gguf";
  test::write_tiny_model(path, cfg);
  ServerProcess srv(path, {"-t", "1", "-c", "128"});
  auto c = srv.client();
  EXPECT_EQ(get(c, "/v1/models").json()["data"][0]["meta"]["chat_template"], "chatml");
  const std::string rendered = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n";
  const HttpReply tk =
      post_json(c, "/tokenize", json{{"content", rendered}, {"add_special", true}, {"with_pieces", true}}.dump());
  ASSERT_EQ(tk.status, 200) << tk.body;
  const json pieces = tk.json()["tokens"];
  ASSERT_FALSE(pieces.empty());
  EXPECT_EQ(pieces[0]["piece"], "<|im_start|>");  // one special token, not characters
  const json msgs = json::array({{{"role", "user"}, {"content", "hello there"}}});
  const HttpReply chat =
      post_json(c, "/v1/chat/completions",
                json{{"messages", msgs}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json()["usage"]["prompt_tokens"], pieces.size());
  const HttpReply same =
      post_json(c, "/v1/completions",
                json{{"prompt", rendered}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(chat.json()["choices"][0]["message"]["content"], same.json()["choices"][0]["text"]);
  EXPECT_EQ(counts(chat.json()["usage"]), counts(same.json()["usage"]));
}
