// Server building blocks without HTTP: chat templates, stop strings and UTF-8 in the
// text stream, the shared step budget, request validation, metrics text.
#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "chat/builtin_formats.h"
#include "engine/budget.h"
#include "server/access.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "treespec/status.h"

using namespace treespec;
using namespace treespec::server;
using namespace treespec::chat;
using nlohmann::json;
using treespec::tokenizer::TextStream;

// ---- chat templates ----

TEST(ChatTemplate, DetectsFamiliesBySubstring) {
  EXPECT_EQ(detect_chat_family(""), ChatFamily::plain);
  EXPECT_EQ(detect_chat_family("{% for m in messages %}{{ m.content }}{% endfor %}"), ChatFamily::plain);
  EXPECT_EQ(detect_chat_family("{{'<|im_start|>' + message['role'] + '\\n'}}"), ChatFamily::chatml);
  EXPECT_EQ(detect_chat_family("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"),
            ChatFamily::llama3);
  EXPECT_EQ(detect_chat_family("{{ bos_token + '[INST] ' + '<<SYS>>\\n' }}"), ChatFamily::llama2);
  EXPECT_EQ(detect_chat_family("{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}"),
            ChatFamily::mistral);
  EXPECT_EQ(detect_chat_family("[SYSTEM_PROMPT]{{ system }}[/SYSTEM_PROMPT][INST]"), ChatFamily::mistral_v7);
  EXPECT_EQ(detect_chat_family("{{'<|user|>' + '\\n' + message['content'] + '<|end|>'}}"), ChatFamily::phi3);
  EXPECT_EQ(detect_chat_family("{{ '<|user|>\\n' + message['content'] + eos_token }}"), ChatFamily::zephyr);
  EXPECT_EQ(detect_chat_family("{{ '<start_of_turn>' + role + '\\n' }}"), ChatFamily::gemma);
}

TEST(ChatTemplate, RendersEachFamily) {
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."},
                                         {"user", "Hi"},
                                         {"assistant", "Hello!"},
                                         {"user", "Bye"}};
  EXPECT_EQ(render_builtin(ChatFamily::chatml, msgs, "<s>", "</s>").prompt,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_builtin(ChatFamily::llama3, msgs, "", "").prompt,
            "<|start_header_id|>system<|end_header_id|>\n\nBe "
            "brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_builtin(ChatFamily::llama2, msgs, "<s>", "</s>").prompt,
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]");
  EXPECT_EQ(render_builtin(ChatFamily::mistral, msgs, "<s>", "</s>").prompt,
            "[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
  EXPECT_EQ(render_builtin(ChatFamily::mistral_v7, msgs, "<s>", "</s>").prompt,
            "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>[INST] Bye[/INST]");
  EXPECT_EQ(render_builtin(ChatFamily::phi3, msgs, "<s>", "</s>").prompt,
            "<|system|>\nBe "
            "brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
  EXPECT_EQ(
      render_builtin(ChatFamily::zephyr, msgs, "<s>", "</s>").prompt,
      "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
  EXPECT_EQ(render_builtin(ChatFamily::gemma, msgs, "<bos>", "<eos>").prompt,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  const RenderedChat plain = render_builtin(ChatFamily::plain, msgs, "<s>", "</s>");
  EXPECT_EQ(plain.prompt, "system: Be brief.\nuser: Hi\nassistant: Hello!\nuser: Bye\nassistant:");
  EXPECT_EQ(plain.stops, std::vector<std::string>{"\nuser:"});
}

TEST(ChatTemplate, NamesRoundTripAndErrors) {
  for (const auto& n : chat_family_names()) EXPECT_STREQ(chat_family_name(chat_family_from_name(n)), n.c_str());
  EXPECT_THROW(chat_family_from_name("vicuna"), InvalidArgument);
  EXPECT_THROW(render_builtin(ChatFamily::chatml, {}, "", ""), InvalidArgument);
}

// ---- text stream ----

namespace {
// A byte-level vocabulary: token i (0..255) is the raw byte i, plus a few words.
std::unique_ptr<tokenizer::Tokenizer> byte_tokenizer() {
  tokenizer::Vocab v;
  v.model = "llama";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.types.push_back(tokenizer::TokenType::byte);
  }
  for (const char* w : {"Hello", " world", "END", "<s>", "</s>"}) {
    v.tokens.push_back(w);
    v.types.push_back(tokenizer::TokenType::normal);
  }
  v.types[259] = tokenizer::TokenType::control;
  v.types[260] = tokenizer::TokenType::control;
  v.bos_id = 259;
  v.eos_id = 260;
  v.scores.assign(v.tokens.size(), 0.0f);
  v.add_space_prefix = false;
  return tokenizer::Tokenizer::create(std::move(v));
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

// Streams tokens one at a time; returns the concatenated output.
std::string run_stream(TextStream& ts, const std::vector<int32_t>& ids, std::vector<std::string>* deltas = nullptr) {
  std::string out;
  for (int32_t id : ids) {
    std::string d = ts.push(id);
    if (deltas) deltas->push_back(d);
    out += d;
  }
  out += ts.finish();
  return out;
}
}  // namespace

TEST(TextStream, NeverSplitsUtf8) {
  const auto tok = byte_tokenizer();
  TextStream ts(*tok, tok->bos_id(), {});
  std::vector<std::string> deltas;
  const std::string text = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";  // a é € 😀 z
  EXPECT_EQ(run_stream(ts, bytes_of(text), &deltas), text);
  // Each non-empty delta is valid UTF-8 on its own.
  for (const auto& d : deltas) {
    EXPECT_TRUE(tokenizer::utf8::is_valid(d)) << d;
  }
  EXPECT_EQ(deltas[1], "");  // first byte of é held back
  EXPECT_EQ(ts.n_tokens(), static_cast<int32_t>(text.size()));
}

TEST(TextStream, StopStringTrimmedAndTokensCounted) {
  const auto tok = byte_tokenizer();
  TextStream ts(*tok, tok->bos_id(), {"STOP", "xyz"});
  const std::string text = "abcSTOPdef";
  std::vector<std::string> deltas;
  EXPECT_EQ(run_stream(ts, bytes_of(text), &deltas), "abc");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.stop_word(), "STOP");
  EXPECT_EQ(ts.n_tokens(), 7);  // up to the token completing "STOP"
  // "S", "T", "O" were held back (could start "STOP") and never released.
  EXPECT_EQ(deltas[3], "");
  EXPECT_EQ(deltas[4], "");
  EXPECT_EQ(deltas[5], "");
}

TEST(TextStream, HeldBackPrefixReleasedWhenItCannotMatch) {
  const auto tok = byte_tokenizer();
  TextStream ts(*tok, tok->bos_id(), {"STOP"});
  std::vector<std::string> deltas;
  EXPECT_EQ(run_stream(ts, bytes_of("aSTOx"), &deltas), "aSTOx");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(deltas[3], "");      // "STO" held
  EXPECT_EQ(deltas[4], "STOx");  // released at once when 'x' breaks the match
  // At the end, a dangling prefix is released too.
  TextStream ts2(*tok, tok->bos_id(), {"STOP"});
  EXPECT_EQ(run_stream(ts2, bytes_of("aST")), "aST");
}

TEST(TextStream, StopSpanningTokensAndEarliestWins) {
  const auto tok = byte_tokenizer();
  // " world" is one token; the stop "lo wo" spans "Hello" and " world".
  TextStream ts(*tok, tok->bos_id(), {"lo wo", "Hel"});
  EXPECT_EQ(run_stream(ts, {256, 257}), "");  // "Hel" occurs first (offset 0)
  EXPECT_EQ(ts.stop_word(), "Hel");
  TextStream ts2(*tok, tok->bos_id(), {"lo wo"});
  EXPECT_EQ(run_stream(ts2, {256, 257, 258}), "Hel");
  EXPECT_EQ(ts2.n_tokens(), 2);
  EXPECT_EQ(ts2.push(258), "");  // ignored after the stop
}

TEST(TextStream, PartialMatchThenRealStop) {
  const auto tok = byte_tokenizer();
  TextStream ts(*tok, tok->bos_id(), {"STOP"});
  EXPECT_EQ(run_stream(ts, bytes_of("xx\xc3\xa9STOyySTOPzz")), "xx\xc3\xa9STOyy");
  EXPECT_EQ(ts.n_tokens(), 13);
  EXPECT_EQ(TextStream::partial_stop_suffix("abST", {"STOP", "Tx"}), 2u);
  EXPECT_EQ(TextStream::partial_stop_suffix("abS", {"STOP"}), 1u);
  EXPECT_EQ(TextStream::partial_stop_suffix("STOP", {"STOP"}), 0u);  // proper prefixes only
}

// ---- step budget ----

TEST(StepBudget, SplitsAcrossSequences) {
  auto split = [](int32_t budget, std::vector<int32_t> want) {
    engine::StepBudgetPolicy::split(budget, want);
    return want;
  };
  EXPECT_EQ(split(0, {33, 33, 1}), (std::vector<int32_t>{33, 33, 1}));    // no cap
  EXPECT_EQ(split(100, {33, 33, 1}), (std::vector<int32_t>{33, 33, 1}));  // fits
  EXPECT_EQ(split(64, {33, 33, 33, 33}), (std::vector<int32_t>{16, 16, 16, 16}));
  EXPECT_EQ(split(20, {33, 5, 33}), (std::vector<int32_t>{8, 5, 7}));  // unused share goes to others
  EXPECT_EQ(split(2, {33, 33, 33}), (std::vector<int32_t>{1, 1, 1}));  // roots always kept
  EXPECT_EQ(split(10, {0, 9}), (std::vector<int32_t>{1, 9}));
  for (int32_t budget : {3, 7, 50, 64, 65}) {
    std::vector<int32_t> w = {33, 2, 17, 33, 9};
    engine::StepBudgetPolicy::split(budget, w);
    int32_t sum = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_GE(w[i], 1);
      sum += w[i];
    }
    EXPECT_LE(sum, std::max<int32_t>(budget, 5)) << budget;
  }
  EXPECT_THROW(engine::StepBudgetPolicy(-1), InvalidArgument);
}

// ---- request validation ----

namespace {
int status_of(const json& body, Endpoint ep = Endpoint::completions) {
  try {
    parse_generation_request(body, ep, sampling::SamplingParams{});
  } catch (const ApiError& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
    return e.status();
  }
  return 200;
}
}  // namespace

TEST(Api, ParsesCompletionFields) {
  const auto r = parse_generation_request(
      json::parse(R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,
                      "seed":7,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"n":1,
                      "presence_penalty":0,"logprobs":null,"user":"x"})"),
      Endpoint::completions, sampling::SamplingParams{});
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temp, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.stops, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  const auto t = parse_generation_request(json::parse(R"({"prompt":[1,2,3]})"), Endpoint::completions, {});
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  const auto c = parse_generation_request(
      json::parse(
          R"({"messages":[{"role":"developer","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":9})"),
      Endpoint::chat, {});
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.max_tokens, 9);
}

TEST(Api, RejectsBadFields) {
  EXPECT_EQ(status_of(json::object()), 400);       // missing prompt
  EXPECT_EQ(status_of(json{{"prompt", 5}}), 400);  // wrong type
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"max_tokens", "5"}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"max_tokens", 0}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"max_tokens", 2.5}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"temperature", -1}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"temperature", true}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"top_p", 0}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"top_k", -2}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"min_p", 1.5}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"seed", -5}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"n", 17}}), 400);  // at most 16 choices
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"n", 0}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"stop", 3}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"stop", {""}}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"stream", "yes"}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"logprobs", 21}}), 400);    // OpenAI's 20
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"logprobs", true}}), 400);  // completions: an integer
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"echo", true}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"frequency_penalty", 2.5}}), 400);  // out of [-2, 2]
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"frequency_penalty", 0.5}}), 200);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"logit_bias", {{"5", 101}}}}), 400);  // outside [-100, 100]
  EXPECT_EQ(status_of(json{{"prompt", json::array()}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", {"a", "b"}}}), 400);  // batch of prompts
  EXPECT_EQ(status_of(json{{"prompt", {1, -3}}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"model", 3}}), 400);
  EXPECT_EQ(status_of(json::object(), Endpoint::chat), 400);
  EXPECT_EQ(status_of(json{{"messages", json::array()}}, Endpoint::chat), 400);
  EXPECT_EQ(status_of(json{{"messages", {{{"role", "user"}}}}}, Endpoint::chat), 200);  // content absent = ""
  EXPECT_EQ(status_of(json{{"messages", {{{"content", "x"}}}}}, Endpoint::chat), 400);  // no role
  EXPECT_EQ(status_of(json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, Endpoint::chat), 400);
  EXPECT_EQ(status_of(json{{"messages", {{{"role", "user"}, {"content", 5}}}}}, Endpoint::chat), 400);
  EXPECT_EQ(status_of(json{{"messages", "hi"}}, Endpoint::chat), 400);
}

TEST(Api, ParsesTheSamplingFields) {
  const float ban = -std::numeric_limits<float>::infinity();
  // OpenAI's object, llama-server's pairs and false; text keys are the server's to tokenize.
  auto r =
      parse_generation_request(json::parse(
                                   R"({"prompt":"x","logit_bias":{"5":-100,"7":false,"Hello":2},"typical_p":0.5})"),
                               Endpoint::completions, {});
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0].token, 5);
  EXPECT_EQ(r.sampling.logit_bias[0].bias, -100.0f);
  EXPECT_EQ(r.sampling.logit_bias[1].bias, ban);
  ASSERT_EQ(r.logit_bias_text.size(), 1u);
  EXPECT_EQ(r.logit_bias_text[0], (std::pair<std::string, float>{"Hello", 2.0f}));
  EXPECT_FLOAT_EQ(r.sampling.typical_p, 0.5f);
  r = parse_generation_request(json::parse(R"({"prompt":"x","logit_bias":[[3,1.5],[4,false],["ab",-1]]})"),
                               Endpoint::native, {});
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[1].token, 4);
  EXPECT_EQ(r.sampling.logit_bias[1].bias, ban);
  EXPECT_EQ(r.logit_bias_text.size(), 1u);
  // A request's logit_bias replaces the server's (-l) defaults.
  sampling::SamplingParams defaults;
  defaults.logit_bias = {{9, 1.0f}};
  EXPECT_EQ(parse_generation_request(json{{"prompt", "x"}}, Endpoint::completions, defaults).sampling.logit_bias.size(),
            1u);
  EXPECT_EQ(parse_generation_request(json{{"prompt", "x"}, {"logit_bias", {{"3", 1}}}}, Endpoint::completions, defaults)
                .sampling.logit_bias[0]
                .token,
            3);
  for (const json& bad : {json{{"logit_bias", {{"-1", 1}}}}, json{{"logit_bias", {{"5", true}}}},
                          json{{"logit_bias", {{"5", "x"}}}}, json{{"logit_bias", json::array({json::array({1})})}},
                          json{{"logit_bias", 3}}, json{{"logit_bias", json::array({json::array({1.5, 1})})}},
                          json{{"logit_bias", {{"99999999999999999999", 1}}}}}) {
    json b = {{"prompt", "x"}};
    b.update(bad);
    try {
      parse_generation_request(b, Endpoint::completions, {});
      ADD_FAILURE() << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "logit_bias") << bad.dump();
    }
  }
  // Log-probabilities: completions logprobs N, chat logprobs + top_logprobs, native n_probs.
  r = parse_generation_request(json{{"prompt", "x"}, {"logprobs", 3}}, Endpoint::completions, {});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  r = parse_generation_request(json{{"prompt", "x"}, {"logprobs", 0}}, Endpoint::completions, {});
  EXPECT_TRUE(r.logprobs);
  EXPECT_FALSE(
      parse_generation_request(json{{"prompt", "x"}, {"logprobs", false}}, Endpoint::completions, {}).logprobs);
  const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
  r = parse_generation_request(json{{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 20}, {"n", 3}},
                               Endpoint::chat, {});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_EQ(r.n, 3);
  r = parse_generation_request(json{{"prompt", "x"}, {"n_probs", 100}}, Endpoint::native, {});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 100);
  EXPECT_EQ(status_of(json{{"messages", msgs}, {"top_logprobs", 2}}, Endpoint::chat), 400);  // needs logprobs: true
  EXPECT_EQ(status_of(json{{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 21}}, Endpoint::chat), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"n_probs", 101}}, Endpoint::native), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"post_sampling_probs", true}}, Endpoint::native), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"typical_p", 1.5}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"n", 2}, {"best_of", 2}}), 200);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"n", 2}, {"best_of", 3}}), 400);
  EXPECT_EQ(status_of(json{{"prompt", "x"}, {"suffix", "y"}}), 400);
}

TEST(Api, IgnoredFieldsAreNamedUnlessNeutralOrImplemented) {
  const json body = {{"prompt", "x"},        {"temperature", 0},    {"mirostat", 2},    {"mirostat_tau", 5},
                     {"tfs_z", 1.0},         {"dry_multiplier", 0}, {"dry_base", 1.75}, {"xtc_probability", 0.5},
                     {"xtc_threshold", 0.1}, {"typical_p", 0.9},    {"n_probs", 0},     {"user", "me"},
                     {"samplers", "kt"},     {"logprobs", nullptr}};
  EXPECT_EQ(ignored_fields(body, Endpoint::native),
            (std::vector<std::string>{"mirostat", "mirostat_tau", "samplers", "user", "xtc_probability",
                                      "xtc_threshold"}));
  // Another endpoint's field: named when it is not at its default.
  EXPECT_EQ(ignored_fields(json{{"prompt", "x"}, {"n_probs", 3}, {"n", 1}}, Endpoint::completions),
            (std::vector<std::string>{"n_probs"}));
  EXPECT_EQ(ignored_fields(json{{"prompt", "x"}, {"n", 2}, {"logprobs", 2}}, Endpoint::native),
            (std::vector<std::string>{"logprobs", "n"}));
  EXPECT_TRUE(ignored_fields(json{{"prompt", "x"}, {"n", 2}, {"logprobs", 2}, {"logit_bias", json::object()}},
                             Endpoint::completions)
                  .empty());
}

TEST(Api, ParseBodyRejectsNonJsonAndBadUtf8) {
  auto status = [](const std::string& body) {
    try {
      parse_body(body);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
      return e.status();
    }
    return 200;
  };
  EXPECT_EQ(status("{\"prompt\": \"x\"}"), 200);
  EXPECT_EQ(status(""), 400);
  EXPECT_EQ(status("{\"prompt\": "), 400);
  EXPECT_EQ(status("[1, 2]"), 400);
  EXPECT_EQ(status("{\"prompt\": \"\xff\xfe\"}"), 400);
  EXPECT_EQ(status("{\"prompt\": \"\xc3\"}"), 400);
}

TEST(Api, ErrorBodyShape) {
  const json b = ApiError(404, "invalid_request_error", "no such model", "model_not_found", "model").body();
  EXPECT_EQ(b["error"]["message"], "no such model");
  EXPECT_EQ(b["error"]["type"], "invalid_request_error");
  EXPECT_EQ(b["error"]["code"], "model_not_found");
  EXPECT_EQ(b["error"]["param"], "model");
  EXPECT_EQ(error_body(503, "unavailable_error", "Loading model")["error"]["code"], 503);
  EXPECT_NE(make_request_id(Endpoint::chat), make_request_id(Endpoint::chat));
  EXPECT_EQ(make_request_id(Endpoint::completions).rfind("cmpl-", 0), 0u);
}

TEST(Api, TokenizeAndDetokenizeRequests) {
  const auto t = parse_tokenize_request(json{{"content", "hi"}, {"with_pieces", true}});
  EXPECT_EQ(t.content, "hi");
  EXPECT_FALSE(t.add_special);
  EXPECT_TRUE(t.with_pieces);
  EXPECT_THROW(parse_tokenize_request(json::object()), ApiError);
  EXPECT_THROW(parse_tokenize_request(json{{"content", 1}}), ApiError);
  EXPECT_EQ(parse_detokenize_request(json{{"tokens", {1, 2}}}, 10), (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(parse_detokenize_request(json{{"tokens", {1, 10}}}, 10), ApiError);
  EXPECT_THROW(parse_detokenize_request(json{{"tokens", "1"}}, 10), ApiError);
}

// ---- metrics ----

TEST(Metrics, PrometheusTextHasCountersAndHistograms) {
  Metrics m;
  m.on_http_response("/v1/completions", 200);
  m.on_http_response("/v1/completions", 200);
  m.on_http_response("other", 404);
  m.on_request_done("stop", 10, 5, RequestTimes{0.02, 0.5, 0.001, 0.03});
  engine::SpecStats st;
  st.n_drafts = 3;
  st.n_draft_tokens = 12;
  st.n_accepted = 4;
  st.accepted_per_pos = {3, 1};
  m.set_engine_state(st, 2, 1, 4);
  const std::string t = m.render();
  auto has = [&](const std::string& line) { return t.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("treespec:http_requests_total{path=\"/v1/completions\",status=\"200\"} 2")) << t;
  EXPECT_TRUE(has("treespec:http_requests_total{path=\"other\",status=\"404\"} 1"));
  EXPECT_TRUE(has("treespec:request_success_total{finished_reason=\"stop\"} 1"));
  EXPECT_TRUE(has("treespec:prompt_tokens_total 10"));
  EXPECT_TRUE(has("treespec:generation_tokens_total 5"));
  EXPECT_TRUE(has("treespec:time_to_first_token_seconds_bucket{le=\"0.01\"} 0"));
  EXPECT_TRUE(has("treespec:time_to_first_token_seconds_bucket{le=\"0.04\"} 1"));
  EXPECT_TRUE(has("treespec:time_to_first_token_seconds_count 1"));
  EXPECT_TRUE(has("treespec:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1"));
  EXPECT_TRUE(has("treespec:num_requests_running 2"));
  EXPECT_TRUE(has("treespec:num_requests_waiting 1"));
  EXPECT_TRUE(has("treespec:spec_decode_num_drafts_total 3"));
  EXPECT_TRUE(has("treespec:spec_decode_num_draft_tokens_total 12"));
  EXPECT_TRUE(has("treespec:spec_decode_num_accepted_tokens_total 4"));
  EXPECT_TRUE(has("treespec:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 3"));
  EXPECT_TRUE(has("treespec:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 1"));
  EXPECT_TRUE(has("# TYPE treespec:time_to_first_token_seconds histogram"));
  // vLLM's buckets: TTFT up to 2560 s, time per output token from 10 ms, latencies from 0.3 s.
  EXPECT_TRUE(has("treespec:time_to_first_token_seconds_bucket{le=\"2560\"} 1")) << t;
  EXPECT_TRUE(has("treespec:time_per_output_token_seconds_bucket{le=\"0.025\"} 0"));
  EXPECT_TRUE(has("treespec:time_per_output_token_seconds_bucket{le=\"0.05\"} 1"));
  EXPECT_TRUE(has("treespec:time_per_output_token_seconds_count 1"));
  EXPECT_TRUE(has("treespec:e2e_request_latency_seconds_bucket{le=\"0.5\"} 1"));
  EXPECT_TRUE(has("treespec:e2e_request_latency_seconds_bucket{le=\"0.3\"} 0"));
  // A request with one token has no time per output token.
  m.on_request_done("stop", 3, 1, RequestTimes{0.02, 0.5, 0.001, -1.0});
  EXPECT_NE(m.render().find("treespec:time_per_output_token_seconds_count 1\n"), std::string::npos);
}

TEST(Metrics, EverySeriesCarriesTheModelNameAndThePrefix) {
  Metrics m("vllm", "my \"model\"\\x");
  m.on_http_response("/health", 200);
  m.on_request_done("length", 4, 2, RequestTimes{0.01, 0.2, 0.0, 0.05});
  const std::string t = m.render();
  const std::string label = "model_name=\"my \\\"model\\\"\\\\x\"";  // escaped as Prometheus requires
  std::istringstream in(t);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      EXPECT_EQ(line.find("treespec"), std::string::npos) << line;
      EXPECT_TRUE(line.rfind("# HELP vllm:", 0) == 0 || line.rfind("# TYPE vllm:", 0) == 0) << line;
      continue;
    }
    ++n;
    EXPECT_EQ(line.rfind("vllm:", 0), 0u) << line;
    EXPECT_NE(line.find("{" + label), std::string::npos) << line;
  }
  EXPECT_GT(n, 40);
  auto has = [&](const std::string& l) { return t.find(l + "\n") != std::string::npos; };
  EXPECT_TRUE(has("vllm:request_success_total{" + label + ",finished_reason=\"length\"} 1")) << t;
  EXPECT_TRUE(has("vllm:time_per_output_token_seconds_bucket{" + label + ",le=\"0.05\"} 1"));
  EXPECT_TRUE(has("vllm:time_per_output_token_seconds_sum{" + label + "} 0.05"));
  EXPECT_TRUE(has("vllm:num_requests_running{" + label + "} 0"));
}

// ---- access: API keys and CORS ----

TEST(Access, ApiKeyFileTakesOneKeyPerLineAndRejectsBadFiles) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string p = dir + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  };
  EXPECT_EQ(read_api_key_file(write("k1.txt", "# team keys\nalpha\n\n  beta \r\n")),
            (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_THROW(read_api_key_file(write("k2.txt", "# only a comment\n\n")), InvalidArgument);
  EXPECT_THROW(read_api_key_file(write("k3.txt", "two words\n")), InvalidArgument);
  EXPECT_THROW(read_api_key_file(dir + "/missing.txt"), IoError);
  const std::vector<std::string> keys = {"alpha", "beta"};
  EXPECT_TRUE(bearer_key_matches(keys, "Bearer beta"));
  EXPECT_TRUE(bearer_key_matches(keys, "Bearer alpha"));
  EXPECT_FALSE(bearer_key_matches(keys, "Bearer gamma"));
  EXPECT_FALSE(bearer_key_matches(keys, "beta"));
  EXPECT_FALSE(bearer_key_matches(keys, "Bearer "));
  EXPECT_FALSE(bearer_key_matches(keys, "Bearer alphabet"));
}

TEST(Access, CorsOriginsAnyNoneOrAList) {
  EXPECT_EQ(CorsPolicy::parse("*").allow_origin("http://a.example"), "*");
  EXPECT_EQ(CorsPolicy::parse("*").allow_origin(""), "*");
  EXPECT_EQ(CorsPolicy::parse("none").allow_origin("http://a.example"), "");
  EXPECT_FALSE(CorsPolicy::parse("none").enabled());
  const CorsPolicy p = CorsPolicy::parse("http://localhost:3000, https://app.example");
  EXPECT_EQ(p.allow_origin("http://localhost:3000"), "http://localhost:3000");
  EXPECT_EQ(p.allow_origin("https://app.example"), "https://app.example");
  EXPECT_EQ(p.allow_origin("https://evil.example"), "");
  EXPECT_EQ(p.allow_origin(""), "");
  for (const char* bad : {"", "localhost:3000", "http://a.example/path", "http://a.example,*", "http://", " , "}) {
    EXPECT_THROW(CorsPolicy::parse(bad), InvalidArgument) << bad;
  }
}

// ---- request state ----

TEST(RequestState, WaitDoneIgnoresPendingTextAndTakeDrainsIt) {
  // Plain-response handlers wait for completion only: pending text must not wake them
  // (they never take it; waking on it made them spin and starve the scheduler).
  RequestState s;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending = "text";
  }
  EXPECT_FALSE(s.wait_done(0.01));
  std::string got;
  EXPECT_FALSE(s.take(got));
  EXPECT_EQ(got, "text");
  EXPECT_FALSE(s.take(got));
  EXPECT_EQ(got, "");
  std::thread finisher([&] {
    std::lock_guard<std::mutex> lock(s.mu);
    s.done = true;
    s.cv.notify_all();
  });
  EXPECT_TRUE(s.wait_done(30.0));
  finisher.join();
  EXPECT_TRUE(s.take(got));
}
