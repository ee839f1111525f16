// POST /v1/completions and /v1/chat/completions: validation, tokenization, queueing on
// the scheduler, and the response as one JSON body or as Server-Sent Events.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>

#include "core/timer.h"
#include "server/connection.h"
#include "server/server_impl.h"

namespace treespec::server {

using nlohmann::json;

namespace {

constexpr double kPollSeconds = 0.05;  // how often a waiting handler checks its client

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return gen() >> 1;  // reported in the response: a seed the request's "seed" field accepts
}

json usage_json(const RequestState& s) {
  const auto n_prompt = static_cast<int64_t>(s.prompt.size());
  // OpenAI's prompt_tokens_details.cached_tokens: prompt tokens whose KV came from the
  // prefix cache instead of being computed.
  return json{{"prompt_tokens", n_prompt},
              {"completion_tokens", s.n_completion_tokens},
              {"total_tokens", n_prompt + s.n_completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", s.stats.n_prompt_cached}}}};
}

// The per-request speculative statistics extension (vLLM's definitions).
json treespec_json(const RequestState& s, const std::string& method) {
  const auto& st = s.stats;
  json j;
  j["spec"] = method;
  // The seed the request sampled with (drawn per request when it gave none): sending it
  // back with the same request reproduces the answer (docs/sampling.md).
  j["seed"] = s.params.sampling.seed;
  j["steps"] = st.n_steps;
  j["num_drafts"] = st.n_drafts;
  j["num_draft_tokens"] = st.n_draft_tokens;
  j["num_accepted_tokens"] = st.n_accepted;
  j["accepted_per_pos"] = st.accepted_per_pos;
  j["acceptance_rate"] = st.acceptance_rate();
  j["mean_accepted_length"] = st.mean_accepted_length();
  j["tokens_per_s"] = st.tokens_per_s();
  j["queue_ms"] = 1e3 * std::max(0.0, s.t_start - s.t_arrival);
  j["prompt_ms"] = 1e3 * st.t_prompt;
  j["ttft_ms"] = s.t_first_token > 0.0 ? json(1e3 * (s.t_first_token - s.t_arrival)) : json(nullptr);
  j["total_ms"] = 1e3 * (s.t_done - s.t_arrival);
  return j;
}

// llama-server's `timings` object, including the draft counters benchmark tools parse.
json timings_json(const RequestState& s) {
  const auto& st = s.stats;
  const double prompt_ms = 1e3 * st.t_prompt, predicted_ms = 1e3 * st.t_decode();
  const auto n_prompt = static_cast<int64_t>(s.prompt.size());
  return json{{"prompt_n", n_prompt},
              {"prompt_ms", prompt_ms},
              {"prompt_per_second", prompt_ms > 0 ? 1e3 * static_cast<double>(n_prompt) / prompt_ms : 0.0},
              {"predicted_n", s.n_completion_tokens},
              {"predicted_ms", predicted_ms},
              {"predicted_per_second", predicted_ms > 0 ? 1e3 * static_cast<double>(st.n_generated) / predicted_ms : 0.0},
              {"draft_n", st.n_draft_tokens},
              {"draft_n_accepted", st.n_accepted}};
}

struct Reply {
  Endpoint ep;
  std::string id;
  int64_t created;
  std::string model;
  std::string method;
  std::string prompt_text;  // native: the prompt as text
};

// llama-server's /completion answer (the final one, or a streamed piece when !done).
// Called under s.mu. stop_type: eos (an end-of-generation token), word (a stop string),
// limit (n_predict or the context), none (cancelled).
json native_json(const Reply& r, const RequestState& s, const std::string& content, bool done) {
  json j = {{"index", 0}, {"content", content}, {"tokens", json::array()}, {"stop", done}, {"id_slot", s.slot}};
  if (!done) return j;
  const std::string stop_type = !s.stop_word.empty()          ? "word"
                                : s.finish_reason == "stop"   ? "eos"
                                : s.finish_reason == "length" ? "limit"
                                                              : "none";
  const auto n_prompt = static_cast<int64_t>(s.prompt.size());
  j["model"] = r.model;
  j["prompt"] = r.prompt_text;
  j["tokens_predicted"] = s.n_completion_tokens;
  j["tokens_evaluated"] = n_prompt;
  j["tokens_cached"] = n_prompt + s.n_completion_tokens;  // the slot's cells, as llama-server's n_past
  j["truncated"] = false;
  j["stop_type"] = stop_type;
  j["stopping_word"] = s.stop_word;
  j["has_new_line"] = s.text.find('\n') != std::string::npos;
  j["generation_settings"] = {{"n_predict", s.params.n_predict},
                              {"temperature", s.params.sampling.temp},
                              {"top_k", s.params.sampling.top_k},
                              {"top_p", s.params.sampling.top_p},
                              {"min_p", s.params.sampling.min_p},
                              {"seed", s.params.sampling.seed},
                              {"ignore_eos", s.params.ignore_eog},
                              {"cache_prompt", s.params.cache_prompt},
                              {"stop", s.stops},
                              {"speculative", r.method}};
  j["timings"] = timings_json(s);
  j["treespec"] = treespec_json(s, r.method);
  return j;
}

json choice_json(const Reply& r, const std::string& text, const json& finish_reason, bool chunk, bool first_chunk) {
  json c;
  c["index"] = 0;
  if (r.ep == Endpoint::completions) {
    c["text"] = text;
  } else if (!chunk) {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    json d = json::object();
    if (first_chunk) d["role"] = "assistant";
    if (!text.empty() || first_chunk) d["content"] = text;
    c["delta"] = d;
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_reason;
  return c;
}

json envelope(const Reply& r, bool chunk) {
  json j;
  j["id"] = r.id;
  j["object"] = r.ep == Endpoint::completions ? "text_completion" : (chunk ? "chat.completion.chunk" : "chat.completion");
  j["created"] = r.created;
  j["model"] = r.model;
  return j;
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// State of one SSE response, owned by httplib's content provider.
struct Stream {
  Reply reply;
  std::shared_ptr<RequestState> state;
  bool include_usage = false;
  int fd = -1;
  bool sent_first = false;
  std::shared_ptr<InflightGuard> guard;
};

// One call of the chunked content provider: waits briefly for text, writes the events
// it has, ends the stream when the request is done. false = abort (client gone).
// llama-server's stream: pieces, then a final object with stop: true; no [DONE].
std::string native_events(Stream& s, const std::string& text, bool done) {
  std::string out;
  std::lock_guard<std::mutex> lock(s.state->mu);
  if (done && !s.state->error.empty()) return sse(ApiError(500, "server_error", s.state->error).body());
  if (!text.empty()) out += sse(native_json(s.reply, *s.state, text, false));
  if (done) out += sse(native_json(s.reply, *s.state, "", true));
  return out;
}

// OpenAI's stream: chunks, the final one with finish_reason, usage and timings; [DONE].
std::string openai_events(Stream& s, const std::string& text, bool done) {
  std::string out;
  if (!s.sent_first && (s.reply.ep == Endpoint::chat || !text.empty() || done)) {
    // Chat streams announce the role first (as OpenAI does); completions just start.
    if (s.reply.ep == Endpoint::chat) {
      json j = envelope(s.reply, true);
      j["choices"] = json::array({choice_json(s.reply, "", nullptr, true, true)});
      out += sse(j);
    }
    s.sent_first = true;
  }
  if (!text.empty()) {
    json j = envelope(s.reply, true);
    j["choices"] = json::array({choice_json(s.reply, text, nullptr, true, false)});
    out += sse(j);
  }
  if (done) {
    RequestState& st = *s.state;
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.error.empty()) {
      out += sse(ApiError(500, "server_error", st.error).body());
    } else {
      json j = envelope(s.reply, true);
      j["choices"] = json::array({choice_json(s.reply, "", st.finish_reason, true, false)});
      j["usage"] = usage_json(st);
      j["timings"] = timings_json(st);
      j["treespec"] = treespec_json(st, s.reply.method);
      out += sse(j);
      if (s.include_usage) {
        json u = envelope(s.reply, true);
        u["choices"] = json::array();
        u["usage"] = usage_json(st);
        out += sse(u);
      }
    }
    out += "data: [DONE]\n\n";
  }
  return out;
}

bool stream_step(Stream& s, httplib::DataSink& sink) {
  s.state->wait(kPollSeconds);
  if (peer_closed(s.fd)) {
    s.state->cancel();
    return false;
  }
  std::string text;
  const bool done = s.state->take(text);
  const std::string out = s.reply.ep == Endpoint::native ? native_events(s, text, done) : openai_events(s, text, done);
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    s.state->cancel();
    return false;
  }
  if (done) sink.done();
  return true;
}

// The method a request runs: its "spec" (400 unless the server offers it) or the server's.
std::string request_method(const std::string& spec, const std::vector<std::string>& offered, const std::string& server_method) {
  if (spec.empty()) return server_method;
  if (std::find(offered.begin(), offered.end(), spec) == offered.end()) {
    throw invalid_request(fmt::format("'spec' = '{}' is not a method this server offers (it offers: {}; started with --spec {})",
                                      spec, fmt::join(offered, ", "), server_method), "spec");
  }
  return spec;
}

}  // namespace

void Server::Impl::handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
  const double t_arrival = core::now_s();
  require_ready();
  const json body = parse_body(req.body);
  GenerationRequest g = parse_generation_request(body, ep, cfg.sampling, formatter->jinja());
  require_model(g.model);

  // Tokenize exactly as `treespec run` does (BOS added, special-token text parsed).
  std::vector<int32_t> prompt;
  std::vector<std::string> stops = g.stops;
  if (ep == Endpoint::chat) {
    // Messages as sent (key order kept for the template's tojson); parse_generation_request
    // has checked them.
    const auto raw = nlohmann::ordered_json::parse(req.body);
    const auto tools = raw.contains("tools") ? raw["tools"] : nlohmann::ordered_json();
    chat::ChatPrompt cp;
    try {
      cp = formatter->render(raw.at("messages"), tools);
    } catch (const chat::TemplateError& e) {
      throw invalid_request(fmt::format("the model's chat template failed on these messages: {}", e.describe()), "messages");
    }
    prompt = std::move(cp.tokens);
    stops.insert(stops.end(), cp.stops.begin(), cp.stops.end());
  } else if (g.prompt_is_tokens) {
    for (size_t i = 0; i < g.prompt_tokens.size(); ++i) {
      if (g.prompt_tokens[i] >= tok->n_vocab()) {
        throw invalid_request(fmt::format("'prompt[{}]' = {} is outside the vocabulary (0..{})", i, g.prompt_tokens[i],
                                          tok->n_vocab() - 1), "prompt");
      }
    }
    prompt = g.prompt_tokens;
  } else {
    prompt = tok->encode(g.prompt, true, true);
  }
  if (prompt.empty()) throw invalid_request("the prompt is empty (and the model adds no BOS token)", "prompt");
  if (static_cast<int64_t>(prompt.size()) > n_ctx) {
    throw ApiError(400, "invalid_request_error",
                   fmt::format("the prompt has {} tokens but the context holds {} per request (--max-model-len, at most -c/--ctx-size)",
                               prompt.size(), n_ctx),
                   "context_length_exceeded", ep == Endpoint::chat ? "messages" : "prompt");
  }
  // max_tokens beyond the room left is clamped, as llama-server does; the request ends
  // with finish_reason "length" there. Without max_tokens: 16 for completions (OpenAI's
  // default), until the context is full for chat.
  const int64_t room = n_ctx - static_cast<int64_t>(prompt.size()) + 1;
  int64_t n_predict = g.max_tokens >= 0 ? g.max_tokens : (ep == Endpoint::completions ? 16 : room);  // native: as chat
  n_predict = std::min(n_predict, room);

  auto state = std::make_shared<RequestState>();
  state->id = make_request_id(ep);
  state->prompt = std::move(prompt);
  state->params.sampling = g.sampling;
  if (!g.seed_given) {
    state->params.sampling.seed = cfg.default_seed >= 0 ? static_cast<uint64_t>(cfg.default_seed) : random_seed();
  }
  state->params.mode = cfg.verify;
  state->params.typical = cfg.typical;
  state->params.n_predict = static_cast<int32_t>(n_predict);
  state->params.ignore_eog = g.ignore_eos;
  state->params.cache_prompt = g.cache_prompt;
  state->stops = std::move(stops);
  state->t_arrival = t_arrival;
  state->spec = g.spec;
  const std::string method = request_method(g.spec, scheduler->request_methods(), cfg.spec.method);

  auto guard = std::make_shared<InflightGuard>(inflight);
  const Status st = scheduler->submit(state);
  if (!st.ok()) {
    throw ApiError(503, "unavailable_error", st.message(), st.code() == StatusCode::no_slot ? "queue_full" : "shutting_down");
  }
  const Reply reply{ep, state->id, static_cast<int64_t>(std::time(nullptr)), model_id, method,
                    ep != Endpoint::native ? std::string() : g.prompt_is_tokens ? tok->decode(g.prompt_tokens) : g.prompt};
  const int fd = find_connection_fd(req.remote_addr, req.remote_port, req.local_port);

  if (g.stream) {
    auto s = std::make_shared<Stream>();
    s->reply = reply;
    s->state = state;
    s->include_usage = g.include_usage;
    s->fd = fd;
    s->guard = guard;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [s](size_t, httplib::DataSink& sink) { return stream_step(*s, sink); },
        [state](bool) { state->cancel(); });  // response gone: stop generating (no-op when done)
    return;
  }

  // Plain response: wait for completion, cancelling if the client hangs up.
  while (!state->wait_done(kPollSeconds)) {
    if (peer_closed(fd)) state->cancel();
  }
  std::lock_guard<std::mutex> lock(state->mu);
  if (!state->error.empty()) throw ApiError(500, "server_error", state->error);
  if (ep == Endpoint::native) {
    send_json(res, 200, native_json(reply, *state, state->text, true));
    return;
  }
  json j = envelope(reply, false);
  j["choices"] = json::array({choice_json(reply, state->text, state->finish_reason, false, false)});
  j["usage"] = usage_json(*state);
  j["timings"] = timings_json(*state);
  j["treespec"] = treespec_json(*state, method);
  send_json(res, 200, j);
}

}  // namespace treespec::server
