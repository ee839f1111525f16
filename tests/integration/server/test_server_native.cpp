// llama-server's native API on `treespec serve`: POST /completion (n_predict, its answer
// and stream shapes, stop_type), GET /slots, per-request cache_prompt, constrained output
// refused by name, and llama-server samplers we do not implement named in a header.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec::test;
using nlohmann::json;

namespace {
const std::string kPrompt = "And it came to pass, when the king";
}  // namespace

TEST(ServerNative, CompletionAnswersAsLlamaServerWithPlainGreedysText) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookup"});
  auto c = srv.client();
  const HttpReply oai =
      post_json(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}}.dump());
  ASSERT_EQ(oai.status, 200) << oai.body;
  const std::string want = oai.json()["choices"][0]["text"];

  const HttpReply r =
      post_json(c, "/completion", json{{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 0}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["content"], want);
  EXPECT_EQ(j["stop"], true);
  EXPECT_EQ(j["tokens_predicted"], 24);
  EXPECT_EQ(j["tokens_evaluated"], oai.json()["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["stop_type"], "limit");
  EXPECT_EQ(j["prompt"], kPrompt);
  EXPECT_EQ(j["model"], "kjv-5m");
  EXPECT_EQ(j["generation_settings"]["n_predict"], 24);
  EXPECT_EQ(j["generation_settings"]["speculative"], "lookup");
  EXPECT_EQ(j["timings"]["predicted_n"], 24);
  EXPECT_GE(j["id_slot"].get<int>(), 0);
  // max_tokens works as n_predict's alias; n_predict wins when both are given.
  EXPECT_EQ(post_json(c, "/completion", json{{"prompt", kPrompt}, {"max_tokens", 5}, {"temperature", 0}}.dump())
                .json()["tokens_predicted"],
            5);
  EXPECT_EQ(post_json(c, "/completion",
                      json{{"prompt", kPrompt}, {"max_tokens", 5}, {"n_predict", 7}, {"temperature", 0}}.dump())
                .json()["tokens_predicted"],
            7);

  // Streamed: pieces with stop false, then one final object with stop true; no [DONE].
  const HttpReply s =
      post_json(c, "/completion",
                json{{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 0}, {"stream", true}}.dump());
  ASSERT_EQ(s.status, 200);
  std::string text;
  int n_final = 0;
  for (const std::string& e : sse_events(s.body)) {
    ASSERT_NE(e, "[DONE]");
    const json ev = json::parse(e);
    text += ev["content"].get<std::string>();
    if (ev["stop"].get<bool>()) {
      ++n_final;
      EXPECT_EQ(ev["tokens_predicted"], 24);
      EXPECT_TRUE(ev.contains("timings"));
    }
  }
  EXPECT_EQ(text, want);
  EXPECT_EQ(n_final, 1);

  // A stop string: stop_type word, the word named, the text cut before it.
  const std::string word = want.substr(want.find(' ', 4) + 1, 3);
  const json w = post_json(c, "/completion",
                           json{{"prompt", kPrompt}, {"n_predict", 24}, {"temperature", 0}, {"stop", {word}}}.dump())
                     .json();
  EXPECT_EQ(w["stop_type"], "word") << w.dump();
  EXPECT_EQ(w["stopping_word"], word);
  EXPECT_EQ(want.rfind(w["content"].get<std::string>(), 0), 0u);
  EXPECT_LT(w["content"].get<std::string>().size(), want.size());

  // Bad values are errors naming the field.
  for (const json& bad :
       {json{{"prompt", "x"}, {"n_predict", 0}}, json{{"prompt", "x"}, {"n_predict", -2}}, json{{"n_predict", 4}}}) {
    const HttpReply e = post_json(c, "/completion", bad.dump());
    EXPECT_EQ(e.status, 400) << bad.dump();
  }
}

TEST(ServerNative, UnimplementedSamplersAreNamedInAHeader) {
  ServerProcess srv(kKjvModel, {"-t", "1"});
  auto c = srv.client();
  // llama-server's samplers we do not implement are accepted and named in the
  // X-Treespec-Ignored-Fields header; at their neutral values they are not named.
  // (Grammars are implemented: ServerGrammar.*.)
  for (const std::string route : {"/completion", "/v1/completions"}) {
    const HttpReply r = post_json(c, route,
                                  json{{"prompt", "x"},
                                       {"max_tokens", 2},
                                       {"mirostat", 2},
                                       {"tfs_z", 0.5},
                                       {"dry_multiplier", 0.8},
                                       {"xtc_probability", 0.5}}
                                      .dump());
    EXPECT_EQ(r.status, 200) << route << " " << r.body;
    EXPECT_EQ(r.header("X-Treespec-Ignored-Fields"), "dry_multiplier, mirostat, tfs_z, xtc_probability") << route;
  }
  const HttpReply ok = post_json(c, "/completion",
                                 json{{"prompt", "x"},
                                      {"n_predict", 2},
                                      {"typical_p", 1.0},
                                      {"tfs_z", 1},
                                      {"mirostat", 0},
                                      {"n_probs", 0},
                                      {"grammar", ""},
                                      {"json_schema", json::object()},
                                      {"response_format", {{"type", "text"}}}}
                                     .dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.header("X-Treespec-Ignored-Fields"), "");
}

TEST(ServerNative, CachePromptFalseNeitherReusesNorOffersThePrefix) {
  ServerProcess srv(kKjvModel, {"-t", "1"});
  auto c = srv.client();
  const std::string prompt = kPrompt + " of Israel heard that the king of Assyria was come up against the land";
  auto ask = [&](bool cache) {
    const HttpReply r =
        post_json(c, "/v1/completions",
                  json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"cache_prompt", cache}}.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  };
  const json first = ask(false);   // computes, and does not leave its prefix behind
  const json second = ask(true);   // so nothing to reuse; offers its own
  const json third = ask(true);    // reuses the second's
  const json fourth = ask(false);  // does not reuse
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_GT(third["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(fourth["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (const json* j : {&second, &third, &fourth}) EXPECT_EQ((*j)["choices"][0]["text"], first["choices"][0]["text"]);
}

TEST(ServerNative, SlotsShowWhatEachSlotDecodes) {
  // lookahead at -t 1 decodes slowly enough to see a slot busy.
  ServerProcess srv(kKjvModel, {"-t", "1", "-np", "2", "--spec", "lookahead"});
  auto c = srv.client();
  json slots = get(c, "/slots").json();
  ASSERT_EQ(slots.size(), 2u) << slots.dump();
  for (const json& s : slots) {
    EXPECT_FALSE(s["is_processing"].get<bool>());
    EXPECT_TRUE(s["id_task"].is_null());
  }
  json answer;
  std::thread client([&] {
    auto c2 = srv.client();
    answer = post_json(c2, "/v1/completions",
                       json{{"prompt", kPrompt}, {"max_tokens", 200}, {"temperature", 0}, {"ignore_eos", true}}.dump())
                 .json();
  });
  json busy;
  for (int i = 0; i < 500 && busy.is_null(); ++i) {
    for (const json& s : get(c, "/slots").json()) {
      if (s["is_processing"].get<bool>() && s["n_decoded"].get<int>() > 0) busy = s;
    }
    if (busy.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  client.join();
  ASSERT_FALSE(busy.is_null()) << "no slot was seen busy";
  EXPECT_EQ(busy["id_task"], answer["id"]);
  EXPECT_EQ(busy["speculative"], "lookahead");
  EXPECT_EQ(busy["n_prompt_tokens"], answer["usage"]["prompt_tokens"]);
  EXPECT_EQ(busy["n_ctx"], get(c, "/props").json()["default_generation_settings"]["n_ctx"]);
  // Idle again once it is done.
  for (int i = 0; i < 200; ++i) {
    slots = get(c, "/slots").json();
    if (!slots[0]["is_processing"].get<bool>() && !slots[1]["is_processing"].get<bool>()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(slots[0]["is_processing"].get<bool>() || slots[1]["is_processing"].get<bool>()) << slots.dump();
}

TEST(ServerNative, PenaltiesMatchRunAndEveryMethod) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookup"});
  auto c = srv.client();
  const json base = {{"prompt", kPrompt},     {"n_predict", 48},         {"temperature", 0},
                     {"repeat_penalty", 1.3}, {"presence_penalty", 0.4}, {"frequency_penalty", 0.1},
                     {"repeat_last_n", 32}};
  const HttpReply r = post_json(c, "/completion", base.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = r.json()["content"];
  const CliResult cli = run_treespec("run -m " + kKjvModel + " -p '" + kPrompt +
                                     "' -n 48 --temp 0 --repeat-penalty 1.3 --presence-penalty 0.4 "
                                     "--frequency-penalty 0.1 --repeat-last-n 32 --json");
  ASSERT_EQ(cli.status, 0) << cli.err;
  EXPECT_EQ(json::parse(cli.out)["text"], text);
  for (const std::string m : {"none", "lookahead", "ptd"}) {
    json b = base;
    b["spec"] = m;
    EXPECT_EQ(post_json(c, "/completion", b.dump()).json()["content"], text) << m;
  }
  json plain = base;
  plain.erase("repeat_penalty");
  plain.erase("presence_penalty");
  plain.erase("frequency_penalty");
  EXPECT_NE(post_json(c, "/completion", plain.dump()).json()["content"], text);
  // OpenAI's fields on /v1/completions; vLLM's repetition_penalty (whole context).
  const HttpReply o = post_json(c, "/v1/completions",
                                json{{"prompt", kPrompt},
                                     {"max_tokens", 48},
                                     {"temperature", 0},
                                     {"repeat_penalty", 1.3},
                                     {"presence_penalty", 0.4},
                                     {"frequency_penalty", 0.1},
                                     {"repeat_last_n", 32}}
                                    .dump());
  EXPECT_EQ(o.json()["choices"][0]["text"], text);
  const HttpReply v =
      post_json(c, "/v1/completions",
                json{{"prompt", kPrompt}, {"max_tokens", 48}, {"temperature", 0}, {"repetition_penalty", 1.3}}.dump());
  const HttpReply v2 = post_json(
      c, "/v1/completions",
      json{{"prompt", kPrompt}, {"max_tokens", 48}, {"temperature", 0}, {"repeat_penalty", 1.3}, {"repeat_last_n", -1}}
          .dump());
  ASSERT_EQ(v.status, 200) << v.body;
  EXPECT_EQ(v.json()["choices"][0]["text"], v2.json()["choices"][0]["text"]);
  for (const json& bad : {json{{"repeat_penalty", 0}}, json{{"presence_penalty", 2.5}}, json{{"frequency_penalty", -3}},
                          json{{"repeat_last_n", -2}}, json{{"repeat_penalty", 1.1}, {"repetition_penalty", 1.1}}}) {
    json b = {{"prompt", "x"}, {"max_tokens", 2}};
    b.update(bad);
    EXPECT_EQ(post_json(c, "/v1/completions", b.dump()).status, 400) << bad.dump();
  }
}
