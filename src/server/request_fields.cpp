// The sampling fields added to the request parser (typical_p, logit_bias, logprobs,
// n) and the list of fields a request sends that this server ignores.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "server/json_fields.h"

namespace treespec::server {

using nlohmann::json;

namespace {

// A logit_bias value: a number in [-100, 100] (OpenAI's range), or false: a ban
// (llama-server's), -infinity.
float bias_value(const json& v, const std::string& where) {
  if (v.is_boolean() && !v.get<bool>()) return -std::numeric_limits<float>::infinity();
  if (!v.is_number()) {
    throw invalid_request(fmt::format("'{}' must be a number in [-100, 100] or false (a ban), got {}", where, v.dump()),
                          "logit_bias");
  }
  const double b = v.get<double>();
  if (!(b >= -100.0 && b <= 100.0))
    throw invalid_request(fmt::format("'{}' = {} is outside [-100, 100]", where, b), "logit_bias");
  return static_cast<float>(b);
}

// A key written as a decimal integer is a token id; anything else is text.
bool key_is_id(const std::string& key) {
  const size_t start = !key.empty() && key[0] == '-' ? 1 : 0;
  return key.size() > start && std::all_of(key.begin() + static_cast<std::ptrdiff_t>(start), key.end(),
                                           [](char c) { return c >= '0' && c <= '9'; });
}

void add_bias_id(GenerationRequest& r, const std::string& id_text, int64_t id, float bias) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    throw invalid_request(fmt::format("'logit_bias': token id {} is outside the vocabulary", id_text), "logit_bias");
  }
  r.sampling.logit_bias.push_back({static_cast<int32_t>(id), bias});
}

// OpenAI's {"id": bias}, llama-server's [[id or text, bias]] and {"text": bias}; bias
// false bans. Ids are checked against the vocabulary by the caller (it knows it).
void parse_logit_bias(const json& body, GenerationRequest& r) {
  const json* v = field(body, "logit_bias");
  if (!v) return;
  r.sampling.logit_bias.clear();  // the request's replace the server's -l/--logit-bias
  if (v->is_object()) {
    for (const auto& [key, value] : v->items()) {
      const float bias = bias_value(value, fmt::format("logit_bias[\"{}\"]", key));
      if (!key_is_id(key)) {
        r.logit_bias_text.emplace_back(key, bias);
        continue;
      }
      int64_t id = -1;
      try {
        id = std::stoll(key);
      } catch (const std::out_of_range&) {
        id = std::numeric_limits<int64_t>::max();
      }
      add_bias_id(r, key, id, bias);
    }
    return;
  }
  if (!v->is_array())
    throw wrong_type("logit_bias", "an object {\"token id\": bias} or an array [[token id or text, bias]]", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    const std::string where = fmt::format("logit_bias[{}]", i);
    if (!e.is_array() || e.size() != 2) {
      throw invalid_request(fmt::format("'{}' must be a pair [token id or text, bias], got {}", where, e.dump()),
                            "logit_bias");
    }
    const float bias = bias_value(e[1], where + "[1]");
    if (e[0].is_string()) {
      r.logit_bias_text.emplace_back(e[0].get<std::string>(), bias);
    } else if (e[0].is_number_integer()) {
      const bool huge = e[0].is_number_unsigned() &&
                        e[0].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      add_bias_id(r, e[0].dump(), huge ? std::numeric_limits<int64_t>::max() : e[0].get<int64_t>(), bias);
    } else {
      throw invalid_request(fmt::format("'{}[0]' must be a token id or a text, got {}", where, e[0].type_name()),
                            "logit_bias");
    }
  }
}

int32_t bounded_integer(const json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const int64_t v = get_integer(body, name, fallback);
  if (v < lo || v > hi) throw invalid_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, v), name);
  return static_cast<int32_t>(v);
}

// completions: logprobs N (null/false: none); chat: logprobs true + top_logprobs N;
// native: n_probs N.
void parse_logprobs(const json& body, Endpoint ep, GenerationRequest& r) {
  if (ep == Endpoint::native) {
    r.top_logprobs = bounded_integer(body, "n_probs", 0, kMaxNProbs, 0);
    r.logprobs = r.top_logprobs > 0;
    if (get_bool(body, "post_sampling_probs", false)) {
      throw unsupported("'post_sampling_probs' (n_probs reports log-probabilities before the sampling filters)",
                        "post_sampling_probs");
    }
    return;
  }
  if (ep == Endpoint::completions) {
    const json* v = field(body, "logprobs");
    if (!v || (v->is_boolean() && !v->get<bool>())) return;
    if (!is_integral(*v)) throw wrong_type("logprobs", "an integer (alternatives per token) on /v1/completions", *v);
    r.logprobs = true;
    r.top_logprobs = bounded_integer(body, "logprobs", 0, kMaxTopLogprobs, 0);
    return;
  }
  r.logprobs = get_bool(body, "logprobs", false);
  r.top_logprobs = bounded_integer(body, "top_logprobs", 0, kMaxTopLogprobs, 0);
  if (r.top_logprobs > 0 && !r.logprobs) {
    throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  }
}

}  // namespace

void parse_sampling_fields(const json& body, Endpoint ep, GenerationRequest& r) {
  r.sampling.typical_p = get_float(body, "typical_p", r.sampling.typical_p);
  if (!(r.sampling.typical_p >= 0.0f && r.sampling.typical_p <= 1.0f)) {
    throw invalid_request(fmt::format("'typical_p' must be in [0, 1] (1 = off), got {}", r.sampling.typical_p),
                          "typical_p");
  }
  parse_logit_bias(body, r);
  parse_logprobs(body, ep, r);
  if (ep == Endpoint::native) return;
  r.n = bounded_integer(body, "n", 1, kMaxChoices, 1);
  if (const json* b = field(body, "best_of"); b && !(is_integral(*b) && b->get<double>() == r.n)) {
    throw unsupported(fmt::format("'best_of' = {} with n = {} (choosing the best of several samples)", b->dump(), r.n),
                      "best_of");
  }
}

namespace {

bool equals(const json& v, double x) { return v.is_number() && v.get<double>() == x; }
bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }

// Fields the parsers read on every endpoint.
constexpr std::string_view kCommonFields[] = {"model",
                                              "max_tokens",
                                              "temperature",
                                              "top_p",
                                              "top_k",
                                              "min_p",
                                              "seed",
                                              "stop",
                                              "stream",
                                              "stream_options",
                                              "ignore_eos",
                                              "spec",
                                              "cache_prompt",
                                              "repeat_penalty",
                                              "repeat_last_n",
                                              "repetition_penalty",
                                              "presence_penalty",
                                              "frequency_penalty",
                                              "typical_p",
                                              "logit_bias",
                                              "echo",
                                              "suffix",
                                              "grammar",
                                              "json_schema",
                                              "tools",
                                              "functions",
                                              "tool_choice",
                                              "response_format"};

bool implemented(std::string_view name, Endpoint ep) {
  if (std::find(std::begin(kCommonFields), std::end(kCommonFields), name) != std::end(kCommonFields)) return true;
  switch (ep) {
    case Endpoint::completions: return name == "prompt" || name == "n" || name == "best_of" || name == "logprobs";
    case Endpoint::chat:
      return name == "messages" || name == "max_completion_tokens" || name == "n" || name == "best_of" ||
             name == "logprobs" || name == "top_logprobs" || name == "chat_template_kwargs";
    case Endpoint::native:
      return name == "prompt" || name == "n_predict" || name == "n_probs" || name == "post_sampling_probs";
  }
  return false;
}

// Fields that change nothing at the given value (llama-server's samplers switched off,
// or another endpoint's field at its default).
bool neutral(std::string_view name, const json& v, const json& body) {
  auto off = [&](const char* sw, double value) {
    const json* s = field(body, sw);
    return !s || equals(*s, value);
  };
  if (name == "tfs_z") return equals(v, 1.0);
  if (name == "mirostat") return equals(v, 0.0);
  if (name == "mirostat_tau" || name == "mirostat_eta") return off("mirostat", 0.0);
  if (name == "dry_multiplier") return equals(v, 0.0);
  if (name.rfind("dry_", 0) == 0) return off("dry_multiplier", 0.0);
  if (name == "xtc_probability") return equals(v, 0.0);
  if (name == "xtc_threshold") return off("xtc_probability", 0.0);
  if (name == "top_n_sigma") return v.is_number() && v.get<double>() <= 0.0;
  if (name == "min_keep" || name == "n_keep" || name == "n_probs" || name == "top_logprobs") return equals(v, 0.0);
  if (name == "n" || name == "best_of") return equals(v, 1.0);
  if (name == "id_slot") return equals(v, -1.0);
  if (name == "logprobs") return is_false(v) || equals(v, 0.0);
  if (name == "penalize_nl" || name == "post_sampling_probs" || name == "return_tokens" ||
      name == "timings_per_token") {
    return is_false(v);
  }
  return false;
}

}  // namespace

std::vector<std::string> ignored_fields(const json& body, Endpoint ep) {
  std::vector<std::string> out;
  if (!body.is_object()) return out;
  for (const auto& [key, value] : body.items()) {
    if (value.is_null() || implemented(key, ep) || neutral(key, value, body)) continue;
    out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace treespec::server
