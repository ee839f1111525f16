#include "server/server.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/log.h"
#include "core/memory.h"
#include "core/timer.h"
#include "engine/grammar_step.h"
#include "gguf/gguf.h"
#include "server/connection.h"
#include "server/server_impl.h"
#include "server/web/page.h"
#include "tokenizer/utf8.h"
#include "treespec/status.h"

namespace treespec::server {

namespace {
constexpr int kListenBacklog = 1024;  // the kernel caps it at net.core.somaxconn
}  // namespace

using nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump_json(j), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.body()); }

namespace {

// Bounded label set for per-route metrics.
std::string route_label(const std::string& path) {
  static const char* known[] = {"/",
                                "/health",
                                "/v1/models",
                                "/models",
                                "/metrics",
                                "/v1/completions",
                                "/completions",
                                "/v1/chat/completions",
                                "/chat/completions",
                                "/tokenize",
                                "/detokenize",
                                "/props",
                                "/completion",
                                "/slots",
                                "/v1/embeddings",
                                "/embeddings"};
  for (const char* k : known) {
    if (path == k) return k;
  }
  return "other";
}

// The chat page is public (it holds no data; its requests carry the key the user enters).
bool is_public_route(const std::string& path) {
  return path == "/" || path == "/health" || path == "/v1/models" || path == "/models";
}

// Runs a handler, turning every exception into an OpenAI-style error body.
template <typename F>
void guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const InvalidArgument& e) {
    send_error(res, invalid_request(e.what()));
  } catch (const std::exception& e) {
    TS_LOG_ERROR("internal error: {}", e.what());
    send_error(res, ApiError(500, "server_error", fmt::format("internal error: {}", e.what())));
  }
}

}  // namespace

Server::Server(ServerConfig cfg) : impl_(std::make_unique<Impl>(*this, std::move(cfg))) {}

Server::~Server() { shutdown(); }

std::string Server::failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

void Server::Impl::require_ready() const {
  if (stopping.load()) throw unavailable("the server is shutting down");
  switch (owner.state()) {
    case State::ready: return;
    case State::failed: throw ApiError(500, "server_error", "the model failed to load");
    default: throw unavailable("Loading model");
  }
}

void Server::Impl::require_model(const std::string& name) const {
  if (name.empty() || name == model_id || name == cfg.model_path) return;
  if (name == std::filesystem::path(cfg.model_path).filename().string()) return;
  throw ApiError(404, "invalid_request_error",
                 fmt::format("The model '{}' does not exist: this server serves '{}'", name, model_id),
                 "model_not_found", "model");
}

void Server::Impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) const {
  require_ready();
  const TokenizeRequest t = parse_tokenize_request(parse_body(req.body));
  const std::vector<int32_t> ids = tok->encode(t.content, t.add_special, true);
  json out = json::array();
  for (int32_t id : ids) {
    if (!t.with_pieces) {
      out.push_back(id);
      continue;
    }
    const std::string piece = tok->token_to_piece(id, true);
    json p = json::object();
    p["id"] = id;
    if (tokenizer::utf8::is_valid(piece)) {
      p["piece"] = piece;
    } else {  // a lone byte of a multi-byte character: give the bytes (as llama-server)
      json bytes = json::array();
      for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
      p["piece"] = bytes;
    }
    out.push_back(p);
  }
  send_json(res, 200, json{{"tokens", out}});
}

void Server::Impl::handle_detokenize(const httplib::Request& req, httplib::Response& res) const {
  require_ready();
  const std::vector<int32_t> ids = parse_detokenize_request(parse_body(req.body), tok->n_vocab());
  send_json(res, 200, json{{"content", tok->decode(ids)}});
}

std::string served_model_id(const ServerConfig& cfg) {
  return !cfg.alias.empty() ? cfg.alias : std::filesystem::path(cfg.model_path).stem().string();
}

void Server::Impl::answer_preflight(const httplib::Request& req, httplib::Response& res) const {
  const std::string origin = req.get_header_value("Origin");
  if (cors.allow_origin(origin).empty()) {
    send_error(res, ApiError(403, "invalid_request_error",
                             cors.enabled() ? fmt::format("origin '{}' is not allowed (--cors-origins)", origin)
                                            : std::string("cross-origin requests are off (--cors-origins none)")));
    return;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
  res.set_header("Access-Control-Max-Age", "600");
}

void Server::Impl::setup_routes() {
  install_http_hooks();
  add_status_routes();
  add_api_routes();
}

void Server::Impl::install_http_hooks() {
  // Preflights first: browsers send them without the API key.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "OPTIONS") {
      answer_preflight(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (api_keys.empty() || is_public_route(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (bearer_key_matches(api_keys, auth)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "authentication_error",
                             auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key"));
    return httplib::Server::HandlerResponse::Handled;
  });

  // httplib's own errors (unknown route, body too large, malformed HTTP) get JSON bodies.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
        if (res.status == 404) {
          send_error(res, ApiError(404, "not_found_error", fmt::format("no route for {} {}", req.method, req.path)));
        } else if (res.status == 413) {
          send_error(res, ApiError(413, "invalid_request_error",
                                   fmt::format("request body is larger than the limit of {} bytes (--max-body)",
                                               cfg.max_body_bytes)));
        } else if (res.status == 400) {
          // httplib could not read the request: malformed HTTP, or the body did not arrive
          // within --timeout (a slow or stalled client). Do not keep such a connection.
          // (The logger below then ends the connection.)
          res.set_header("Connection", "close");
          send_error(res, invalid_request(
                              fmt::format("malformed HTTP request, or its body did not arrive within {} s (--timeout)",
                                          cfg.timeout_s)));
        } else {
          send_error(res, ApiError(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                                   fmt::format("HTTP error {}", res.status)));
        }
        return httplib::Server::HandlerResponse::Handled;
      }));

  // CORS on every response (errors and streams included).
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string allow = cors.allow_origin(req.get_header_value("Origin"));
    if (allow.empty() || res.has_header("Access-Control-Allow-Origin")) return;
    res.set_header("Access-Control-Allow-Origin", allow);
    if (!cors.any()) res.set_header("Vary", "Origin");
  });

  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, const std::exception_ptr& ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    TS_LOG_ERROR("internal error: {}", what);
    send_error(res, ApiError(500, "server_error", fmt::format("internal error: {}", what)));
  });

  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.on_http_response(route_label(req.path), res.status);
    if (res.get_header_value("Connection") == "close") {
      // httplib 0.11 would still wait keep-alive seconds for another request on this
      // connection; ending the read side (after the response was written: the logger
      // runs then) makes its next read see EOF, so it closes now.
      if (const int fd = find_connection_fd(req.remote_addr, req.remote_port, req.local_port); fd >= 0) {
        ::shutdown(fd, SHUT_RD);
      }
    }
    TS_LOG_DEBUG("{} {} -> {}", req.method, req.path, res.status);
  });
}

json Server::Impl::model_json() const {
  json m;
  m["id"] = model_id;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "treespec";
  if (owner.state() == State::ready) {
    m["meta"] = {{"n_ctx", n_ctx},
                 {"n_kv_cells", n_kv_cells},
                 {"cache_type_k", kv::cache_type_name(cfg.type_k)},
                 {"cache_type_v", kv::cache_type_name(cfg.type_v)},
                 {"n_vocab", model->hparams().n_vocab},
                 {"n_slots", cfg.n_slots},
                 {"spec", cfg.spec.method},
                 {"chat_template", chat::chat_family_name(formatter->family())},
                 {"chat_template_engine", formatter->engine_name()}};
  }
  return m;
}

// llama-server's /props (the part that exists here; docs/server.md), with the KV pool's
// fixed sizes (its usage changes every step: /metrics has it).
json Server::Impl::props_json() const {
  require_ready();
  const kv::KvCache& kvc = scheduler->kv();
  json gen = {{"n_ctx", n_ctx},
              {"speculative", cfg.spec.method},
              {"params",
               {{"temperature", cfg.sampling.temp},
                {"top_k", cfg.sampling.top_k},
                {"top_p", cfg.sampling.top_p},
                {"min_p", cfg.sampling.min_p},
                {"typical_p", cfg.sampling.typical_p},
                {"seed", cfg.default_seed}}}};
  return json{{"default_generation_settings", gen},
              {"total_slots", cfg.n_slots},
              {"speculative_methods", scheduler->request_methods()},
              {"model_path", cfg.model_path},
              {"chat_template", formatter->source()},
              {"bos_token", formatter->bos_text()},
              {"eos_token", formatter->eos_text()},
              {"kv_cache",
               {{"n_cells", kvc.n_pool_cells()},
                {"n_blocks", kvc.n_blocks()},
                {"block_cells", kv::kBlockCells},
                {"max_cells_per_request", n_ctx},
                {"type_k", kv::cache_type_name(cfg.type_k)},
                {"type_v", kv::cache_type_name(cfg.type_v)},
                {"bytes", kvc.bytes()},
                {"prefix_cache", cfg.prefix_cache}}}};
}

json Server::Impl::slots_json() const {
  require_ready();
  json out = json::array();
  for (const SlotInfo& s : scheduler->slots()) {
    out.push_back({{"id", s.id},
                   {"is_processing", s.is_processing},
                   {"id_task", s.id_task.empty() ? json(nullptr) : json(s.id_task)},
                   {"n_ctx", n_ctx},
                   {"speculative", s.is_processing ? s.spec : cfg.spec.method},
                   {"n_prompt_tokens", s.n_prompt_tokens},
                   {"n_prompt_tokens_cached", s.n_prompt_tokens_cached},
                   {"n_decoded", s.n_decoded}});
  }
  return out;
}

void Server::Impl::add_status_routes() {
  // The chat page (src/server/web/chat.html). Its script and style are inline and it loads
  // nothing else: the policy forbids any other origin.
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                   "form-action 'none'; base-uri 'none'; frame-ancestors 'none'");
    res.set_header("Cache-Control", "no-cache");
    const std::string_view page = chat_page_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    switch (owner.state()) {
      case State::ready:
        if (!stopping.load()) {
          send_json(res, 200, json{{"status", "ok"}});
          return;
        }
        send_error(res, unavailable("the server is shutting down"));
        return;
      case State::failed: send_error(res, ApiError(500, "server_error", "the model failed to load")); return;
      default: send_error(res, unavailable("Loading model")); return;
    }
  });

  auto models = [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, json{{"object", "list"}, {"data", json::array({model_json()})}});
  };
  http.Get("/v1/models", models);
  http.Get("/models", models);

  http.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    try {
      send_json(res, 200, props_json());
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });

  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });

  http.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    try {
      send_json(res, 200, slots_json());
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
}

void Server::Impl::add_api_routes() {
  auto completions = [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_generation(req, res, Endpoint::completions); });
  };
  auto chat = [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_generation(req, res, Endpoint::chat); });
  };
  http.Post("/completion", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_generation(req, res, Endpoint::native); });
  });
  auto embeddings = [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_embeddings(req, res); });
  };
  http.Post("/v1/embeddings", embeddings);
  http.Post("/embeddings", embeddings);
  http.Post("/v1/completions", completions);
  http.Post("/completions", completions);
  http.Post("/v1/chat/completions", chat);
  http.Post("/chat/completions", chat);
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_tokenize(req, res); });
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_detokenize(req, res); });
  });
}

void Server::Impl::load() {
  try {
    const double t0 = core::now_s();
    if (cfg.load_delay_s > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(cfg.load_delay_s));
    auto m = model::Model::load(cfg.model_path);
    auto t = tokenizer::Tokenizer::from_gguf(m->gguf());
    const auto& hp = m->hparams();
    if (t->n_vocab() != hp.n_vocab) {
      throw FormatError(fmt::format("{}: tokenizer has {} tokens but the model's vocabulary is {}", cfg.model_path,
                                    t->n_vocab(), hp.n_vocab));
    }
    for (const sampling::LogitBias& b : cfg.sampling.logit_bias) {
      if (b.token >= hp.n_vocab) {
        throw InvalidArgument(
            fmt::format("-l/--logit-bias: token id {} is outside the vocabulary (0..{})", b.token, hp.n_vocab - 1));
      }
    }
    // -c is the pool; a request may use all of it unless --max-model-len says less (a
    // per-request size beyond the training context logs resolve_context_size's warning).
    n_kv_cells = cfg.n_ctx > 0 ? cfg.n_ctx : engine::resolve_context_size(0, hp.n_ctx_train);
    if (cfg.max_model_len > n_kv_cells) {
      throw InvalidArgument(fmt::format("--max-model-len {} is larger than the KV cache pool (-c/--ctx-size {})",
                                        cfg.max_model_len, n_kv_cells));
    }
    n_ctx = engine::resolve_context_size(cfg.max_model_len > 0 ? cfg.max_model_len : n_kv_cells, hp.n_ctx_train);
    chat::FormatterConfig fc;
    fc.template_file = cfg.chat_template_file;
    fc.family = cfg.chat_template;
    formatter = std::make_unique<chat::Formatter>(m->gguf(), *t, fc, cfg.model_path);

    SchedulerConfig sc;
    sc.engine.n_threads = cfg.n_threads;
    sc.engine.n_ctx = n_ctx;
    sc.engine.n_slots = cfg.n_slots;
    sc.engine.n_batch = cfg.n_batch;
    sc.engine.n_kv_cells = n_kv_cells;
    sc.engine.type_k = cfg.type_k;
    sc.engine.type_v = cfg.type_v;
    sc.engine.prefix_cache = cfg.prefix_cache;
    sc.spec = cfg.spec;
    sc.max_queue = cfg.max_queue;
    sc.step_budget = cfg.step_budget;
    model = std::move(m);
    tok = std::move(t);
    token_mask = engine::make_token_mask(*tok);
    scheduler = std::make_unique<Scheduler>(*model, *tok, sc, metrics);
    const kv::KvShape kvs = engine::engine_kv_shape(*model, sc.engine);
    TS_LOG_INFO("{}: {} reserved", kv::KvCache::describe(kvs), core::format_bytes(kv::KvCache::required_bytes(kvs)));
    owner.state_.store(State::ready);
    metrics.set_ready(true);
    TS_LOG_INFO(
        "model {} loaded in {:.2f} s: {} slots sharing {} KV cells, at most {} per request, spec {}, step budget {}, "
        "chat template {} ({}); ready",
        model_id, core::now_s() - t0, cfg.n_slots, n_kv_cells, n_ctx, cfg.spec.method, cfg.step_budget,
        formatter->jinja() ? "jinja" : chat::chat_family_name(formatter->family()),
        chat::chat_family_name(formatter->family()));
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      failure = e.what();
    }
    owner.state_.store(State::failed);
    // Not logged as an error here: the owner reports failure() once (treespec serve
    // prints it as its error line).
    TS_LOG_DEBUG("cannot load model: {}", e.what());
  }
}

void Server::start() {
  Impl& im = *impl_;
  ServerConfig& c = im.cfg;
  if (state_.load() != State::created) throw InvalidArgument("Server::start called twice");
  // Everything that can be checked without the model fails here, before listening.
  if (c.n_slots < 1 || c.n_slots > 1024)
    throw InvalidArgument(fmt::format("-np/--parallel must be in 1..1024, got {}", c.n_slots));
  if (c.n_ctx < 0) throw InvalidArgument(fmt::format("-c/--ctx-size must be >= 0, got {}", c.n_ctx));
  if (c.n_ctx > (1 << 20)) throw InvalidArgument(fmt::format("-c/--ctx-size {} is larger than 1048576", c.n_ctx));
  if (c.max_model_len < 0)
    throw InvalidArgument(fmt::format("--max-model-len must be >= 0 (0 = the pool's size), got {}", c.max_model_len));
  if (c.n_ctx > 0 && c.max_model_len > c.n_ctx) {
    throw InvalidArgument(fmt::format("--max-model-len {} is larger than the KV cache pool (-c/--ctx-size {})",
                                      c.max_model_len, c.n_ctx));
  }
  if (c.max_queue < 0) throw InvalidArgument(fmt::format("--max-queue must be >= 0, got {}", c.max_queue));
  if (c.step_budget < 0)
    throw InvalidArgument(fmt::format("--step-budget must be >= 0 (0 = no cap), got {}", c.step_budget));
  if (c.timeout_s < 1) throw InvalidArgument(fmt::format("--timeout must be >= 1 second, got {}", c.timeout_s));
  if (c.max_body_bytes < 1024)
    throw InvalidArgument(fmt::format("--max-body must be >= 1024 bytes, got {}", c.max_body_bytes));
  if (c.port < 0 || c.port > 65535) throw InvalidArgument(fmt::format("--port must be in 0..65535, got {}", c.port));
  if (c.http_threads < 0) throw InvalidArgument(fmt::format("--http-threads must be >= 0, got {}", c.http_threads));
  if (!c.chat_template.empty()) (void)chat::chat_family_from_name(c.chat_template);
  if (!c.chat_template.empty() && !c.chat_template_file.empty())
    throw InvalidArgument("--chat-template and --chat-template-file exclude each other");
  if (!c.chat_template_file.empty() && !std::ifstream(c.chat_template_file, std::ios::binary))
    throw IoError(fmt::format("cannot open chat template file '{}'", c.chat_template_file));
  {
    const auto methods = drafters::spec_methods();
    if (std::find(methods.begin(), methods.end(), c.spec.method) == methods.end()) {
      throw InvalidArgument(
          fmt::format("unknown speculative method '{}' (known: {})", c.spec.method, fmt::join(methods, ", ")));
    }
  }
  if (!std::ifstream(c.model_path, std::ios::binary))
    throw IoError(fmt::format("cannot open model file '{}'", c.model_path));
  c.sampling.validate();

  if (!c.api_key.empty()) im.api_keys.push_back(c.api_key);
  if (!c.api_key_file.empty()) {
    for (std::string& k : read_api_key_file(c.api_key_file)) im.api_keys.push_back(std::move(k));
  }
  im.cors = CorsPolicy::parse(c.cors_origins);
  im.pooling = engine::parse_pooling(c.pooling);
  {
    const std::string& p = c.metrics_prefix;
    const bool ok = !p.empty() && (std::isalpha(static_cast<unsigned char>(p[0])) || p[0] == '_') &&
                    std::all_of(p.begin(), p.end(),
                                [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
    if (!ok)
      throw InvalidArgument(fmt::format("--metrics-prefix '{}' is not a Prometheus name ([A-Za-z_][A-Za-z0-9_]*)", p));
  }
  im.model_id = served_model_id(c);
  im.created = static_cast<int64_t>(std::time(nullptr));
  const int n_http = c.http_threads > 0 ? c.http_threads : std::min(c.n_slots + c.max_queue + 8, 1024);
  im.http.new_task_queue = [n_http] { return new httplib::ThreadPool(static_cast<size_t>(n_http)); };
  im.http.set_payload_max_length(c.max_body_bytes);
  im.http.set_read_timeout(c.timeout_s, 0);
  im.http.set_write_timeout(c.timeout_s, 0);
  im.setup_routes();

  // cpp-httplib's default sets SO_REUSEPORT, with which a second server binds a port that
  // is in use and the kernel splits the connections between the two. SO_REUSEADDR only:
  // a restart may rebind a port in TIME_WAIT, a port with a listener is refused.
  // The listening socket's fd is kept so its backlog can be raised after the bind (below).
  auto listen_fd = std::make_shared<socket_t>(-1);
  im.http.set_socket_options([listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listen_fd = sock;
  });
  errno = 0;
  if (c.port == 0) {
    port_ = im.http.bind_to_any_port(c.host);
    if (port_ <= 0) throw IoError(fmt::format("cannot listen on {} (any port): {}", c.host, std::strerror(errno)));
  } else {
    if (!im.http.bind_to_port(c.host, c.port)) {
      if (errno == EADDRINUSE)
        throw IoError(fmt::format("cannot listen on {}:{}: port {} is already in use", c.host, c.port, c.port));
      throw IoError(fmt::format("cannot listen on {}:{} ({})", c.host, c.port,
                                errno != 0 ? std::strerror(errno) : "not a local address?"));
    }
    port_ = c.port;
  }
  // Debian's cpp-httplib (a compiled library) listens with a backlog of 5: a burst of
  // clients overflows the accept queue and connections fail before a worker sees them
  // (the load test's 100 streaming clients). listen() again on the bound socket raises it.
  if (*listen_fd >= 0) ::listen(*listen_fd, kListenBacklog);
  state_.store(State::loading);
  im.listen_thread = std::thread([&im] { im.http.listen_after_bind(); });
  TS_LOG_INFO("listening on http://{}:{} ({} HTTP threads); loading {}", c.host, port_, n_http, c.model_path);
  im.load_thread = std::thread([&im] { im.load(); });
}

void Server::shutdown() {
  Impl& im = *impl_;
  std::call_once(im.shutdown_once, [&] {
    if (state_.load() == State::created) return;
    im.stopping.store(true);
    if (im.load_thread.joinable()) im.load_thread.join();  // a model load cannot be interrupted
    if (im.scheduler) im.scheduler->shutdown(im.cfg.shutdown_grace_s);
    // Let handlers write what the scheduler finished (streams end with [DONE]).
    const double deadline = core::now_s() + 5.0;
    while (im.inflight.load() > 0 && core::now_s() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    im.http.stop();
    if (im.listen_thread.joinable()) im.listen_thread.join();
    im.scheduler.reset();
    state_.store(State::stopped);
    TS_LOG_INFO("server stopped");
  });
}

}  // namespace treespec::server
