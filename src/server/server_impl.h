// Server internals shared by server.cpp (lifecycle, routing, small endpoints) and
// generate.cpp (completions and chat, plain and streamed). Not a public header.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "chat/formatter.h"
#include "engine/embedding.h"
#include "grammar/token_mask.h"
#include "model/model.h"
#include "server/access.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace treespec::server {

// The model id the API reports: --alias, else the model file's name without .gguf.
std::string served_model_id(const ServerConfig& cfg);

struct Server::Impl {
  Impl(Server& owner, ServerConfig cfg)
      : owner(owner), cfg(std::move(cfg)), metrics(this->cfg.metrics_prefix, served_model_id(this->cfg)) {}

  Server& owner;
  ServerConfig cfg;
  httplib::Server http;
  std::thread listen_thread;
  std::thread load_thread;
  Metrics metrics;
  std::string model_id;
  int64_t created = 0;                // unix time the server started
  std::vector<std::string> api_keys;  // --api-key and --api-key-file's; empty = no authentication
  CorsPolicy cors;

  // Set by the load thread before state becomes ready; read-only afterwards.
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const grammar::TokenMask> token_mask;  // tok's vocabulary, for requests with a grammar
  std::unique_ptr<Scheduler> scheduler;
  // Renders /v1/chat/completions prompts (the template choice: chat/formatter.h).
  std::unique_ptr<chat::Formatter> formatter;
  int32_t n_ctx = 0;       // per request (max_model_len resolved)
  int32_t n_kv_cells = 0;  // the shared pool (-c resolved)

  mutable std::mutex mu;
  std::string failure;
  std::atomic<bool> stopping{false};
  std::atomic<int> inflight{0};  // generation requests whose response is not finished
  std::once_flag shutdown_once;

  // Throws ApiError 503 unless the model is loaded and we are not shutting down.
  void require_ready() const;
  // Throws ApiError 404 model_not_found unless `name` is empty or names the served model
  // (its id, the -m path or its file name).
  void require_model(const std::string& name) const;

  // Registers every route and the hooks around them (setup_routes calls the other three).
  void setup_routes();
  // Authentication and CORS preflights, JSON bodies for httplib's errors, CORS headers,
  // the exception handler and the access logger.
  void install_http_hooks();
  // GET: the chat page, /health, /v1/models, /props, /metrics, /slots.
  void add_status_routes();
  // POST: completions, chat, embeddings, tokenize, detokenize.
  void add_api_routes();
  nlohmann::json model_json() const;  // the served model's /v1/models entry
  nlohmann::json props_json() const;  // /props (requires a loaded model)
  nlohmann::json slots_json() const;  // /slots (requires a loaded model)
  // OPTIONS (a CORS preflight): 204 with the allowed methods and headers, 403 for an
  // origin --cors-origins does not allow.
  void answer_preflight(const httplib::Request& req, httplib::Response& res) const;
  void load();
  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint ep);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res) const;
  void handle_detokenize(const httplib::Request& req, httplib::Response& res) const;
  void handle_embeddings(const httplib::Request& req, httplib::Response& res);

  // /v1/embeddings runs one request at a time on its own forward context (the Model is
  // immutable; the scheduler's engine is not touched), created on first use.
  std::mutex embed_mu;
  std::unique_ptr<model::ForwardContext> embed_ctx;
  engine::Pooling pooling = engine::Pooling::mean;  // --pooling, parsed at start
};

// Counts a generation request as in flight for its lifetime (shutdown waits for them).
struct InflightGuard {
  explicit InflightGuard(std::atomic<int>& n) : n_(n) { n_.fetch_add(1); }
  ~InflightGuard() { n_.fetch_sub(1); }
  InflightGuard(const InflightGuard&) = delete;
  InflightGuard& operator=(const InflightGuard&) = delete;

 private:
  std::atomic<int>& n_;
};

// JSON text that never throws (invalid UTF-8 from byte tokens becomes U+FFFD).
std::string dump_json(const nlohmann::json& j);
void send_json(httplib::Response& res, int status, const nlohmann::json& j);
void send_error(httplib::Response& res, const ApiError& e);

}  // namespace treespec::server
