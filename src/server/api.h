// OpenAI-compatible request parsing and response bodies.
//
// parse_*() validate a JSON body field by field and throw ApiError (HTTP status,
// OpenAI error type, a message naming the field) for anything wrong: wrong type,
// out of range, missing, or a feature we do not implement whose absence would change
// what the client relies on (echo, suffix, constrained output). Fields that can be
// ignored are ignored but named (ignored_fields), never silently.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "chat/builtin_formats.h"
#include "grammar/grammar.h"
#include "sampling/sampling.h"

namespace treespec::server {

// An error answered as {"error": {"message", "type", "code", "param"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string code = {}, std::string param = {})
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        code_(std::move(code)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }
  nlohmann::json body() const;

 private:
  int status_;
  std::string type_;
  std::string code_;
  std::string param_;
};

// Shorthands for the common cases.
ApiError invalid_request(const std::string& message, const std::string& param = {});  // 400
ApiError unavailable(const std::string& message);                                     // 503
nlohmann::json error_body(int status, const std::string& type, const std::string& message,
                          const std::string& code = {});

// Parses a request body: valid UTF-8 (400), valid JSON (400), a JSON object (400).
nlohmann::json parse_body(const std::string& body);

// completions: OpenAI's /v1/completions; chat: /v1/chat/completions; native:
// llama-server's POST /completion (n_predict, its own answer and stream shapes).
enum class Endpoint { completions, chat, native };

// One generation request as the client asked for it (before tokenization).
struct GenerationRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;                   // "" when not given
  std::string prompt;                  // completions: text prompt
  std::vector<int32_t> prompt_tokens;  // completions: token-id prompt (prompt_is_tokens)
  bool prompt_is_tokens = false;
  std::vector<chat::ChatMessage> messages;  // chat
  int64_t max_tokens = -1;                  // -1 = not given
  sampling::SamplingParams sampling;        // server defaults overridden by the request
  bool seed_given = false;
  std::vector<std::string> stops;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool ignore_eos = false;     // extension (llama-server): generate past EOS
  std::string spec;            // extension: the speculative method ("" = the server's --spec)
  bool cache_prompt = true;    // llama-server: reuse and offer cached prompt KV
  // logit_bias entries keyed by text (llama-server): every token of the text gets the
  // bias; the server tokenizes them (sampling.logit_bias has the entries keyed by id).
  std::vector<std::pair<std::string, float>> logit_bias_text;
  // Log-probabilities: completions `logprobs: N`, chat `logprobs: true` and
  // `top_logprobs: N`, native `n_probs: N` (N alternatives per token).
  bool logprobs = false;
  int32_t top_logprobs = 0;
  int32_t n = 1;  // choices (OpenAI routes), each its own sequence
};

// Limits of the request fields (400 beyond): OpenAI's 20 alternatives per token; the
// native n_probs up to 100; at most 16 choices per request.
constexpr int32_t kMaxTopLogprobs = 20;
constexpr int32_t kMaxNProbs = 100;
constexpr int32_t kMaxChoices = 16;

// The request's fields this server accepts but does not implement (llama-server's
// mirostat, tfs_z, dry_*, xtc_* ... when they would change llama-server's output, and
// any other field it does not know), sorted: they are named in the log and in the
// X-Treespec-Ignored-Fields header, never dropped silently.
std::vector<std::string> ignored_fields(const nlohmann::json& body, Endpoint ep);

// `defaults` are the server's sampling defaults (from the command line). `jinja_chat`:
// chats are rendered with a Jinja template, which also takes `tools`, `tool_choice`
// "auto" / "none", tool messages and assistant `tool_calls` (the built-in formatters
// take none of them: 400 / 501 as before).
GenerationRequest parse_generation_request(const nlohmann::json& body, Endpoint ep,
                                           const sampling::SamplingParams& defaults, bool jinja_chat = false);

// The grammar a request's output must follow (null when none): `grammar` (GBNF),
// `json_schema` or `response_format` json_object / json_schema, at most one; 400 naming
// the field for a bad grammar or schema. `body` as sent (a schema's key order matters).
std::shared_ptr<const grammar::Grammar> parse_request_grammar(const nlohmann::ordered_json& body);

// POST /v1/embeddings: `input` is a string, an array of strings, an array of token ids,
// or an array of such arrays (OpenAI); `encoding_format` "float" (default) or "base64"
// (little-endian float32 bytes, what the official OpenAI clients ask for).
struct EmbeddingInput {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};
struct EmbeddingRequest {
  std::string model;
  std::vector<EmbeddingInput> inputs;
  bool base64 = false;
};
EmbeddingRequest parse_embedding_request(const nlohmann::json& body);

struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& body);
// Token ids in [0, n_vocab); 400 naming the index otherwise.
std::vector<int32_t> parse_detokenize_request(const nlohmann::json& body, int32_t n_vocab);

// "cmpl-..." / "chatcmpl-..." ids: unique per process.
std::string make_request_id(Endpoint ep);

}  // namespace treespec::server
