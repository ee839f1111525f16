// Server metrics in the Prometheus text exposition format (version 0.0.4).
//
// Names mirror vLLM's (`vllm:` -> `treespec:`), so dashboards built for vLLM work
// unchanged; counters are exposed with the `_total` suffix exactly as vLLM's
// prometheus_client exposes them (e.g. treespec:spec_decode_num_drafts_total). Full list
// in docs/server.md. Thread-safe: HTTP threads and the scheduler update it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/stats.h"

namespace treespec::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines.
  void render(std::string& out, const std::string& name) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (non-cumulative), last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  // Every HTTP response (path is normalised to a known route or "other").
  void on_http_response(const std::string& path, int status);
  // One finished generation request.
  void on_request_done(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                       double ttft_s, double e2e_s, double queue_s);
  // Scheduler state after each step.
  void set_engine_state(const engine::SpecStats& totals, int32_t n_running, int32_t n_waiting, int32_t n_slots);
  void set_waiting(int32_t n_waiting);
  // The KV pool after each step: fraction of blocks in use, preemptions so far.
  void set_kv_state(double usage, int64_t n_preemptions);
  void set_ready(bool ready);

  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;      // (path, status) -> count
  std::map<std::string, uint64_t> success_;                   // finish reason -> count
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  Histogram ttft_;
  Histogram e2e_;
  Histogram queue_;
  engine::SpecStats totals_;
  int32_t running_ = 0;
  int32_t waiting_ = 0;
  int32_t slots_ = 0;
  double kv_usage_ = 0.0;
  int64_t preemptions_ = 0;
  bool ready_ = false;
};

}  // namespace treespec::server
