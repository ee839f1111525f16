// Scheduler: continuous batching. One thread owns the engine::Engine (n_slots KV slots of
// n_ctx cells each). Between decode steps it admits queued requests into free slots
// (prefill) and releases finished, stopped or cancelled ones; every step all active
// sequences go through ONE batched forward (Engine::step), each with its own drafter and
// tree. The tree budgets come from engine::make_budget_policy (the factory run and bench
// use: --budget, propd's controller, --spec auto), capped by one tree-node budget per
// step shared by the active slots; without one, a StepBudgetPolicy splits that budget.
//
// HTTP threads talk to it through RequestState (mutex + condition variable): the
// scheduler appends released text and marks completion; the HTTP side reads text and may
// request cancellation (client gone). Nothing here blocks on a client.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drafters/factory.h"
#include "engine/budget.h"
#include "engine/budget_controller.h"
#include "engine/engine.h"
#include "engine/stats.h"
#include "model/model.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace treespec::server {

// Wakes one reader of several RequestStates (the n choices of one streamed request).
struct Notifier {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t n = 0;  // notifications so far
  void notify();
  // Waits until a notification after `seen` (at most timeout_s); returns the count.
  uint64_t wait(uint64_t seen, double timeout_s);
};

// One generation request (one choice of it) shared between its HTTP thread and the
// scheduler.
struct RequestState {
  // Set before submit(), then read-only.
  std::string id;
  std::vector<int32_t> prompt;
  engine::SequenceParams params;
  std::vector<std::string> stops;
  std::string spec;                    // the drafter (one of Scheduler::request_methods()); "" = the server's --spec
  double t_arrival = 0.0;              // core::now_s() when the HTTP request arrived
  std::string ignored_fields;          // named in the request's log line ("" = none)
  std::shared_ptr<Notifier> notifier;  // also woken on every change (null = none)

  // Shared; guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // released text not yet taken by the HTTP side
  std::string text;     // all released text
  bool done = false;
  std::string finish_reason;  // OpenAI: stop | length | cancelled
  std::string stop_word;      // the stop string that ended it ("" = none did)
  std::string error;          // non-empty: the request failed (message)
  int32_t n_completion_tokens = 0;
  // When params.wants_logprobs(): one entry per token of the answer (the first
  // n_completion_tokens generated ones); the first n_logprobs_ready have their text in
  // `text` (streams send them with it), n_logprobs_taken went out with take().
  std::vector<sampling::TokenLogprob> logprobs;
  size_t n_logprobs_ready = 0;
  size_t n_logprobs_taken = 0;
  engine::SpecStats stats;
  int32_t slot = -1;           // the engine slot it decodes in (-1 = not started)
  double t_start = 0.0;        // slot assigned (prefill begins)
  double t_first_token = 0.0;  // 0 = none yet
  double t_done = 0.0;

  std::atomic<bool> cancel_requested{false};
  void cancel() { cancel_requested.store(true); }

  // Takes the pending text (and, with lp, the ready log-probability entries not taken
  // yet, appended); returns whether the request is done (under mu).
  bool take(std::string& out, std::vector<sampling::TokenLogprob>* lp = nullptr);
  // Wakes the readers (cv and the notifier); call under mu.
  void notify();
  // Waits until new text or completion, at most timeout_s (streaming readers).
  void wait(double timeout_s);
  // Waits until completion, at most timeout_s; returns done (plain-response readers,
  // which never take `pending`, so waiting for text would spin).
  bool wait_done(double timeout_s);
};

// One sequence slot as GET /slots shows it (a snapshot taken after each step).
struct SlotInfo {
  int32_t id = 0;
  bool is_processing = false;
  std::string id_task;  // the request decoding in it ("" = idle)
  std::string spec;     // its method
  int64_t n_prompt_tokens = 0;
  int64_t n_decoded = 0;               // tokens generated so far
  int64_t n_prompt_tokens_cached = 0;  // prompt tokens whose KV came from the prefix cache
};

struct SchedulerConfig {
  engine::EngineParams engine;
  drafters::SpecConfig spec;
  int32_t max_queue = 64;   // waiting requests beyond the free slots
  int32_t step_budget = 0;  // tree nodes per step across slots; 0 = no cap
};

class Scheduler {
 public:
  Scheduler(const model::Model& model, const tokenizer::Tokenizer& tok, const SchedulerConfig& cfg, Metrics& metrics);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Status no_slot when more than max_queue requests would wait;
  // cancelled when shutting down.
  Status submit(std::shared_ptr<RequestState> r);
  // The choices of one request: all queued, or none (the same Status as submit()).
  Status submit(const std::vector<std::shared_ptr<RequestState>>& rs);

  // Stops accepting requests, lets queued and running ones finish for up to grace_s
  // seconds, cancels the rest, joins the thread. Idempotent.
  void shutdown(double grace_s);

  int32_t n_waiting() const;
  int32_t n_running() const;
  const SchedulerConfig& config() const { return cfg_; }
  // The methods a request may choose (its "spec" field): the server's --spec and every
  // method registered as per_request (plain decoding and the training-free drafters:
  // lookup, lookahead, ptd) with the server's parameters for them; methods that need
  // files (heads, a draft model) or start-up calibration (auto) only when they are the
  // server's. In spec_methods() order.
  const std::vector<std::string>& request_methods() const { return request_methods_; }
  // Every slot's state after the last step (GET /slots).
  std::vector<SlotInfo> slots() const;
  // The engine's KV cache, for its sizes (fixed once built; not its usage, which the
  // scheduler thread changes).
  const kv::KvCache& kv() const { return engine_.kv(); }

 private:
  struct Active;
  void loop();
  // Starts a request: false when the KV pool lacks the blocks for its prompt (the
  // request is untouched and waits); true otherwise (started, or finished with an error).
  bool admit(const std::shared_ptr<RequestState>& r, std::vector<std::unique_ptr<Active>>& active);
  // Resumes preempted sequences, oldest admission first; false while one still waits.
  bool resume_preempted(std::vector<std::unique_ptr<Active>>& active);
  void finalize(Active& a);
  std::vector<SlotInfo> snapshot_slots(const std::vector<std::unique_ptr<Active>>& active) const;

  const model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  std::vector<std::string> request_methods_;
  std::vector<SlotInfo> slots_;  // guarded by mu_
  SchedulerConfig cfg_;
  Metrics& metrics_;
  engine::Engine engine_;
  std::unique_ptr<engine::BudgetPolicy> budget_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the scheduler (work or stop)
  std::condition_variable idle_cv_;  // wakes shutdown() when all work is done
  std::deque<std::shared_ptr<RequestState>> waiting_;
  int32_t n_running_ = 0;
  bool accepting_ = true;
  bool stop_ = false;  // exit once idle
  std::atomic<bool> cancel_all_{false};
  std::thread thread_;
};

// OpenAI finish_reason for an engine finish reason.
const char* openai_finish_reason(engine::FinishReason r);

}  // namespace treespec::server
