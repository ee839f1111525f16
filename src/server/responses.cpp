// The JSON answers of /v1/completions, /v1/chat/completions and /completion (plain and
// streamed pieces), built from Outcome snapshots of the requests' states.
#include "server/responses.h"

#include <algorithm>

namespace treespec::server {

using nlohmann::json;

Outcome outcome_of(RequestState& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  Outcome o;
  o.text = s.text;
  o.finish_reason = s.finish_reason;
  o.stop_word = s.stop_word;
  o.error = s.error;
  o.n_completion_tokens = s.n_completion_tokens;
  o.n_prompt = static_cast<int64_t>(s.prompt.size());
  o.slot = s.slot;
  o.params = s.params;
  o.stops = s.stops;
  o.stats = s.stats;
  o.t_arrival = s.t_arrival;
  o.t_start = s.t_start;
  o.t_first_token = s.t_first_token;
  o.t_done = s.t_done;
  o.logprobs = s.logprobs;
  return o;
}

Outcome merge_outcomes(const std::vector<Outcome>& outs) {
  Outcome m = outs.at(0);
  for (size_t i = 1; i < outs.size(); ++i) {
    const Outcome& o = outs[i];
    m.n_completion_tokens += o.n_completion_tokens;
    m.stats.merge(o.stats);
    if (o.t_first_token > 0.0 && (m.t_first_token == 0.0 || o.t_first_token < m.t_first_token))
      m.t_first_token = o.t_first_token;
    m.t_done = std::max(m.t_done, o.t_done);
  }
  m.stats.n_prompt = outs[0].stats.n_prompt;  // one prompt
  m.stats.n_prompt_cached = outs[0].stats.n_prompt_cached;
  return m;
}

json usage_json(const Outcome& o) {
  // OpenAI's prompt_tokens_details.cached_tokens: prompt tokens whose KV came from the
  // prefix cache instead of being computed.
  return json{{"prompt_tokens", o.n_prompt},
              {"completion_tokens", o.n_completion_tokens},
              {"total_tokens", o.n_prompt + o.n_completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", o.stats.n_prompt_cached}}}};
}

// The per-request speculative statistics extension (vLLM's definitions).
json treespec_json(const Outcome& o, const std::string& method) {
  const auto& st = o.stats;
  json j;
  j["spec"] = method;
  // The seed the request sampled with (drawn per request when it gave none): sending it
  // back with the same request reproduces the answer (docs/sampling.md).
  j["seed"] = o.params.sampling.seed;
  j["steps"] = st.n_steps;
  j["num_drafts"] = st.n_drafts;
  j["num_draft_tokens"] = st.n_draft_tokens;
  j["num_accepted_tokens"] = st.n_accepted;
  j["accepted_per_pos"] = st.accepted_per_pos;
  j["acceptance_rate"] = st.acceptance_rate();
  j["mean_accepted_length"] = st.mean_accepted_length();
  j["tokens_per_s"] = st.tokens_per_s();
  j["queue_ms"] = 1e3 * std::max(0.0, o.t_start - o.t_arrival);
  j["prompt_ms"] = 1e3 * st.t_prompt;
  j["ttft_ms"] = o.t_first_token > 0.0 ? json(1e3 * (o.t_first_token - o.t_arrival)) : json(nullptr);
  j["total_ms"] = 1e3 * (o.t_done - o.t_arrival);
  return j;
}

// llama-server's `timings` object, including the draft counters benchmark tools parse.
json timings_json(const Outcome& o) {
  const auto& st = o.stats;
  const double prompt_ms = 1e3 * st.t_prompt, predicted_ms = 1e3 * st.t_decode();
  return json{{"prompt_n", o.n_prompt},
              {"prompt_ms", prompt_ms},
              {"prompt_per_second", prompt_ms > 0 ? 1e3 * static_cast<double>(o.n_prompt) / prompt_ms : 0.0},
              {"predicted_n", o.n_completion_tokens},
              {"predicted_ms", predicted_ms},
              {"predicted_per_second",
               predicted_ms > 0 ? 1e3 * static_cast<double>(st.n_generated) / predicted_ms : 0.0},
              {"draft_n", st.n_draft_tokens},
              {"draft_n_accepted", st.n_accepted}};
}

// stop_type: eos (an end-of-generation token), word (a stop string), limit (n_predict or
// the context), none (cancelled).
json native_json(const Reply& r, const Outcome& o, const std::string& content, bool done) {
  json j = {{"index", 0}, {"content", content}, {"tokens", json::array()}, {"stop", done}, {"id_slot", o.slot}};
  if (!done) return j;
  const std::string stop_type = !o.stop_word.empty()          ? "word"
                                : o.finish_reason == "stop"   ? "eos"
                                : o.finish_reason == "length" ? "limit"
                                                              : "none";
  const auto& sp = o.params.sampling;
  j["model"] = r.model;
  j["prompt"] = r.prompt_text;
  j["tokens_predicted"] = o.n_completion_tokens;
  j["tokens_evaluated"] = o.n_prompt;
  j["tokens_cached"] = o.n_prompt + o.n_completion_tokens;  // the slot's cells, as llama-server's n_past
  j["truncated"] = false;
  j["stop_type"] = stop_type;
  j["stopping_word"] = o.stop_word;
  j["has_new_line"] = o.text.find('\n') != std::string::npos;
  j["generation_settings"] = {{"n_predict", o.params.n_predict},
                              {"temperature", sp.temp},
                              {"top_k", sp.top_k},
                              {"top_p", sp.top_p},
                              {"min_p", sp.min_p},
                              {"typical_p", sp.typical_p},
                              {"n_probs", o.params.top_logprobs},
                              {"seed", sp.seed},
                              {"ignore_eos", o.params.ignore_eog},
                              {"cache_prompt", o.params.cache_prompt},
                              {"stop", o.stops},
                              {"speculative", r.method}};
  j["timings"] = timings_json(o);
  j["treespec"] = treespec_json(o, r.method);
  return j;
}

json choice_json(const Reply& r, int32_t index, const std::string& text, const json& finish_reason, bool chunk,
                 bool first_chunk, json logprobs) {
  json c;
  c["index"] = index;
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
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish_reason;
  return c;
}

json envelope(const Reply& r, bool chunk) {
  json j;
  j["id"] = r.id;
  j["object"] =
      r.ep == Endpoint::completions ? "text_completion" : (chunk ? "chat.completion.chunk" : "chat.completion");
  j["created"] = r.created;
  j["model"] = r.model;
  return j;
}

}  // namespace treespec::server
