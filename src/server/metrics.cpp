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

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string pre = labels.empty() ? std::string() : labels + ",";
  const std::string own = labels.empty() ? std::string() : "{" + labels + "}";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, pre, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n{}_sum{} {}\n{}_count{} {}\n", name, pre, cum, name, own, sum_,
                     name, own, count_);
}

namespace {
// vLLM's buckets (vllm/v1/metrics/loggers.py): time to first token, time per output
// token, and request latencies (end to end, queue).
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                         1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTpotBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBounds = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

Metrics::Metrics(std::string prefix, const std::string& model_name)
    : prefix_(std::move(prefix)),
      base_labels_(model_name.empty() ? std::string() : fmt::format("model_name=\"{}\"", label_value(model_name))),
      ttft_(kTtftBounds),
      e2e_(kLatencyBounds),
      queue_(kLatencyBounds),
      tpot_(kTpotBounds) {}

std::string Metrics::series(const char* name, const std::string& extra) const {
  std::string labels = base_labels_;
  if (!extra.empty()) labels += (labels.empty() ? "" : ",") + extra;
  return labels.empty() ? fmt::format("{}:{}", prefix_, name) : fmt::format("{}:{}{{{}}}", prefix_, name, labels);
}

void Metrics::header(std::string& out, const char* name, const char* type, const char* help) const {
  out += fmt::format("# HELP {}:{} {}\n# TYPE {}:{} {}\n", prefix_, name, help, prefix_, name, type);
}

void Metrics::on_http_response(const std::string& path, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  http_[{path, status}] += 1;
}

void Metrics::on_request_done(const std::string& finish_reason, int64_t prompt_tokens, int64_t generation_tokens,
                              const RequestTimes& t) {
  std::lock_guard<std::mutex> lock(mu_);
  success_[finish_reason] += 1;
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, prompt_tokens));
  generation_tokens_ += static_cast<uint64_t>(std::max<int64_t>(0, generation_tokens));
  if (t.ttft_s >= 0.0) ttft_.observe(t.ttft_s);
  if (t.tpot_s >= 0.0) tpot_.observe(t.tpot_s);
  e2e_.observe(t.e2e_s);
  queue_.observe(t.queue_s);
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
  header(out, "model_ready", "gauge", "1 once the model is loaded and requests are served.");
  out += fmt::format("{} {}\n", series("model_ready"), ready_ ? 1 : 0);

  header(out, "http_requests_total", "counter", "HTTP responses by route and status code.");
  for (const auto& [key, n] : http_) {
    out +=
        fmt::format("{} {}\n",
                    series("http_requests_total", fmt::format("path=\"{}\",status=\"{}\"", key.first, key.second)), n);
  }
  header(out, "request_success_total", "counter", "Finished generation requests by finish reason.");
  for (const auto& [reason, n] : success_) {
    out += fmt::format("{} {}\n", series("request_success_total", fmt::format("finished_reason=\"{}\"", reason)), n);
  }
  header(out, "prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  out += fmt::format("{} {}\n", series("prompt_tokens_total"), prompt_tokens_);
  header(out, "generation_tokens_total", "counter", "Tokens generated for finished requests.");
  out += fmt::format("{} {}\n", series("generation_tokens_total"), generation_tokens_);

  header(out, "time_to_first_token_seconds", "histogram", "Time from request arrival to its first generated token.");
  ttft_.render(out, prefix_ + ":time_to_first_token_seconds", base_labels_);
  header(out, "time_per_output_token_seconds", "histogram",
         "Per request: time from its first to its last generated token over the tokens after the first.");
  tpot_.render(out, prefix_ + ":time_per_output_token_seconds", base_labels_);
  header(out, "e2e_request_latency_seconds", "histogram", "Time from request arrival to its last token.");
  e2e_.render(out, prefix_ + ":e2e_request_latency_seconds", base_labels_);
  header(out, "request_queue_time_seconds", "histogram", "Time a request waited for a sequence slot.");
  queue_.render(out, prefix_ + ":request_queue_time_seconds", base_labels_);

  header(out, "num_requests_running", "gauge", "Requests holding a sequence slot (busy slots).");
  out += fmt::format("{} {}\n", series("num_requests_running"), running_);
  header(out, "num_requests_waiting", "gauge", "Requests queued for a slot.");
  out += fmt::format("{} {}\n", series("num_requests_waiting"), waiting_);
  header(out, "num_slots", "gauge", "Sequence slots (-np).");
  out += fmt::format("{} {}\n", series("num_slots"), slots_);
  header(out, "kv_cache_usage_perc", "gauge", "Fraction of the KV cache pool's blocks in use (1 = full).");
  out += fmt::format("{} {}\n", series("kv_cache_usage_perc"), kv_usage_);
  header(out, "num_preemptions_total", "counter",
         "Sequences preempted because the KV cache pool ran out of blocks (recomputed when resumed).");
  out += fmt::format("{} {}\n", series("num_preemptions_total"), preemptions_);
  header(out, "prefix_cache_queries_total", "counter",
         "Prompt tokens of started requests (vLLM: prefix_cache_queries).");
  out += fmt::format("{} {}\n", series("prefix_cache_queries_total"), totals_.n_prompt);
  header(out, "prefix_cache_hits_total", "counter",
         "Prompt tokens whose KV was reused from another request instead of computed (vLLM: prefix_cache_hits).");
  out += fmt::format("{} {}\n", series("prefix_cache_hits_total"), totals_.n_prompt_cached);

  header(out, "engine_decode_steps_total", "counter", "Batched decode forward passes.");
  out += fmt::format("{} {}\n", series("engine_decode_steps_total"), totals_.n_forwards);
  header(out, "engine_tree_rows_total", "counter", "Tree rows (tokens) fed to the model in decode steps.");
  out += fmt::format("{} {}\n", series("engine_tree_rows_total"), totals_.n_rows);

  header(out, "spec_decode_num_drafts_total", "counter",
         "Verification steps with at least one drafted token (vLLM: spec_decode_num_drafts).");
  out += fmt::format("{} {}\n", series("spec_decode_num_drafts_total"), totals_.n_drafts);
  header(out, "spec_decode_num_draft_tokens_total", "counter",
         "Drafted tokens verified (vLLM: spec_decode_num_draft_tokens).");
  out += fmt::format("{} {}\n", series("spec_decode_num_draft_tokens_total"), totals_.n_draft_tokens);
  header(out, "spec_decode_num_accepted_tokens_total", "counter",
         "Drafted tokens accepted (vLLM: spec_decode_num_accepted_tokens).");
  out += fmt::format("{} {}\n", series("spec_decode_num_accepted_tokens_total"), totals_.n_accepted);
  header(out, "spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens by draft position, 0-based (vLLM: spec_decode_num_accepted_tokens_per_pos).");
  for (size_t i = 0; i < totals_.accepted_per_pos.size(); ++i) {
    out += fmt::format("{} {}\n",
                       series("spec_decode_num_accepted_tokens_per_pos_total", fmt::format("position=\"{}\"", i)),
                       totals_.accepted_per_pos[i]);
  }
  return out;
}

}  // namespace treespec::server
