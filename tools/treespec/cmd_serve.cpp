// treespec serve -m MODEL.gguf [--spec METHOD ...] [--host 127.0.0.1] [--port 8080] [-np N]
//                [-c CTX] [--api-key KEY] [--max-queue N] [--step-budget N] ...
// OpenAI-compatible HTTP server with continuous batching and speculation in every slot.
// Thin: options -> server::ServerConfig; the server lives in src/server. SIGINT/SIGTERM
// drain or cancel in-flight requests and exit 0; a model that fails to load exits 1.
#include <signal.h>

#include <cerrno>
#include <ctime>

#include "cli/options.h"
#include "command.h"
#include "core/log.h"
#include "server/server.h"
#include "treespec/status.h"

namespace {

using namespace treespec;

struct ServeArgs {
  cli::ModelOptions model;
  cli::SamplingOptions sampling;
  drafters::SpecConfig spec;
  server::ServerConfig server;
  size_t max_body_kib = 4096;
  bool verbose = false;
  bool quiet = false;
};

int serve(ServeArgs& a) {
  core::set_log_level(a.verbose ? core::LogLevel::debug : a.quiet ? core::LogLevel::warn : core::LogLevel::info);
  server::ServerConfig c = a.server;
  c.model_path = a.model.model;
  c.n_threads = cli::resolve_threads(a.model.n_threads);
  c.n_ctx = a.model.n_ctx;
  c.n_batch = a.model.n_batch;
  c.type_k = kv::parse_cache_type(a.model.cache_type_k, "-ctk/--cache-type-k");
  c.type_v = kv::parse_cache_type(a.model.cache_type_v, "-ctv/--cache-type-v");
  c.spec = a.spec;
  c.sampling = a.sampling.params;
  for (const std::string& item : a.sampling.logit_bias)
    c.sampling.logit_bias.push_back(cli::parse_logit_bias_flag(item));
  if (a.sampling.seed < -1)
    throw InvalidArgument(fmt::format("--seed must be >= 0 or -1 (random), got {}", a.sampling.seed));
  c.default_seed = a.sampling.seed;
  c.verify = cli::resolve_verify(a.sampling);
  c.typical = a.sampling.typical;
  c.max_body_bytes = a.max_body_kib * 1024;

  // Signals are taken synchronously by this thread (sigtimedwait), so every thread the
  // server starts must inherit them blocked. A client that disconnects mid-write must
  // not kill the process: SIGPIPE is ignored (writes then fail with EPIPE).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::Server srv(c);
  srv.start();
  // The log line with the port is an info line; a chosen port is printed even with -q.
  if (a.quiet && a.server.port == 0)
    std::fprintf(stderr, "treespec: listening on http://%s:%d\n", c.host.c_str(), srv.port());
  int rc = 0;
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      TS_LOG_INFO("received {}, shutting down (grace {:.1f} s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
                  c.shutdown_grace_s);
      break;
    }
    if (srv.state() == server::Server::State::failed) {
      std::fprintf(stderr, "treespec: error: %s\n", srv.failure().c_str());
      rc = 1;
      break;
    }
  }
  srv.shutdown();
  return rc;
}

std::function<int()> setup_serve(CLI::App& sub) {
  auto a = std::make_shared<ServeArgs>();
  cli::add_model_options(sub, a->model);
  server::ServerConfig& s = a->server;
  sub.add_option("--host", s.host, "address to listen on (loopback by default)")->capture_default_str();
  sub.add_option("--port", s.port, "port to listen on (0 = any free port, printed in the log)")->capture_default_str();
  sub.add_option("--max-model-len", s.max_model_len,
                 "most tokens one request may use, prompt + output (0 = all of -c, which is the KV pool every slot "
                 "shares)")
      ->capture_default_str();
  sub.add_flag("!--no-prefix-cache", s.prefix_cache,
               "do not reuse the KV cache of prompt prefixes other requests computed (on by default: a shared system "
               "prompt or a conversation's earlier turns are computed once)");
  sub.add_option("--parallel", s.n_slots, "sequence slots decoded together, continuous batching (-np works too)")
      ->capture_default_str();
  sub.add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' (not for /health and /v1/models)");
  sub.add_option("--api-key-file", s.api_key_file, "more API keys, one per line ('#' comments), besides --api-key");
  sub.add_option("--cors-origins", s.cors_origins,
                 "origins browsers may call from: '*' (any), 'none', or a comma-separated list such as "
                 "http://localhost:3000")
      ->capture_default_str();
  sub.add_option("--pooling", s.pooling, "/v1/embeddings: how token hidden states become one vector: mean | cls | last")
      ->capture_default_str();
  sub.add_option("--metrics-prefix", s.metrics_prefix,
                 "namespace of the /metrics series: treespec (default) or vllm, for vLLM's dashboards unchanged")
      ->capture_default_str();
  sub.add_option("-a,--alias", s.alias, "model id in the API (default: the file name without .gguf)");
  sub.add_option("--max-queue", s.max_queue, "requests allowed to wait for a slot; more get 503")
      ->capture_default_str();
  sub.add_option("--step-budget", s.step_budget, "tree nodes per decode step shared by all slots (0 = no cap)")
      ->capture_default_str();
  sub.add_option("--max-body", a->max_body_kib, "largest request body in KiB (larger: 413)")->capture_default_str();
  sub.add_option("--timeout", s.timeout_s, "socket read/write timeout in seconds (slow clients)")
      ->capture_default_str();
  sub.add_option("--http-threads", s.http_threads, "HTTP worker threads (0 = slots + max-queue + 8)")
      ->capture_default_str();
  sub.add_option("--shutdown-grace", s.shutdown_grace_s, "seconds in-flight requests may finish after SIGTERM")
      ->capture_default_str();
  cli::add_chat_template_options(sub, s.chat_template, s.chat_template_file);
  sub.add_option("--test-load-delay", s.load_delay_s, "testing: seconds to wait before loading the model")->group("");
  cli::add_sampling_options(sub, a->sampling);
  cli::add_spec_options(sub, a->spec);
  sub.add_flag("-v,--verbose", a->verbose, "log every HTTP request");
  sub.add_flag("-q,--quiet", a->quiet, "log warnings and errors only");
  return [a, &sub] {
    cli::resolve_spec_method(sub, a->spec);
    return serve(*a);
  };
}

}  // namespace

TREESPEC_COMMAND("serve", "OpenAI-compatible HTTP server with continuous batching and speculative decoding",
                 setup_serve);
