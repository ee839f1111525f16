// Server metrics in the Prometheus text exposition format (version 0.0.4).
//
// Names are vLLM's with the prefix `treespec:` (or `vllm:` with serve --metrics-prefix
// vllm, so dashboards built for vLLM work unchanged), every series labelled with
// model_name as vLLM's are (when a model name is set), histograms with vLLM's buckets;
// counters are exposed with the `_total` suffix exactly as vLLM's prometheus_client
// exposes them (e.g. treespec:spec_decode_num_drafts_total). Full list in
// docs/server.md. Thread-safe: HTTP threads and the scheduler update it.
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
  // Appends `name_bucket{labels,le=...}`, `name_sum{labels}`, `name_count{labels}` lines
  // (`labels`: `k="v",...` or empty).
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (non-cumulative), last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// One finished request's times in seconds (-1 = does not apply).
struct RequestTimes {
  double ttft_s = -1.0;  // arrival -> first generated token
  double e2e_s = 0.0;    // arrival -> last token
  double queue_s = 0.0;  // arrival -> slot assigned
  double tpot_s = -1.0;  // (last token - first token) / (generated tokens - 1)
};

class Metrics {
 public:
  // `prefix`: the series' namespace ("treespec" or "vllm"); `model_name`: the label every
  // series carries (none when empty).
  explicit Metrics(std::string prefix = "treespec", const std::string& model_name = {});

  // Every HTTP response (path is normalised to a known route or "other").
  void on_http_response(const std::string& path, int status);
  // One finished generation request.
  void on_request_done(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                       const RequestTimes& t);
  // Scheduler state after each step.
  void set_engine_state(const engine::SpecStats& totals, int32_t n_running, int32_t n_waiting, int32_t n_slots);
  void set_waiting(int32_t n_waiting);
  // The KV pool after each step: fraction of blocks in use, preemptions so far.
  void set_kv_state(double usage, int64_t n_preemptions);
  void set_ready(bool ready);

  std::string render() const;

 private:
  // `prefix:name{model_name="...",extra}` (extra: `k="v",...` or empty).
  std::string series(const char* name, const std::string& extra = {}) const;
  void header(std::string& out, const char* name, const char* type, const char* help) const;

  std::string prefix_;
  std::string base_labels_;  // model_name="..." or empty
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;  // (path, status) -> count
  std::map<std::string, uint64_t> success_;               // finish reason -> count
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  Histogram ttft_;
  Histogram e2e_;
  Histogram queue_;
  Histogram tpot_;
  engine::SpecStats totals_;
  int32_t running_ = 0;
  int32_t waiting_ = 0;
  int32_t slots_ = 0;
  double kv_usage_ = 0.0;
  int64_t preemptions_ = 0;
  bool ready_ = false;
};

}  // namespace treespec::server
