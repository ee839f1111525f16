// Server: the OpenAI-compatible HTTP front end of `treespec serve`.
//
// start() binds the port and starts listening first, then loads the model on a
// background thread: /health answers 503 ("Loading model") until the scheduler is up,
// then 200. Generation requests are validated and tokenized on the HTTP thread, queued
// on the Scheduler, and answered as one JSON body or as Server-Sent Events. Every error
// is an OpenAI-style JSON body; no request can crash the process. shutdown() drains or
// cancels in-flight requests and stops the listener. See docs/server.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "drafters/factory.h"
#include "sampling/sampling.h"
#include "tensor/dtype.h"
#include "verify/verify.h"

namespace httplib {
class Server;
}

namespace treespec::server {

struct ServerConfig {
  std::string model_path;
  std::string alias;  // model id in the API; default: file name without .gguf
  std::string host = "127.0.0.1";
  int port = 8080;            // 0 = any free port (see Server::port())
  int32_t n_slots = 1;        // -np
  int32_t n_ctx = 0;          // -c: cells of the KV pool all slots share; 0 = model's training context, at most 4096
  int32_t max_model_len = 0;  // cells one request may use (prompt + output); 0 = the pool's (docs/kv.md)
  tensor::DType type_k = tensor::DType::f16;  // -ctk
  tensor::DType type_v = tensor::DType::f16;  // -ctv
  bool prefix_cache = true;                   // reuse the KV of prompt prefixes other requests computed
  int32_t n_threads = 1;
  int32_t n_batch = 512;
  int32_t max_queue = 64;                   // waiting requests allowed beyond free slots
  int32_t step_budget = 64;                 // tree nodes per decode step across slots; 0 = no cap
  std::string api_key;                      // empty = no authentication (unless api_key_file)
  std::string api_key_file;                 // more keys, one per line (server/access.h)
  std::string cors_origins = "*";           // CORS: "*", "none" or a comma-separated list of origins
  std::string metrics_prefix = "treespec";  // /metrics series namespace ("vllm": vLLM's own names)
  std::string pooling = "mean";             // /v1/embeddings: mean | cls | last (engine/embedding.h)
  size_t max_body_bytes = 4u << 20;
  int timeout_s = 60;              // socket read/write timeout (slow clients)
  int http_threads = 0;            // 0 = n_slots + max_queue + 8
  double shutdown_grace_s = 5.0;   // how long shutdown() lets requests finish
  std::string chat_template;       // built-in family name override; empty = from the GGUF
  std::string chat_template_file;  // Jinja chat template file overriding the GGUF's
  double load_delay_s = 0.0;       // testing only: pause before loading (to observe /health 503)
  drafters::SpecConfig spec;
  sampling::SamplingParams sampling;  // request defaults (its seed is ignored; see default_seed)
  int64_t default_seed = -1;          // seed for requests without one; -1 = random per request
  verify::Mode verify = verify::Mode::coupled;
  verify::TypicalParams typical;
};

class Server {
 public:
  enum class State { created, loading, ready, failed, stopped };

  explicit Server(ServerConfig cfg);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Validates the configuration, binds host:port (IoError when it cannot), starts the
  // listener and the background model load. Returns once the port is listening.
  void start();
  // The bound port (useful with port 0).
  int port() const { return port_; }
  State state() const { return state_.load(); }
  std::string failure() const;  // why loading failed (state() == failed)

  // Stops accepting generation requests (503), lets in-flight ones finish for up to
  // shutdown_grace_s, cancels the rest, stops the listener. Idempotent.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<State> state_{State::created};
  int port_ = 0;
};

}  // namespace treespec::server
