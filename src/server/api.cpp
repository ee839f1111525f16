#include "server/api.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <random>

#include "server/json_fields.h"
#include "tokenizer/utf8.h"

namespace treespec::server {

using nlohmann::json;

json ApiError::body() const {
  json j = error_body(status_, type_, what(), code_);
  if (!param_.empty()) j["error"]["param"] = param_;
  return j;
}

json error_body(int status, const std::string& type, const std::string& message, const std::string& code) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["code"] = code.empty() ? json(status) : json(code);
  e["param"] = nullptr;
  return json{{"error", e}};
}

ApiError invalid_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, {}, param);
}

ApiError unavailable(const std::string& message) { return ApiError(503, "unavailable_error", message); }

json parse_body(const std::string& body) {
  if (!tokenizer::utf8::is_valid(body)) {
    // Find the first bad byte so the client can see where.
    size_t i = 0;
    while (i < body.size()) {
      size_t len = 0;
      if (tokenizer::utf8::scan(std::string_view(body).substr(i), &len) != tokenizer::utf8::Scan::complete) break;
      i += len;
    }
    throw invalid_request(fmt::format("request body is not valid UTF-8 (bad byte at offset {})", i));
  }
  if (body.empty()) throw invalid_request("request body is empty: expected a JSON object");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw invalid_request(fmt::format("request body is not valid JSON: {}", e.what()));
  } catch (const json::out_of_range& e) {
    // A number beyond double range (1e400) is out_of_range 406, not a parse_error.
    throw invalid_request(fmt::format("request body has a number out of range: {}", e.what()));
  }
  if (!j.is_object()) throw invalid_request(fmt::format("request body must be a JSON object, got {}", j.type_name()));
  return j;
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError wrong_type(const char* name, const char* expected, const json& v) {
  return invalid_request(fmt::format("'{}' must be {}, got {}", name, expected, v.type_name()), name);
}

double get_number(const json& body, const char* name, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw wrong_type(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw invalid_request(fmt::format("'{}' must be finite", name), name);
  return d;
}

// A number stored in a float field (sampling parameters are floats): values beyond the
// float range would become infinity, which the engine refuses only after the request was
// accepted (a 500 instead of a 400 naming the field).
float get_float(const json& body, const char* name, float fallback) {
  const double d = get_number(body, name, fallback);
  if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) {
    throw invalid_request(fmt::format("'{}' = {} is out of range", name, d), name);
  }
  return static_cast<float>(d);
}

bool is_integral(const json& v) {
  if (v.is_number_integer()) return true;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15;
  }
  return false;
}

int64_t get_integer(const json& body, const char* name, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!is_integral(*v)) throw wrong_type(name, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw invalid_request(fmt::format("'{}' is too large", name), name);
  }
  return v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::string get_string(const json& body, const char* name, const std::string& fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_string()) throw wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

ApiError unsupported(const std::string& what, const char* name) {
  return invalid_request(fmt::format("{} is not supported by this server", what), name);
}

namespace {

// Fields we do not implement and refuse, because answering without them would change
// what the client relies on (docs/server.md); the ones we can ignore are named by
// ignored_fields() instead. n, best_of, logprobs and logit_bias: request_fields.cpp.
void reject_unsupported(const json& body, Endpoint ep, bool jinja_chat) {
  if (get_bool(body, "echo", false))
    throw unsupported("'echo' (the prompt's log-probabilities are not computed)", "echo");
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
    throw unsupported("'suffix' (insertion)", "suffix");
  }
  const bool tools_ok = jinja_chat && ep == Endpoint::chat;
  for (const char* name : {"tools", "functions"}) {
    const json* v = field(body, name);
    if (!v || (v->is_array() && v->empty())) continue;
    if (tools_ok && std::string_view(name) == "tools") {
      if (!v->is_array()) throw wrong_type("tools", "an array of tool objects", *v);
      for (size_t i = 0; i < v->size(); ++i)
        if (!(*v)[i].is_object()) throw invalid_request(fmt::format("'tools[{}]' must be an object", i), "tools");
      continue;
    }
    throw unsupported(fmt::format("'{}' (tool calls)", name), name);
  }
  if (const json* v = field(body, "tool_choice");
      v && !(v->is_string() && (v->get<std::string>() == "none" || (tools_ok && v->get<std::string>() == "auto")))) {
    throw unsupported("'tool_choice' other than \"none\" or \"auto\"", "tool_choice");
  }
  (void)ep;
}

std::vector<std::string> parse_stops(const json& body) {
  std::vector<std::string> out;
  const json* v = field(body, "stop");
  if (!v) return out;
  auto add = [&](const json& s, size_t i) {
    if (!s.is_string())
      throw invalid_request(fmt::format("'stop[{}]' must be a string, got {}", i, s.type_name()), "stop");
    std::string str = s.get<std::string>();
    if (str.empty()) throw invalid_request(fmt::format("'stop[{}]' is empty", i), "stop");
    if (str.size() > 1024) throw invalid_request(fmt::format("'stop[{}]' is longer than 1024 bytes", i), "stop");
    out.push_back(std::move(str));
  };
  if (v->is_string()) {
    add(*v, 0);
  } else if (v->is_array()) {
    if (v->size() > 16) throw invalid_request(fmt::format("'stop' has {} strings; at most 16", v->size()), "stop");
    for (size_t i = 0; i < v->size(); ++i) add((*v)[i], i);
  } else {
    throw wrong_type("stop", "a string or an array of strings", *v);
  }
  return out;
}

std::string message_content(const json& m, size_t i) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string text;
    for (size_t k = 0; k < it->size(); ++k) {
      const json& part = (*it)[k];
      if (!part.is_object())
        throw invalid_request(fmt::format("'messages[{}].content[{}]' must be an object", i, k), "messages");
      const std::string type = get_string(part, "type", "");
      if (type != "text") {
        throw invalid_request(
            fmt::format("'messages[{}].content[{}]': content type '{}' is not supported (only 'text')", i, k, type),
            "messages");
      }
      const json* t = field(part, "text");
      if (!t || !t->is_string())
        throw invalid_request(fmt::format("'messages[{}].content[{}].text' must be a string", i, k), "messages");
      text += t->get<std::string>();
    }
    return text;
  }
  throw invalid_request(fmt::format("'messages[{}].content' must be a string or an array of content parts, got {}", i,
                                    it->type_name()),
                        "messages");
}

std::vector<chat::ChatMessage> parse_messages(const json& body, bool jinja_chat) {
  const json* v = field(body, "messages");
  if (!v) throw invalid_request("'messages' is required", "messages");
  if (!v->is_array()) throw wrong_type("messages", "an array", *v);
  if (v->empty()) throw invalid_request("'messages' is empty: a chat needs at least one message", "messages");
  std::vector<chat::ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    if (!m.is_object())
      throw invalid_request(fmt::format("'messages[{}]' must be an object, got {}", i, m.type_name()), "messages");
    auto r = m.find("role");
    if (r == m.end() || !r->is_string())
      throw invalid_request(fmt::format("'messages[{}].role' must be a string", i), "messages");
    std::string role = r->get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && !(jinja_chat && role == "tool")) {
      throw invalid_request(
          fmt::format("'messages[{}].role' '{}' is not supported (system, developer, user, assistant{})", i, role,
                      jinja_chat ? ", tool" : ""),
          "messages");
    }
    if (const json* tc = field(m, "tool_calls"); tc && !tc->is_null()) {
      if (!jinja_chat)
        throw unsupported("'tool_calls' in messages (this model's chat format has no tool calls)", "messages");
      if (!tc->is_array())
        throw invalid_request(fmt::format("'messages[{}].tool_calls' must be an array", i), "messages");
    }
    out.push_back({role, message_content(m, i)});
  }
  return out;
}

// Token ids (a JSON array, `where` naming it in messages, `param` the error's field):
// integers in [0, 2^31).
std::vector<int32_t> token_array(const json& a, const std::string& where, const char* param) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const json& t = a[i];
    if (!t.is_number_integer()) {
      throw invalid_request(fmt::format("'{}[{}]' must be a token id (integer), got {}", where, i, t.type_name()),
                            param);
    }
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      throw invalid_request(fmt::format("'{}[{}]' = {} is not a valid token id", where, i, id), param);
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

}  // namespace

GenerationRequest parse_generation_request(const json& body, Endpoint ep, const sampling::SamplingParams& defaults,
                                           bool jinja_chat) {
  GenerationRequest r;
  r.endpoint = ep;
  r.model = get_string(body, "model", "");
  reject_unsupported(body, ep, jinja_chat);

  if (ep != Endpoint::chat) {
    const json* p = field(body, "prompt");
    if (!p) throw invalid_request("'prompt' is required", "prompt");
    if (p->is_string()) {
      r.prompt = p->get<std::string>();
    } else if (p->is_array()) {
      if (p->empty()) throw invalid_request("'prompt' is an empty array", "prompt");
      if ((*p)[0].is_string()) {
        if (p->size() != 1)
          throw unsupported(fmt::format("a batch of {} prompts (send one prompt per request)", p->size()), "prompt");
        r.prompt = (*p)[0].get<std::string>();
      } else {
        r.prompt_is_tokens = true;
        r.prompt_tokens = token_array(*p, "prompt", "prompt");
      }
    } else {
      throw wrong_type("prompt", "a string, an array of token ids or an array with one string", *p);
    }
  } else {
    r.messages = parse_messages(body, jinja_chat);
  }

  int64_t max_tokens = get_integer(body, "max_tokens", -1);
  if (ep == Endpoint::chat) max_tokens = get_integer(body, "max_completion_tokens", max_tokens);
  if (field(body, "max_tokens") || field(body, "max_completion_tokens")) {
    if (max_tokens < 1)
      throw invalid_request(fmt::format("'max_tokens' must be >= 1, got {}", max_tokens), "max_tokens");
  }
  if (ep == Endpoint::native && field(body, "n_predict")) {
    // llama-server: n_predict (-1 = until the context is full) before max_tokens.
    max_tokens = get_integer(body, "n_predict", -1);
    if (max_tokens == 0 || max_tokens < -1) {
      throw invalid_request(fmt::format("'n_predict' must be -1 (until the context is full) or >= 1, got {}",
                                        max_tokens),
                            "n_predict");
    }
  }
  r.max_tokens = max_tokens;

  r.sampling = defaults;
  r.sampling.temp = get_float(body, "temperature", defaults.temp);
  if (r.sampling.temp < 0.0f)
    throw invalid_request(fmt::format("'temperature' must be >= 0, got {}", r.sampling.temp), "temperature");
  r.sampling.top_p = get_float(body, "top_p", defaults.top_p);
  if (!(r.sampling.top_p > 0.0f && r.sampling.top_p <= 1.0f)) {
    throw invalid_request(fmt::format("'top_p' must be in (0, 1], got {}", r.sampling.top_p), "top_p");
  }
  const int64_t top_k = get_integer(body, "top_k", defaults.top_k);
  if (top_k < -1 || top_k > std::numeric_limits<int32_t>::max()) {
    throw invalid_request(fmt::format("'top_k' must be >= 0 (0 or -1 = off), got {}", top_k), "top_k");
  }
  r.sampling.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  r.sampling.min_p = get_float(body, "min_p", defaults.min_p);
  if (!(r.sampling.min_p >= 0.0f && r.sampling.min_p <= 1.0f)) {
    throw invalid_request(fmt::format("'min_p' must be in [0, 1], got {}", r.sampling.min_p), "min_p");
  }
  // Penalties (llama-server's repeat_penalty / repeat_last_n, OpenAI's presence and
  // frequency penalties, vLLM's repetition_penalty = repeat_penalty over the whole context).
  r.sampling.repeat_penalty = get_float(body, "repeat_penalty", defaults.repeat_penalty);
  const int64_t last_n = get_integer(body, "repeat_last_n", defaults.repeat_last_n);
  if (last_n < -1 || last_n > std::numeric_limits<int32_t>::max()) {
    throw invalid_request(fmt::format("'repeat_last_n' must be >= -1 (0 = off, -1 = the whole context), got {}",
                                      last_n),
                          "repeat_last_n");
  }
  r.sampling.repeat_last_n = static_cast<int32_t>(last_n);
  if (field(body, "repetition_penalty")) {
    if (field(body, "repeat_penalty")) {
      throw invalid_request("give 'repeat_penalty' or 'repetition_penalty', not both", "repetition_penalty");
    }
    r.sampling.repeat_penalty = get_float(body, "repetition_penalty", 1.0f);
    if (!field(body, "repeat_last_n")) r.sampling.repeat_last_n = -1;
  }
  if (!(r.sampling.repeat_penalty > 0.0f) || !std::isfinite(r.sampling.repeat_penalty)) {
    throw invalid_request(fmt::format("'repeat_penalty' must be > 0 (1 = off), got {}", r.sampling.repeat_penalty),
                          "repeat_penalty");
  }
  for (auto [name, value] : {std::pair{"presence_penalty", &r.sampling.presence_penalty},
                             std::pair{"frequency_penalty", &r.sampling.frequency_penalty}}) {
    *value = get_float(body, name, *value);  // r.sampling started as the defaults
    if (!(*value >= -2.0f && *value <= 2.0f))
      throw invalid_request(fmt::format("'{}' must be in [-2, 2], got {}", name, *value), name);
  }
  parse_sampling_fields(body, ep, r);  // typical_p, logit_bias, logprobs, n (request_fields.cpp)
  const int64_t seed = get_integer(body, "seed", -1);
  if (seed < -1) throw invalid_request(fmt::format("'seed' must be >= 0 (or -1 = random), got {}", seed), "seed");
  r.seed_given = seed >= 0;
  if (r.seed_given) r.sampling.seed = static_cast<uint64_t>(seed);

  r.stops = parse_stops(body);
  r.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object", *so);
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  r.ignore_eos = get_bool(body, "ignore_eos", false);
  r.spec = get_string(body, "spec", "");
  r.cache_prompt = get_bool(body, "cache_prompt", true);
  return r;
}

EmbeddingRequest parse_embedding_request(const json& body) {
  EmbeddingRequest r;
  r.model = get_string(body, "model", "");
  const std::string fmt_name = get_string(body, "encoding_format", "float");
  if (fmt_name != "float" && fmt_name != "base64") {
    throw invalid_request(fmt::format("'encoding_format' must be \"float\" or \"base64\", got \"{}\"", fmt_name),
                          "encoding_format");
  }
  r.base64 = fmt_name == "base64";
  if (const json* d = field(body, "dimensions"); d && !d->is_null())
    throw unsupported("'dimensions' (the model's width only)", "dimensions");
  const json* in = field(body, "input");
  if (!in) throw invalid_request("'input' is required", "input");
  auto text = [&](const json& s, const std::string& where) {
    EmbeddingInput e;
    e.text = s.get<std::string>();
    if (e.text.empty()) throw invalid_request(fmt::format("'{}' is an empty string", where), "input");
    return e;
  };
  if (in->is_array() && in->empty()) throw invalid_request("'input' is an empty array", "input");
  auto tokens = [&](const json& a, const std::string& where) {
    EmbeddingInput e;
    e.tokens = token_array(a, where, "input");
    if (e.tokens.empty()) throw invalid_request(fmt::format("'{}' is an empty array of tokens", where), "input");
    e.is_tokens = true;
    return e;
  };
  if (in->is_string()) {
    r.inputs.push_back(text(*in, "input"));
  } else if (in->is_array() && (*in)[0].is_number_integer()) {
    r.inputs.push_back(tokens(*in, "input"));
  } else if (in->is_array()) {
    if (in->size() > 2048)
      throw invalid_request(fmt::format("'input' has {} items; at most 2048", in->size()), "input");
    for (size_t i = 0; i < in->size(); ++i) {
      const json& x = (*in)[i];
      const std::string where = fmt::format("input[{}]", i);
      if (x.is_string()) {
        r.inputs.push_back(text(x, where));
      } else if (x.is_array()) {
        r.inputs.push_back(tokens(x, where));
      } else {
        throw invalid_request(fmt::format("'{}' must be a string or an array of token ids, got {}", where,
                                          x.type_name()),
                              "input");
      }
    }
  } else {
    throw wrong_type("input", "a string, an array of strings, an array of token ids or an array of such arrays", *in);
  }
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  TokenizeRequest r;
  const json* c = field(body, "content");
  if (!c) throw invalid_request("'content' is required", "content");
  if (!c->is_string()) throw wrong_type("content", "a string", *c);
  r.content = c->get<std::string>();
  r.add_special = get_bool(body, "add_special", false);
  r.with_pieces = get_bool(body, "with_pieces", false);
  return r;
}

std::vector<int32_t> parse_detokenize_request(const json& body, int32_t n_vocab) {
  const json* t = field(body, "tokens");
  if (!t) throw invalid_request("'tokens' is required", "tokens");
  if (!t->is_array()) throw wrong_type("tokens", "an array of token ids", *t);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const json& v = (*t)[i];
    if (!v.is_number_integer())
      throw invalid_request(fmt::format("'tokens[{}]' must be an integer, got {}", i, v.type_name()), "tokens");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= n_vocab) {
      throw invalid_request(fmt::format("'tokens[{}]' = {} is outside the vocabulary (0..{})", i, id, n_vocab - 1),
                            "tokens");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string make_request_id(Endpoint ep) {
  static const uint64_t prefix = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}-{:016x}{:06x}", ep == Endpoint::chat ? "chatcmpl" : "cmpl", prefix,
                     counter.fetch_add(1) & 0xffffff);
}

}  // namespace treespec::server
