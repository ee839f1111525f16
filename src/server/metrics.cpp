#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace treespec::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // first bound >= v: le is inclusive
  counts_[static_cast<size_t>(it - bounds_.begin())] += 1;
  sum_ += v;
  count_ += 1;
}

void Histogram::render(std::string& out, const std::string& name) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, sum_, name, count_);
}

namespace {
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBounds = {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  1.0,   2.5,
                                            5.0,  10.0,  20.0, 40.0, 60.0, 120.0, 300.0};

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}
}  // namespace

Metrics::Metrics() : ttft_(kTtftBounds), e2e_(kLatencyBounds), queue_(kLatencyBounds) {}

void Metrics::on_http_response(const std::string& path, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  http_[{path, status}] += 1;
}

void Metrics::on_request_done(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                              double ttft_s, double e2e_s, double queue_s) {
  std::lock_guard<std::mutex> lock(mu_);
  success_[finish_reason] += 1;
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, prompt_tokens));
  generation_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, generation_tokens));
  if (ttft_s >= 0.0) ttft_.observe(ttft_s);
  e2e_.observe(e2e_s);
  queue_.observe(queue_s);
}

void Metrics::set_engine_state(const engine::SpecStats& totals, int32_t n_running, int32_t n_waiting, int32_t n_slots) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_ = totals;
  running_ = n_running;
  waiting_ = n_waiting;
  slots_ = n_slots;
}

void Metrics::set_waiting(int32_t n_waiting) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_ = n_waiting;
}

void Metrics::set_kv_state(double usage, int64_t n_preemptions) {
  std::lock_guard<std::mutex> lock(mu_);
  kv_usage_ = usage;
  preemptions_ = n_preemptions;
}

void Metrics::set_ready(bool ready) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = ready;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  header(out, "treespec:model_ready", "gauge", "1 once the model is loaded and requests are served.");
  out += fmt::format("treespec:model_ready {}\n", ready_ ? 1 : 0);

  header(out, "treespec:http_requests_total", "counter", "HTTP responses by route and status code.");
  for (const auto& [key, n] : http_) {
    out += fmt::format("treespec:http_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  }
  header(out, "treespec:request_success_total", "counter", "Finished generation requests by finish reason.");
  for (const auto& [reason, n] : success_) {
    out += fmt::format("treespec:request_success_total{{finished_reason=\"{}\"}} {}\n", reason, n);
  }
  header(out, "treespec:prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  out += fmt::format("treespec:prompt_tokens_total {}\n", prompt_tokens_);
  header(out, "treespec:generation_tokens_total", "counter", "Tokens generated for finished requests.");
  out += fmt::format("treespec:generation_tokens_total {}\n", generation_tokens_);

  header(out, "treespec:time_to_first_token_seconds", "histogram", "Time from request arrival to its first generated token.");
  ttft_.render(out, "treespec:time_to_first_token_seconds");
  header(out, "treespec:e2e_request_latency_seconds", "histogram", "Time from request arrival to its last token.");
  e2e_.render(out, "treespec:e2e_request_latency_seconds");
  header(out, "treespec:request_queue_time_seconds", "histogram", "Time a request waited for a sequence slot.");
  queue_.render(out, "treespec:request_queue_time_seconds");

  header(out, "treespec:num_requests_running", "gauge", "Requests holding a sequence slot (busy slots).");
  out += fmt::format("treespec:num_requests_running {}\n", running_);
  header(out, "treespec:num_requests_waiting", "gauge", "Requests queued for a slot.");
  out += fmt::format("treespec:num_requests_waiting {}\n", waiting_);
  header(out, "treespec:num_slots", "gauge", "Sequence slots (-np).");
  out += fmt::format("treespec:num_slots {}\n", slots_);
  header(out, "treespec:kv_cache_usage_perc", "gauge", "Fraction of the KV cache pool's blocks in use (1 = full).");
  out += fmt::format("treespec:kv_cache_usage_perc {}\n", kv_usage_);
  header(out, "treespec:num_preemptions_total", "counter",
         "Sequences preempted because the KV cache pool ran out of blocks (recomputed when resumed).");
  out += fmt::format("treespec:num_preemptions_total {}\n", preemptions_);
  header(out, "treespec:prefix_cache_queries_total", "counter", "Prompt tokens of started requests (vLLM: prefix_cache_queries).");
  out += fmt::format("treespec:prefix_cache_queries_total {}\n", totals_.n_prompt);
  header(out, "treespec:prefix_cache_hits_total", "counter",
         "Prompt tokens whose KV was reused from another request instead of computed (vLLM: prefix_cache_hits).");
  out += fmt::format("treespec:prefix_cache_hits_total {}\n", totals_.n_prompt_cached);

  header(out, "treespec:engine_decode_steps_total", "counter", "Batched decode forward passes.");
  out += fmt::format("treespec:engine_decode_steps_total {}\n", totals_.n_forwards);
  header(out, "treespec:engine_tree_rows_total", "counter", "Tree rows (tokens) fed to the model in decode steps.");
  out += fmt::format("treespec:engine_tree_rows_total {}\n", totals_.n_rows);

  header(out, "treespec:spec_decode_num_drafts_total", "counter", "Verification steps with at least one drafted token (vLLM: spec_decode_num_drafts).");
  out += fmt::format("treespec:spec_decode_num_drafts_total {}\n", totals_.n_drafts);
  header(out, "treespec:spec_decode_num_draft_tokens_total", "counter", "Drafted tokens verified (vLLM: spec_decode_num_draft_tokens).");
  out += fmt::format("treespec:spec_decode_num_draft_tokens_total {}\n", totals_.n_draft_tokens);
  header(out, "treespec:spec_decode_num_accepted_tokens_total", "counter", "Drafted tokens accepted (vLLM: spec_decode_num_accepted_tokens).");
  out += fmt::format("treespec:spec_decode_num_accepted_tokens_total {}\n", totals_.n_accepted);
  header(out, "treespec:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens by draft position, 0-based (vLLM: spec_decode_num_accepted_tokens_per_pos).");
  for (size_t i = 0; i < totals_.accepted_per_pos.size(); ++i) {
    out += fmt::format("treespec:spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", i, totals_.accepted_per_pos[i]);
  }
  return out;
}

}  // namespace treespec::server
