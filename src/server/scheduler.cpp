#include "server/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/assert.h"
#include "core/log.h"
#include "core/timer.h"
#include "drafters/registry.h"
#include "tokenizer/text_stream.h"

namespace treespec::server {

const char* openai_finish_reason(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::eog:
    case engine::FinishReason::stop: return "stop";
    case engine::FinishReason::length:
    case engine::FinishReason::context: return "length";
    case engine::FinishReason::cancelled: return "cancelled";
    case engine::FinishReason::none: break;
  }
  return "none";
}

void Notifier::notify() {
  std::lock_guard<std::mutex> lock(mu);
  ++n;
  cv.notify_all();
}

uint64_t Notifier::wait(uint64_t seen, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return n != seen; });
  return n;
}

bool RequestState::take(std::string& out, std::vector<sampling::TokenLogprob>* lp) {
  std::lock_guard<std::mutex> lock(mu);
  out.swap(pending);
  pending.clear();
  if (lp != nullptr && n_logprobs_taken < n_logprobs_ready) {
    lp->insert(lp->end(), logprobs.begin() + static_cast<std::ptrdiff_t>(n_logprobs_taken),
               logprobs.begin() + static_cast<std::ptrdiff_t>(n_logprobs_ready));
    n_logprobs_taken = n_logprobs_ready;
  }
  return done;
}

void RequestState::notify() {
  cv.notify_all();
  if (notifier) notifier->notify();
}

void RequestState::wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done || !pending.empty(); });
}

bool RequestState::wait_done(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu);
  return cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; });
}

struct Scheduler::Active {
  std::shared_ptr<RequestState> state;
  std::unique_ptr<engine::Sequence> seq;
  std::unique_ptr<tokenizer::TextStream> text;
};

namespace {

void finish_without_engine(RequestState& r, const std::string& reason, const std::string& error) {
  std::lock_guard<std::mutex> lock(r.mu);
  r.done = true;
  r.finish_reason = reason;
  r.error = error;
  r.t_done = core::now_s();
  r.notify();
}

}  // namespace

Scheduler::Scheduler(const model::Model& model, const tokenizer::Tokenizer& tok, const SchedulerConfig& cfg,
                     Metrics& metrics)
    : model_(model), tok_(tok), cfg_(cfg), metrics_(metrics), engine_(model, cfg.engine) {
  if (cfg.max_queue < 0) throw InvalidArgument(fmt::format("--max-queue must be >= 0, got {}", cfg.max_queue));
  engine_.set_eog_ids(tok.eog_ids());
  // The policy run and bench use (--budget N / dynamic, propd's controller, --spec auto's
  // choice, or each drafter's own size under the per-step budget --step-budget).
  budget_ = engine::make_budget_policy(cfg_.spec, engine_, cfg.step_budget);
  engine_.set_budget_policy(budget_.get());
  // Build one drafter now so a bad --spec or drafter parameter fails at startup; and one
  // of each other method a request may ask for (a bad parameter of one the server does
  // not use leaves it out of request_methods(), naming why in the log).
  (void)drafters::make_drafter(cfg_.spec, drafters::DrafterEnv{&model_, tok_.eog_ids(), 0});
  for (const drafters::MethodInfo& info : drafters::methods()) {
    const std::string& m = info.name;
    if (m != cfg_.spec.method && !info.per_request) continue;
    try {
      drafters::SpecConfig sc = cfg_.spec;
      sc.method = m;
      if (m != cfg_.spec.method) (void)drafters::make_drafter(sc, drafters::DrafterEnv{&model_, tok_.eog_ids(), 0});
      request_methods_.push_back(m);
    } catch (const std::exception& e) {
      TS_LOG_WARN("requests cannot choose \"spec\": \"{}\": {}", m, e.what());
    }
  }
  metrics_.set_engine_state(engine_.totals(), 0, 0, cfg_.engine.n_slots);
  slots_ = snapshot_slots({});  // all idle until the first step
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(0.0); }

Status Scheduler::submit(std::shared_ptr<RequestState> r) {
  return submit(std::vector<std::shared_ptr<RequestState>>{std::move(r)});
}

Status Scheduler::submit(const std::vector<std::shared_ptr<RequestState>>& rs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return {StatusCode::cancelled, "the server is shutting down"};
  const auto free_slots = std::max<int64_t>(0, static_cast<int64_t>(cfg_.engine.n_slots) - n_running_);
  const auto n = static_cast<int64_t>(rs.size());
  if (static_cast<int64_t>(waiting_.size()) + n > free_slots + cfg_.max_queue) {
    return {StatusCode::no_slot,
            fmt::format("all {} slots are busy and {} requests are queued (--max-queue {}){}", cfg_.engine.n_slots,
                        waiting_.size(), cfg_.max_queue,
                        n > 1 ? fmt::format("; this request needs room for its {} choices", n) : "")};
  }
  waiting_.insert(waiting_.end(), rs.begin(), rs.end());
  metrics_.set_waiting(static_cast<int32_t>(waiting_.size()));
  cv_.notify_all();
  return {};
}

int32_t Scheduler::n_waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(waiting_.size());
}

int32_t Scheduler::n_running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_running_;
}

void Scheduler::shutdown(double grace_s) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    accepting_ = false;
    stop_ = true;
    cv_.notify_all();
    if (grace_s > 0.0) {
      idle_cv_.wait_for(lock, std::chrono::duration<double>(grace_s),
                        [&] { return n_running_ == 0 && waiting_.empty(); });
    }
  }
  cancel_all_.store(true);
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Scheduler::admit(const std::shared_ptr<RequestState>& r, std::vector<std::unique_ptr<Active>>& active) {
  if (r->cancel_requested.load() || cancel_all_.load()) {
    finish_without_engine(*r, "cancelled", "");
    metrics_.on_request_done("cancelled", 0, 0,
                             RequestTimes{-1.0, core::now_s() - r->t_arrival, core::now_s() - r->t_arrival, -1.0});
    return true;
  }
  auto a = std::make_unique<Active>();
  a->state = r;
  try {
    drafters::DrafterEnv env{&model_, tok_.eog_ids(), r->params.sampling.seed, &engine_.ctx().pool()};
    drafters::SpecConfig sc = cfg_.spec;
    if (!r->spec.empty()) sc.method = r->spec;
    a->seq = std::make_unique<engine::Sequence>(r->prompt, r->params, drafters::make_drafter(sc, env));
    a->text = std::make_unique<tokenizer::TextStream>(tok_, r->prompt.empty() ? -1 : r->prompt.back(), r->stops);
    Active* ap = a.get();
    a->seq->on_tokens = [ap](std::span<const int32_t> toks) {
      std::string delta;
      // Log-probabilities of the tokens the text took; those up to the last one that
      // released text are ready to go out with it.
      const auto& lps = ap->seq->logprobs();
      const size_t first = ap->seq->generated().size() - toks.size();
      std::vector<sampling::TokenLogprob> lp;
      size_t ready = 0;
      for (size_t k = 0; k < toks.size(); ++k) {
        if (ap->text->stopped()) break;
        const int32_t before = ap->text->n_tokens();
        const std::string piece = ap->text->push(toks[k]);
        delta += piece;
        if (lps.empty() || ap->text->n_tokens() == before) continue;
        lp.push_back(lps[first + k]);
        if (!piece.empty()) ready = lp.size();
      }
      RequestState& s = *ap->state;
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.t_first_token == 0.0) s.t_first_token = core::now_s();
      s.pending += delta;
      s.text += delta;
      s.n_completion_tokens = ap->text->n_tokens();
      if (ready > 0) s.n_logprobs_ready = s.logprobs.size() + ready;
      s.logprobs.insert(s.logprobs.end(), lp.begin(), lp.end());
      s.notify();
    };
    {
      std::lock_guard<std::mutex> lock(r->mu);
      r->t_start = core::now_s();
    }
    const Status st = engine_.add(*a->seq);
    if (st.code() == StatusCode::kv_full) return false;  // waits for blocks (slots were free)
    if (!st.ok()) throw Error(st.to_string());           // cannot happen: we admit only into free slots
    std::lock_guard<std::mutex> lock(r->mu);
    r->slot = a->seq->slot();
  } catch (const std::exception& e) {
    TS_LOG_WARN("request {}: cannot start: {}", r->id, e.what());
    finish_without_engine(*r, "error", e.what());
    metrics_.on_request_done("error", static_cast<int64_t>(r->prompt.size()), 0,
                             RequestTimes{-1.0, core::now_s() - r->t_arrival, r->t_start - r->t_arrival, -1.0});
    if (a->seq && a->seq->slot() >= 0) engine_.release(*a->seq, engine::FinishReason::cancelled);
    return true;
  }
  active.push_back(std::move(a));
  return true;
}

bool Scheduler::resume_preempted(std::vector<std::unique_ptr<Active>>& active) {
  std::vector<Active*> parked;
  for (auto& a : active) {
    if (a->seq->preempted() && !a->seq->finished()) parked.push_back(a.get());
  }
  std::sort(parked.begin(), parked.end(),
            [](const Active* x, const Active* y) { return x->seq->admitted() < y->seq->admitted(); });
  for (Active* a : parked) {
    if (cancel_all_.load() || a->state->cancel_requested.load()) {
      engine_.release(*a->seq, engine::FinishReason::cancelled);
      continue;
    }
    const Status st = engine_.add(*a->seq);
    if (st.code() == StatusCode::kv_full) return false;
    TREESPEC_ASSERT(st.ok(), "resuming a preempted sequence: a slot is free");
    std::lock_guard<std::mutex> lock(a->state->mu);
    a->state->slot = a->seq->slot();  // it may resume in another slot
  }
  return true;
}

void Scheduler::finalize(Active& a) {
  RequestState& s = *a.state;
  const std::string rest = a.text->finish();
  const engine::Sequence& seq = *a.seq;
  const std::string reason = a.text->stopped() ? "stop" : openai_finish_reason(seq.finish_reason());
  const int32_t n_tokens = a.text->n_tokens();
  const double t_done = core::now_s();
  RequestTimes times;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.t_first_token > 0.0) times.ttft_s = s.t_first_token - s.t_arrival;
    if (s.t_first_token > 0.0 && n_tokens > 1) times.tpot_s = (t_done - s.t_first_token) / (n_tokens - 1);
    times.e2e_s = t_done - s.t_arrival;
    times.queue_s = s.t_start - s.t_arrival;
  }
  // Metrics first, so a client that reads /metrics after its response sees its request.
  metrics_.on_request_done(reason, static_cast<int64_t>(s.prompt.size()), n_tokens, times);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.pending += rest;
    s.text += rest;
    s.finish_reason = reason;
    if (a.text->stopped()) s.stop_word = a.text->stop_word();
    s.n_completion_tokens = n_tokens;
    s.n_logprobs_ready = s.logprobs.size();  // one per token of the answer
    s.stats = seq.stats();
    s.t_done = t_done;
    s.done = true;
    s.notify();
  }
  const auto& st = seq.stats();
  TS_LOG_INFO(
      "request {}: {} | prompt {} tok, completion {} tok | queue {:.1f} ms, ttft {:.1f} ms, total {:.1f} ms, {:.1f} "
      "tok/s | "
      "spec {}: {} drafts, {} draft tokens, {} accepted, mean accepted length {:.2f}{}",
      s.id, reason, s.prompt.size(), n_tokens, 1e3 * times.queue_s, 1e3 * times.ttft_s, 1e3 * times.e2e_s,
      st.tokens_per_s(), s.spec.empty() ? cfg_.spec.method : s.spec, st.n_drafts, st.n_draft_tokens, st.n_accepted,
      st.mean_accepted_length(), s.ignored_fields.empty() ? std::string() : " | ignored fields: " + s.ignored_fields);
}

std::vector<SlotInfo> Scheduler::snapshot_slots(const std::vector<std::unique_ptr<Active>>& active) const {
  std::vector<SlotInfo> out(static_cast<size_t>(cfg_.engine.n_slots));
  for (size_t i = 0; i < out.size(); ++i) out[i].id = static_cast<int32_t>(i);
  for (const auto& a : active) {
    const engine::Sequence& seq = *a->seq;
    if (seq.slot() < 0 || seq.slot() >= static_cast<int32_t>(out.size())) continue;  // preempted: waiting
    SlotInfo& s = out[static_cast<size_t>(seq.slot())];
    s.is_processing = true;
    s.id_task = a->state->id;
    s.spec = a->state->spec.empty() ? cfg_.spec.method : a->state->spec;
    s.n_prompt_tokens = static_cast<int64_t>(seq.prompt().size());
    s.n_decoded = static_cast<int64_t>(seq.generated().size());
    s.n_prompt_tokens_cached = seq.stats().n_prompt_cached;
  }
  return out;
}

std::vector<SlotInfo> Scheduler::slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_;
}

void Scheduler::loop() {
  const auto n_slots = static_cast<size_t>(cfg_.engine.n_slots);
  std::vector<std::unique_ptr<Active>> active;
  for (;;) {
    std::vector<std::shared_ptr<RequestState>> to_admit, to_cancel;
    // Preempted sequences get the pool's blocks before any new request.
    const bool none_parked = resume_preempted(active);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !active.empty() || !waiting_.empty() || stop_; });
      if (cancel_all_.load()) {
        to_cancel.assign(waiting_.begin(), waiting_.end());
        waiting_.clear();
      }
      while (none_parked && !waiting_.empty() && active.size() + to_admit.size() < n_slots) {
        to_admit.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      n_running_ = static_cast<int32_t>(active.size() + to_admit.size());
      if (stop_ && active.empty() && to_admit.empty() && waiting_.empty() && to_cancel.empty()) {
        idle_cv_.notify_all();
        break;
      }
    }
    for (auto& r : to_cancel) {
      finish_without_engine(*r, "cancelled", "");
      metrics_.on_request_done("cancelled", 0, 0,
                               RequestTimes{-1.0, core::now_s() - r->t_arrival, core::now_s() - r->t_arrival, -1.0});
    }
    for (size_t i = 0; i < to_admit.size(); ++i) {
      if (admit(to_admit[i], active)) continue;
      // Out of KV blocks: this request and those after it wait at the front, in order.
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.insert(waiting_.begin(), to_admit.begin() + static_cast<std::ptrdiff_t>(i), to_admit.end());
      n_running_ = static_cast<int32_t>(active.size());
      break;
    }

    std::vector<engine::Sequence*> seqs;
    for (auto& a : active) {
      if (!a->seq->finished() && (cancel_all_.load() || a->state->cancel_requested.load())) {
        engine_.release(*a->seq, engine::FinishReason::cancelled);
      }
      if (!a->seq->finished() && !a->seq->preempted()) seqs.push_back(a->seq.get());
    }
    if (!seqs.empty()) {
      try {
        engine_.step(seqs);
      } catch (const std::exception& e) {
        // A drafter or engine error fails the requests of this step, not the server.
        TS_LOG_ERROR("decode step failed: {}", e.what());
        for (auto& a : active) {
          if (a->seq->finished()) continue;
          engine_.release(*a->seq, engine::FinishReason::cancelled);
          std::lock_guard<std::mutex> lock(a->state->mu);
          a->state->error = fmt::format("decode step failed: {}", e.what());
        }
      }
    }
    for (auto& a : active) {
      if (!a->seq->finished() && a->text->stopped()) engine_.release(*a->seq, engine::FinishReason::stop);
    }
    std::vector<std::unique_ptr<Active>> done;
    for (auto& a : active) {
      if (a->seq->finished()) done.push_back(std::move(a));
    }
    active.erase(std::remove(active.begin(), active.end(), nullptr), active.end());

    // Gauges before completions are announced, so they agree with what clients see.
    std::vector<SlotInfo> slots = snapshot_slots(active);
    int32_t n_waiting = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      n_running_ = static_cast<int32_t>(active.size());
      n_waiting = static_cast<int32_t>(waiting_.size());
      slots_ = std::move(slots);
    }
    metrics_.set_engine_state(engine_.totals(), static_cast<int32_t>(active.size()), n_waiting, cfg_.engine.n_slots);
    metrics_.set_kv_state(engine_.kv().usage(), engine_.n_preemptions());
    for (auto& a : done) finalize(*a);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (active.empty() && waiting_.empty()) idle_cv_.notify_all();
    }
  }
  metrics_.set_engine_state(engine_.totals(), 0, 0, cfg_.engine.n_slots);
}

}  // namespace treespec::server
