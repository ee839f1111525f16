// The sampling fields of issue 23 through real HTTP requests: logit_bias (OpenAI's and
// llama-server's forms), typical_p, log-probabilities (completions logprobs, chat
// logprobs/top_logprobs, native n_probs; plain and streamed), n > 1 choices, each the
// same with every speculative method; and what `treespec run` prints for the same flags.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec::test;
using nlohmann::json;

namespace {
const std::string kSmPrompt = "And the LORD spake unto Moses, saying";

json ok_json(const HttpReply& r, const std::string& what) {
  EXPECT_EQ(r.status, 200) << what << ": " << r.body;
  return r.status == 200 ? r.json() : json::object();
}

// The greedy answer's token ids (native n_probs entries carry them).
std::vector<int32_t> answer_ids(httplib::Client& c, const json& body) {
  json b = body;
  b["n_probs"] = 1;
  std::vector<int32_t> ids;
  const json r = ok_json(post_json(c, "/completion", b.dump()), "ids");
  for (const json& e : r["completion_probabilities"]) ids.push_back(e["id"]);
  return ids;
}

// The streamed events' JSON objects (without [DONE]).
std::vector<json> events(const HttpReply& r) {
  std::vector<json> out;
  for (const std::string& e : sse_events(r.body)) {
    if (e != "[DONE]") out.push_back(json::parse(e));
  }
  return out;
}

void append(json& into, const json& more) {
  for (const json& x : more) into.push_back(x);
}
}  // namespace

TEST(ServerSampling, LogitBiasFormsAndTypicalPMatchRunAndEveryMethod) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookup"});
  auto c = srv.client();
  const json base = {{"prompt", kSmPrompt}, {"n_predict", 32}, {"temperature", 0}};
  const std::vector<int32_t> plain = answer_ids(c, base);
  ASSERT_GE(plain.size(), 2u);
  const std::string ban = std::to_string(plain[0]), favour = std::to_string(plain[1]);
  // OpenAI's object (-100 effectively bans) and llama-server's pairs with false.
  json native = base;
  native["logit_bias"] = json::array({json::array({plain[0], false}), json::array({plain[1], 2.5})});
  const std::string text = ok_json(post_json(c, "/completion", native.dump()), "native")["content"];
  const json oai = {{"prompt", kSmPrompt},
                    {"max_tokens", 32},
                    {"temperature", 0},
                    {"logit_bias", {{ban, -100}, {favour, 2.5}}}};
  EXPECT_EQ(ok_json(post_json(c, "/v1/completions", oai.dump()), "oai")["choices"][0]["text"], text);
  const std::vector<int32_t> biased = answer_ids(c, native);
  EXPECT_EQ(std::count(biased.begin(), biased.end(), plain[0]), 0);
  EXPECT_NE(biased, plain);
  const CliResult cli = run_treespec("run -m " + kKjvModel + " -p '" + kSmPrompt + "' -n 32 --temp 0 -l " + ban +
                                     "-inf -l " + favour + "+2.5 --json");
  ASSERT_EQ(cli.status, 0) << cli.err;
  EXPECT_EQ(json::parse(cli.out)["text"], text);
  for (const std::string m : {"none", "lookahead", "ptd"}) {
    json b = native;
    b["spec"] = m;
    EXPECT_EQ(ok_json(post_json(c, "/completion", b.dump()), m)["content"], text) << m;
  }
  // Text keys are tokenized (llama-server): the object and the pair forms agree.
  json by_text = base;
  by_text["logit_bias"] = {{"LORD", false}};
  json by_pair = base;
  by_pair["logit_bias"] = json::array({json::array({"LORD", false})});
  const std::string t1 = ok_json(post_json(c, "/completion", by_text.dump()), "text key")["content"];
  EXPECT_EQ(ok_json(post_json(c, "/completion", by_pair.dump()), "text pair")["content"], t1);
  // An id outside the vocabulary is a 400 naming it.
  json bad = base;
  bad["logit_bias"] = {{"999999", 1}};
  const HttpReply e = post_json(c, "/completion", bad.dump());
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.json()["error"]["param"], "logit_bias");
  EXPECT_NE(e.body.find("999999"), std::string::npos) << e.body;

  // typical_p at temperature 1: the same tokens as run, with every method (coupled sampling).
  const json typ = {{"prompt", kSmPrompt}, {"n_predict", 32}, {"temperature", 1.0}, {"seed", 7}, {"typical_p", 0.5}};
  const std::string sampled = ok_json(post_json(c, "/completion", typ.dump()), "typical")["content"];
  const CliResult tcli =
      run_treespec("run -m " + kKjvModel + " -p '" + kSmPrompt + "' -n 32 --temp 1 -s 7 --typical 0.5 --json");
  ASSERT_EQ(tcli.status, 0) << tcli.err;
  EXPECT_EQ(json::parse(tcli.out)["text"], sampled);
  for (const std::string m : {"none", "ptd"}) {
    json b = typ;
    b["spec"] = m;
    EXPECT_EQ(ok_json(post_json(c, "/completion", b.dump()), m)["content"], sampled) << m;
  }
  json off = typ;
  off["typical_p"] = 1.0;
  EXPECT_NE(ok_json(post_json(c, "/completion", off.dump()), "typical off")["content"], sampled);
  json chat = {{"messages", {{{"role", "user"}, {"content", "Who?"}}}}, {"max_tokens", 4}, {"typical_p", 1.5}};
  const HttpReply te = post_json(c, "/v1/chat/completions", chat.dump());
  EXPECT_EQ(te.status, 400);
  EXPECT_EQ(te.json()["error"]["param"], "typical_p");
}

TEST(ServerSampling, LogprobsInEveryShapePlainAndStreamedAndWithEveryMethod) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookup"});
  auto c = srv.client();
  // Completions, legacy shape.
  const json comp = {
      {"prompt", kSmPrompt}, {"max_tokens", 20}, {"temperature", 0}, {"logprobs", 3}, {"repeat_penalty", 1.2}};
  const json r = ok_json(post_json(c, "/v1/completions", comp.dump()), "completions");
  const json& lp = r["choices"][0]["logprobs"];
  const std::string text = r["choices"][0]["text"];
  ASSERT_EQ(lp["tokens"].size(), 20u) << lp.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 20);
  for (size_t i = 0; i < 20; ++i) {
    const double chosen = lp["token_logprobs"][i];
    EXPECT_LE(chosen, 0.0);
    const json& top = lp["top_logprobs"][i];
    EXPECT_GE(top.size(), 3u);
    EXPECT_LE(top.size(), 4u);
    double best = -1e9;
    for (const auto& [k, v] : top.items()) best = std::max(best, v.get<double>());
    EXPECT_EQ(best, chosen) << "greedy: the chosen token is the most likely";
    EXPECT_EQ(top[lp["tokens"][i].get<std::string>()], chosen);
    const size_t at = lp["text_offset"][i], end = i + 1 < 20 ? lp["text_offset"][i + 1].get<size_t>() : text.size();
    if (i > 0) {
      EXPECT_EQ(text.substr(at, end - at), lp["tokens"][i].get<std::string>()) << i;  // ASCII text
    }
  }
  EXPECT_EQ(lp["text_offset"][0], 0);
  // Streamed: the chunks' entries add up to the plain answer's.
  json sc = comp;
  sc["stream"] = true;
  json s_lp = {{"tokens", json::array()},
               {"token_logprobs", json::array()},
               {"top_logprobs", json::array()},
               {"text_offset", json::array()}};
  std::string s_text;
  for (const json& ev : events(post_json(c, "/v1/completions", sc.dump()))) {
    if (ev["choices"].empty()) continue;
    s_text += ev["choices"][0]["text"].get<std::string>();
    const json& l = ev["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) append(s_lp[k], l[k]);
  }
  EXPECT_EQ(s_text, text);
  EXPECT_EQ(s_lp, lp);
  // The same numbers with every method.
  for (const std::string m : {"none", "lookahead", "ptd"}) {
    json b = comp;
    b["spec"] = m;
    EXPECT_EQ(ok_json(post_json(c, "/v1/completions", b.dump()), m)["choices"][0]["logprobs"], lp) << m;
  }

  // Chat: logprobs true, top_logprobs N; streamed entries add up to the plain ones.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Who was the first king of Israel?"}}}},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 2}};
  const json cr = ok_json(post_json(c, "/v1/chat/completions", chat.dump()), "chat");
  const json& content = cr["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 12u) << cr.dump();
  for (const json& e : content) {
    EXPECT_TRUE(e["token"].is_string());
    EXPECT_TRUE(e["bytes"].is_array());
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
  }
  json chat_s = chat;
  chat_s["stream"] = true;
  json s_content = json::array();
  for (const json& ev : events(post_json(c, "/v1/chat/completions", chat_s.dump()))) {
    if (!ev["choices"].empty() && ev["choices"][0]["logprobs"].is_object())
      append(s_content, ev["choices"][0]["logprobs"]["content"]);
  }
  EXPECT_EQ(s_content, content);
  json chat_m = chat;
  chat_m["spec"] = "ptd";
  EXPECT_EQ(ok_json(post_json(c, "/v1/chat/completions", chat_m.dump()),
                    "chat ptd")["choices"][0]["logprobs"]["content"],
            content);
  // Without logprobs: null, as before.
  json no = chat;
  no.erase("logprobs");
  no.erase("top_logprobs");
  EXPECT_TRUE(
      ok_json(post_json(c, "/v1/chat/completions", no.dump()), "no logprobs")["choices"][0]["logprobs"].is_null());

  // Native: completion_probabilities; the same log-probabilities as the completions answer.
  const json nat = {
      {"prompt", kSmPrompt}, {"n_predict", 20}, {"temperature", 0}, {"n_probs", 3}, {"repeat_penalty", 1.2}};
  const json nr = ok_json(post_json(c, "/completion", nat.dump()), "native");
  const json& probs = nr["completion_probabilities"];
  ASSERT_EQ(probs.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(probs[i]["logprob"], lp["token_logprobs"][i]) << i;
    EXPECT_EQ(probs[i]["token"], lp["tokens"][i]) << i;
    EXPECT_EQ(probs[i]["top_logprobs"].size(), 3u);
    EXPECT_EQ(probs[i]["top_logprobs"][0]["id"], probs[i]["id"]);
  }
  json ns = nat;
  ns["stream"] = true;
  json s_probs = json::array();
  for (const json& ev : events(post_json(c, "/completion", ns.dump()))) {
    if (ev.contains("completion_probabilities")) append(s_probs, ev["completion_probabilities"]);
  }
  EXPECT_EQ(s_probs, probs);
  // A stop string: one entry per token of the answer.
  json stop = nat;
  stop["stop"] = {nr["content"].get<std::string>().substr(10, 4)};
  const json st = ok_json(post_json(c, "/completion", stop.dump()), "stop");
  EXPECT_EQ(st["stop_type"], "word");
  EXPECT_EQ(st["completion_probabilities"].size(), st["tokens_predicted"].get<size_t>());
  // Limits: OpenAI's 20.
  for (const auto& [route, body] : std::vector<std::pair<std::string, json>>{
           {"/v1/completions", {{"prompt", "x"}, {"logprobs", 21}}},
           {"/v1/chat/completions", {{"messages", chat["messages"]}, {"logprobs", true}, {"top_logprobs", 21}}},
           {"/v1/chat/completions", {{"messages", chat["messages"]}, {"top_logprobs", 2}}}}) {
    const HttpReply e = post_json(c, route, body.dump());
    EXPECT_EQ(e.status, 400) << body.dump();
    EXPECT_NE(e.json()["error"]["param"].get<std::string>().find("logprobs"), std::string::npos) << e.body;
  }
}

TEST(ServerSampling, NChoicesAreIndependentSequencesBatchedTogether) {
  ServerProcess srv(kKjvModel, {"-t", "1", "-np", "2", "--spec", "lookup"});
  auto c = srv.client();
  // Greedy: n equal choices; the prompt counted once, the completion tokens summed.
  const json g = {{"prompt", kSmPrompt}, {"max_tokens", 16}, {"temperature", 0}, {"n", 3}, {"logprobs", 1}};
  const json r = ok_json(post_json(c, "/v1/completions", g.dump()), "greedy n");
  ASSERT_EQ(r["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], r["choices"][0]["text"]);
    EXPECT_EQ(r["choices"][i]["logprobs"], r["choices"][0]["logprobs"]);
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], 48);
  json one = g;
  one.erase("n");
  const json r1 = ok_json(post_json(c, "/v1/completions", one.dump()), "greedy 1");
  EXPECT_EQ(r["usage"]["prompt_tokens"], r1["usage"]["prompt_tokens"]);
  EXPECT_EQ(r["choices"][0]["text"], r1["choices"][0]["text"]);
  // Sampled: choice i is the request with seed + i.
  const json msgs = {{{"role", "user"}, {"content", "Who was the first king of Israel?"}}};
  const json s = {{"messages", msgs}, {"max_tokens", 16}, {"temperature", 1.0}, {"seed", 40}, {"n", 3}};
  const json sr = ok_json(post_json(c, "/v1/chat/completions", s.dump()), "sampled n");
  ASSERT_EQ(sr["choices"].size(), 3u);
  std::vector<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    json b = s;
    b["n"] = 1;
    b["seed"] = 40 + i;
    texts.push_back(
        ok_json(post_json(c, "/v1/chat/completions", b.dump()), "seed")["choices"][0]["message"]["content"]);
    EXPECT_EQ(sr["choices"][i]["message"]["content"], texts[i]) << i;
  }
  EXPECT_FALSE(texts[0] == texts[1] && texts[1] == texts[2]) << "different seeds, different samples";
  // Streamed: chunks of both choices interleave, each with its index; each choice ends
  // with its finish_reason, the last one with the usage; one [DONE].
  json ss = s;
  ss["stream"] = true;
  ss["stream_options"] = {{"include_usage", true}};
  const HttpReply st = post_json(c, "/v1/chat/completions", ss.dump());
  ASSERT_EQ(st.status, 200);
  std::map<int, std::string> got;
  std::map<int, int> finishes;
  int usage_chunks = 0;
  for (const json& ev : events(st)) {
    if (ev.contains("usage") && ev["choices"].empty()) ++usage_chunks;
    for (const json& ch : ev["choices"]) {
      got[ch["index"]] += ch["delta"].value("content", "");
      if (!ch["finish_reason"].is_null()) finishes[ch["index"]] += 1;
    }
  }
  const std::vector<std::string> raw = sse_events(st.body);
  EXPECT_EQ(std::count(raw.begin(), raw.end(), "[DONE]"), 1);
  EXPECT_EQ(raw.back(), "[DONE]");
  EXPECT_EQ(usage_chunks, 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i], texts[i]) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  // Limits: 1..16; best_of only equal to n.
  for (const json& bad : {json{{"n", 17}}, json{{"n", 0}}, json{{"n", 2}, {"best_of", 3}}}) {
    json b = {{"prompt", "x"}, {"max_tokens", 2}};
    b.update(bad);
    const HttpReply e = post_json(c, "/v1/completions", b.dump());
    EXPECT_EQ(e.status, 400) << bad.dump();
  }
}

TEST(ServerSampling, IgnoredFieldsAreNamedInAHeaderAndTheLogAndRefusedOnesAreNot) {
  ServerProcess srv(kKjvModel, {"-t", "1"});
  auto c = srv.client();
  const json base = {{"prompt", kSmPrompt}, {"n_predict", 8}, {"temperature", 0}};
  const std::string want = ok_json(post_json(c, "/completion", base.dump()), "plain")["content"];
  json b = base;
  b.update(json{{"mirostat", 2}, {"tfs_z", 0.5}, {"dry_multiplier", 0}, {"xtc_probability", 0}});
  const HttpReply r = post_json(c, "/completion", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["content"], want);
  EXPECT_EQ(r.header("X-Treespec-Ignored-Fields"), "mirostat, tfs_z");
  EXPECT_EQ(post_json(c, "/completion", base.dump()).header("X-Treespec-Ignored-Fields"), "");
  // Streams and errors after parsing carry it too.
  json s = b;
  s["stream"] = true;
  EXPECT_EQ(post_json(c, "/completion", s.dump()).header("X-Treespec-Ignored-Fields"), "mirostat, tfs_z");
  json e = b;
  e["temperature"] = -1;
  const HttpReply er = post_json(c, "/completion", e.dump());
  EXPECT_EQ(er.status, 400);
  EXPECT_EQ(er.header("X-Treespec-Ignored-Fields"), "mirostat, tfs_z");
  json oai = {{"prompt", kSmPrompt}, {"max_tokens", 4}, {"user", "me"}};
  EXPECT_EQ(post_json(c, "/v1/completions", oai.dump()).header("X-Treespec-Ignored-Fields"), "user");
  // Named once in the request's log line.
  bool logged = false;
  for (int i = 0; i < 100 && !logged; ++i) {
    logged = srv.log().find("ignored fields: mirostat, tfs_z") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(logged) << srv.log();
  // Refused: fields whose absence changes what the client relies on.
  for (const auto& [route, field] :
       std::vector<std::pair<std::string, json>>{{"/v1/completions", {{"echo", true}}},
                                                 {"/v1/completions", {{"suffix", "end"}}},
                                                 {"/completion", {{"post_sampling_probs", true}}},
                                                 {"/v1/completions", {{"best_of", 2}}}}) {
    json x = {{"prompt", "x"}, {"max_tokens", 2}};
    x.update(field);
    const HttpReply rr = post_json(c, route, x.dump());
    EXPECT_EQ(rr.status, 400) << x.dump();
    EXPECT_EQ(rr.json()["error"]["param"], field.begin().key()) << rr.body;
  }
}
