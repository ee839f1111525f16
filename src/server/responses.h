// Response bodies of the generation routes (responses.cpp) and their log-probabilities
// (logprobs.cpp), shared by generate.cpp. Not a public header.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace treespec::server {

// What every answer of one request shares.
struct Reply {
  Endpoint ep;
  std::string id;
  int64_t created;
  std::string model;
  std::string method;
  std::string prompt_text;  // native: the prompt as text
  bool logprobs = false;    // the request asked for log-probabilities
};

// One choice as its answer shows it: a copy of its RequestState taken under the lock.
struct Outcome {
  std::string text;
  std::string finish_reason;
  std::string stop_word;
  std::string error;
  int32_t n_completion_tokens = 0;
  int64_t n_prompt = 0;
  int32_t slot = -1;
  engine::SequenceParams params;
  std::vector<std::string> stops;
  engine::SpecStats stats;
  double t_arrival = 0.0, t_start = 0.0, t_first_token = 0.0, t_done = 0.0;
  std::vector<sampling::TokenLogprob> logprobs;
};
Outcome outcome_of(RequestState& s);
// The request as a whole for n choices: prompt and seed of the first, completion
// tokens and speculative counters summed, first token the earliest, done the latest.
Outcome merge_outcomes(const std::vector<Outcome>& outs);

nlohmann::json usage_json(const Outcome& o);
nlohmann::json treespec_json(const Outcome& o, const std::string& method);
nlohmann::json timings_json(const Outcome& o);
// llama-server's /completion answer (the final one, or a streamed piece when !done).
nlohmann::json native_json(const Reply& r, const Outcome& o, const std::string& content, bool done);
// One OpenAI choice (chunk: a streamed delta; first_chunk: the chat role announcement).
// logprobs: the choice's "logprobs" value (null when not asked).
nlohmann::json choice_json(const Reply& r, int32_t index, const std::string& text, const nlohmann::json& finish_reason,
                           bool chunk, bool first_chunk, nlohmann::json logprobs = nullptr);
nlohmann::json envelope(const Reply& r, bool chunk);

// Log-probability entries in the answer shapes (docs/server.md, "Log-probabilities").
// One writer per choice: it keeps the text offset across the pieces of a stream.
class LogprobWriter {
 public:
  // prev_token: the prompt's last token (the decoder's prime, as the answer's text).
  LogprobWriter(const tokenizer::Tokenizer& tok, int32_t prev_token);
  // OpenAI completions (legacy): {"tokens", "token_logprobs", "top_logprobs": [{token:
  // logprob}], "text_offset"}.
  nlohmann::json completions(std::span<const sampling::TokenLogprob> entries);
  // OpenAI chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}.
  nlohmann::json chat(std::span<const sampling::TokenLogprob> entries) const;
  // llama-server's completion_probabilities: [{"id", "token", "bytes", "logprob", "top_logprobs": [...]}].
  nlohmann::json native(std::span<const sampling::TokenLogprob> entries) const;
  // The shape of `ep`: chat and completions as above (their choice's "logprobs").
  nlohmann::json of(Endpoint ep, std::span<const sampling::TokenLogprob> entries);

 private:
  std::string token_text(int32_t id) const;
  nlohmann::json token_bytes(int32_t id) const;
  const tokenizer::Tokenizer& tok_;
  tokenizer::StreamDecoder dec_;
  int64_t offset_ = 0;  // code points of the text before the next entry
};

}  // namespace treespec::server
