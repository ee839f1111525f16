// POST /v1/completions, /v1/chat/completions and /completion: validation, tokenization,
// queueing on the scheduler (n choices: n sequences), and the response as one JSON body
// or as Server-Sent Events. The bodies themselves: responses.cpp, logprobs.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <utility>

#include "core/log.h"
#include "core/timer.h"
#include "server/connection.h"
#include "server/responses.h"
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

// One choice of a streamed answer.
struct StreamChoice {
  std::shared_ptr<RequestState> state;
  std::unique_ptr<LogprobWriter> lp;  // when the request asked for log-probabilities
  bool sent_first = false;
  bool finished = false;  // its last event went out
};

// State of one SSE response, owned by httplib's content provider.
struct Stream {
  Reply reply;
  std::vector<StreamChoice> choices;
  std::shared_ptr<Notifier> notifier;  // n > 1: wakes on any choice
  uint64_t seen = 0;
  bool include_usage = false;
  int fd = -1;
  std::shared_ptr<InflightGuard> guard;
};

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

int32_t slot_of(RequestState& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  return s.slot;
}

// llama-server's stream: pieces, then a final object with stop: true; no [DONE].
std::string native_events(Stream& s, const std::string& text, const std::vector<sampling::TokenLogprob>& lp,
                          bool done) {
  StreamChoice& c = s.choices[0];
  std::string out;
  if (done) {
    const Outcome o = outcome_of(*c.state);
    if (!o.error.empty()) return sse(ApiError(500, "server_error", o.error).body());
    if (!text.empty()) out += sse(native_json(s.reply, o, text, false));
    json j = native_json(s.reply, o, "", true);
    if (c.lp) j["completion_probabilities"] = c.lp->native(lp);
    return out + sse(j);
  }
  if (text.empty()) return out;
  Outcome piece;
  piece.slot = slot_of(*c.state);
  json j = native_json(s.reply, piece, text, false);
  if (c.lp && !lp.empty()) j["completion_probabilities"] = c.lp->native(lp);
  return sse(j);
}

// OpenAI's stream, one choice's events: its role announcement (chat), its text chunks;
// and, when it is done, its finish chunk (the request's usage, timings and treespec
// objects on the last one, `totals`).
std::string openai_events(Stream& s, int32_t index, const std::string& text,
                          const std::vector<sampling::TokenLogprob>& lp, bool done, const Outcome* totals) {
  StreamChoice& c = s.choices[static_cast<size_t>(index)];
  const Reply& r = s.reply;
  std::string out;
  if (!c.sent_first && (r.ep == Endpoint::chat || !text.empty() || done)) {
    // Chat streams announce the role first (as OpenAI does); completions just start.
    if (r.ep == Endpoint::chat) {
      json j = envelope(r, true);
      j["choices"] = json::array({choice_json(r, index, "", nullptr, true, true)});
      out += sse(j);
    }
    c.sent_first = true;
  }
  json logprobs = c.lp && !lp.empty() ? c.lp->of(r.ep, lp) : json(nullptr);
  if (!text.empty()) {
    json j = envelope(r, true);
    j["choices"] = json::array({choice_json(r, index, text, nullptr, true, false, std::exchange(logprobs, nullptr))});
    out += sse(j);
  }
  if (!done) return out;
  const Outcome o = outcome_of(*c.state);
  if (!o.error.empty()) return out + sse(ApiError(500, "server_error", o.error).body());
  json j = envelope(r, true);
  j["choices"] = json::array({choice_json(r, index, "", o.finish_reason, true, false, std::move(logprobs))});
  if (totals != nullptr) {
    j["usage"] = usage_json(*totals);
    j["timings"] = timings_json(*totals);
    j["treespec"] = treespec_json(*totals, r.method);
  }
  return out + sse(j);
}

// The events of every choice that has something new; true once all are done.
bool openai_step(Stream& s, std::string& out) {
  struct Taken {
    int32_t index;
    std::string text;
    std::vector<sampling::TokenLogprob> lp;
    bool done;
  };
  std::vector<Taken> taken;
  bool all_done = true;
  for (size_t i = 0; i < s.choices.size(); ++i) {
    StreamChoice& c = s.choices[i];
    if (c.finished) continue;
    Taken t{static_cast<int32_t>(i), {}, {}, false};
    t.done = c.state->take(t.text, c.lp ? &t.lp : nullptr);
    all_done = all_done && t.done;
    taken.push_back(std::move(t));
  }
  std::vector<Outcome> outs;
  if (all_done) {
    for (StreamChoice& c : s.choices) outs.push_back(outcome_of(*c.state));
  }
  const bool failed = std::any_of(outs.begin(), outs.end(), [](const Outcome& o) { return !o.error.empty(); });
  const Outcome totals = all_done && !failed ? merge_outcomes(outs) : Outcome{};
  for (size_t k = 0; k < taken.size(); ++k) {
    Taken& t = taken[k];
    const bool last = all_done && !failed && k + 1 == taken.size();
    out += openai_events(s, t.index, t.text, t.lp, t.done, last ? &totals : nullptr);
    if (t.done) s.choices[static_cast<size_t>(t.index)].finished = true;
  }
  if (all_done && !failed && s.include_usage) {
    json u = envelope(s.reply, true);
    u["choices"] = json::array();
    u["usage"] = usage_json(totals);
    out += sse(u);
  }
  if (all_done) out += "data: [DONE]\n\n";
  return all_done;
}

// One call of the chunked content provider: waits briefly for text, writes the events
// it has, ends the stream when the request is done. false = abort (client gone).
bool stream_step(Stream& s, httplib::DataSink& sink) {
  if (s.notifier) {
    s.seen = s.notifier->wait(s.seen, kPollSeconds);
  } else {
    s.choices[0].state->wait(kPollSeconds);
  }
  auto cancel = [&] {
    for (StreamChoice& c : s.choices) c.state->cancel();
  };
  if (peer_closed(s.fd)) {
    cancel();
    return false;
  }
  std::string out;
  bool done = false;
  if (s.reply.ep == Endpoint::native) {
    std::string text;
    std::vector<sampling::TokenLogprob> lp;
    StreamChoice& c = s.choices[0];
    done = c.state->take(text, c.lp ? &lp : nullptr);
    out = native_events(s, text, lp, done);
  } else {
    done = openai_step(s, out);
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    cancel();
    return false;
  }
  if (done) sink.done();
  return true;
}

// The method a request runs: its "spec" (400 unless the server offers it) or the server's.
std::string request_method(const std::string& spec, const std::vector<std::string>& offered,
                           const std::string& server_method) {
  if (spec.empty()) return server_method;
  if (std::find(offered.begin(), offered.end(), spec) == offered.end()) {
    throw invalid_request(
        fmt::format("'spec' = '{}' is not a method this server offers (it offers: {}; started with --spec {})", spec,
                    fmt::join(offered, ", "), server_method),
        "spec");
  }
  return spec;
}

// The prompt's tokens, exactly as `treespec run` tokenizes (BOS added, special-token
// text parsed); chat: the rendered messages, whose template may add stop strings.
std::vector<int32_t> request_prompt(const httplib::Request& req, const GenerationRequest& g,
                                    const chat::Formatter& formatter, const tokenizer::Tokenizer& tok,
                                    std::vector<std::string>& stops) {
  if (g.endpoint == Endpoint::chat) {
    // Messages as sent (key order kept for the template's tojson); parse_generation_request
    // has checked them.
    const auto raw = nlohmann::ordered_json::parse(req.body);
    const auto tools = raw.contains("tools") ? raw["tools"] : nlohmann::ordered_json();
    const auto kwargs = raw.contains("chat_template_kwargs") ? raw["chat_template_kwargs"] : nlohmann::ordered_json();
    if (!kwargs.is_null() && !kwargs.is_object()) {
      throw invalid_request("'chat_template_kwargs' must be an object of template variables", "chat_template_kwargs");
    }
    chat::ChatPrompt cp;
    try {
      cp = formatter.render(raw.at("messages"), tools, kwargs);
    } catch (const chat::TemplateError& e) {
      throw invalid_request(fmt::format("the model's chat template failed on these messages: {}", e.describe()),
                            "messages");
    }
    stops.insert(stops.end(), cp.stops.begin(), cp.stops.end());
    return std::move(cp.tokens);
  }
  if (g.prompt_is_tokens) {
    for (size_t i = 0; i < g.prompt_tokens.size(); ++i) {
      if (g.prompt_tokens[i] >= tok.n_vocab()) {
        throw invalid_request(fmt::format("'prompt[{}]' = {} is outside the vocabulary (0..{})", i, g.prompt_tokens[i],
                                          tok.n_vocab() - 1),
                              "prompt");
      }
    }
    return g.prompt_tokens;
  }
  return tok.encode(g.prompt, true, true);
}

// logit_bias ids must be in the vocabulary (400 naming the id); text keys become the
// tokens of their text (llama-server: tokenized without BOS or special tokens).
void resolve_logit_bias(GenerationRequest& g, const tokenizer::Tokenizer& tok) {
  for (const sampling::LogitBias& b : g.sampling.logit_bias) {
    if (b.token >= tok.n_vocab()) {
      throw invalid_request(fmt::format("'logit_bias': token id {} is outside the vocabulary (0..{})", b.token,
                                        tok.n_vocab() - 1),
                            "logit_bias");
    }
  }
  for (const auto& [text, bias] : g.logit_bias_text) {
    for (int32_t id : tok.encode(text, false, false)) g.sampling.logit_bias.push_back({id, bias});
  }
}

// Names the ignored fields in the log when the request ends before the scheduler's log
// line would (an error after parsing).
struct IgnoredFieldsNote {
  std::string fields;
  std::string path;
  bool handed_over = false;
  ~IgnoredFieldsNote() {
    if (!fields.empty() && !handed_over) TS_LOG_INFO("request to {}: not started | ignored fields: {}", path, fields);
  }
};

// Plain response: waits for every choice, cancelling all if the client hangs up.
void respond_plain(httplib::Response& res, const Reply& reply, const std::vector<std::shared_ptr<RequestState>>& states,
                   int fd, const tokenizer::Tokenizer& tok, int32_t prime) {
  for (const auto& state : states) {
    while (!state->wait_done(kPollSeconds)) {
      if (!peer_closed(fd)) continue;
      for (const auto& other : states) other->cancel();
    }
  }
  std::vector<Outcome> outs;
  outs.reserve(states.size());
  for (const auto& state : states) outs.push_back(outcome_of(*state));
  for (const Outcome& o : outs) {
    if (!o.error.empty()) throw ApiError(500, "server_error", o.error);
  }
  if (reply.ep == Endpoint::native) {
    json j = native_json(reply, outs[0], outs[0].text, true);
    if (reply.logprobs) j["completion_probabilities"] = LogprobWriter(tok, prime).native(outs[0].logprobs);
    send_json(res, 200, j);
    return;
  }
  json j = envelope(reply, false);
  j["choices"] = json::array();
  for (size_t i = 0; i < outs.size(); ++i) {
    json lp = reply.logprobs ? LogprobWriter(tok, prime).of(reply.ep, outs[i].logprobs) : json(nullptr);
    j["choices"].push_back(
        choice_json(reply, static_cast<int32_t>(i), outs[i].text, outs[i].finish_reason, false, false, std::move(lp)));
  }
  const Outcome totals = merge_outcomes(outs);
  j["usage"] = usage_json(totals);
  j["timings"] = timings_json(totals);
  j["treespec"] = treespec_json(totals, reply.method);
  send_json(res, 200, j);
}

}  // namespace

void Server::Impl::handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint ep) {
  const double t_arrival = core::now_s();
  require_ready();
  const json body = parse_body(req.body);
  // Named before anything else is checked, so every answer to this body carries them.
  IgnoredFieldsNote ignored{fmt::format("{}", fmt::join(ignored_fields(body, ep), ", ")), req.path};
  if (!ignored.fields.empty()) res.set_header("X-Treespec-Ignored-Fields", ignored.fields);
  GenerationRequest g = parse_generation_request(body, ep, cfg.sampling, formatter->jinja());
  require_model(g.model);
  resolve_logit_bias(g, *tok);
  // The body as sent: a schema's properties keep their order (parse_body checked the JSON).
  const std::shared_ptr<const grammar::Grammar> constraint =
      parse_request_grammar(nlohmann::ordered_json::parse(req.body));
  std::vector<std::string> stops = g.stops;
  std::vector<int32_t> prompt = request_prompt(req, g, *formatter, *tok, stops);
  if (prompt.empty()) throw invalid_request("the prompt is empty (and the model adds no BOS token)", "prompt");
  if (static_cast<int64_t>(prompt.size()) > n_ctx) {
    throw ApiError(
        400, "invalid_request_error",
        fmt::format(
            "the prompt has {} tokens but the context holds {} per request (--max-model-len, at most -c/--ctx-size)",
            prompt.size(), n_ctx),
        "context_length_exceeded", ep == Endpoint::chat ? "messages" : "prompt");
  }
  // max_tokens beyond the room left is clamped, as llama-server does; the request ends
  // with finish_reason "length" there. Without max_tokens: 16 for completions (OpenAI's
  // default), until the context is full for chat.
  const int64_t room = n_ctx - static_cast<int64_t>(prompt.size()) + 1;
  int64_t n_predict = g.max_tokens >= 0 ? g.max_tokens : (ep == Endpoint::completions ? 16 : room);  // native: as chat
  n_predict = std::min(n_predict, room);

  // Choice i is its own sequence with seed + i (the drawn seed when the request gave none).
  const uint64_t seed = g.seed_given            ? g.sampling.seed
                        : cfg.default_seed >= 0 ? static_cast<uint64_t>(cfg.default_seed)
                                                : random_seed();
  const std::string id = make_request_id(ep);
  auto notifier = g.n > 1 && g.stream ? std::make_shared<Notifier>() : nullptr;
  std::vector<std::shared_ptr<RequestState>> states;
  for (int32_t i = 0; i < g.n; ++i) {
    auto state = std::make_shared<RequestState>();
    state->id = g.n > 1 ? fmt::format("{}-{}", id, i) : id;
    state->prompt = prompt;
    state->params.sampling = g.sampling;
    state->params.sampling.seed = seed + static_cast<uint64_t>(i);
    state->params.mode = cfg.verify;
    state->params.typical = cfg.typical;
    state->params.n_predict = static_cast<int32_t>(n_predict);
    state->params.ignore_eog = g.ignore_eos;
    state->params.cache_prompt = g.cache_prompt;
    state->params.logprobs = g.logprobs;
    state->params.top_logprobs = g.top_logprobs;
    if (constraint) state->params.grammar = {constraint, token_mask};
    state->stops = stops;
    state->t_arrival = t_arrival;
    state->spec = g.spec;
    if (i == 0) state->ignored_fields = ignored.fields;
    state->notifier = notifier;
    states.push_back(std::move(state));
  }
  const std::string method = request_method(g.spec, scheduler->request_methods(), cfg.spec.method);

  auto guard = std::make_shared<InflightGuard>(inflight);
  const Status st = scheduler->submit(states);
  if (!st.ok()) {
    throw ApiError(503, "unavailable_error", st.message(),
                   st.code() == StatusCode::no_slot ? "queue_full" : "shutting_down");
  }
  ignored.handed_over = true;  // the scheduler's log line names them
  const Reply reply{ep,
                    id,
                    static_cast<int64_t>(std::time(nullptr)),
                    model_id,
                    method,
                    ep != Endpoint::native ? std::string()
                    : g.prompt_is_tokens   ? tok->decode(g.prompt_tokens)
                                           : g.prompt,
                    g.logprobs};
  const int fd = find_connection_fd(req.remote_addr, req.remote_port, req.local_port);

  if (g.stream) {
    auto s = std::make_shared<Stream>();
    s->reply = reply;
    for (const auto& state : states) {
      s->choices.push_back({state, g.logprobs ? std::make_unique<LogprobWriter>(*tok, prompt.back()) : nullptr});
    }
    s->notifier = notifier;
    s->include_usage = g.include_usage;
    s->fd = fd;
    s->guard = guard;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [s](size_t, httplib::DataSink& sink) { return stream_step(*s, sink); },
        [states](bool) {  // response gone: stop generating (no-op when done)
          for (const auto& state : states) state->cancel();
        });
    return;
  }

  respond_plain(res, reply, states, fd, *tok, prompt.back());
}

}  // namespace treespec::server
