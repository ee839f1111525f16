// Engine: runs sequences through prefill and speculative decode steps.
//
// One Engine owns a ForwardContext and a KvCache with n_slots sequence slots of n_ctx
// cells each. Each step, every active sequence's drafter proposes a tree, all trees go
// through ONE forward pass, each is verified with its own sampling parameters, and the
// accepted path's KV is committed. Plain decoding is the NoneDrafter. The Engine is not
// thread-safe: one thread drives it (the server's scheduler, the CLI, the bench).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "drafters/drafter.h"
#include "engine/stats.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "treespec/status.h"
#include "verify/verify.h"

namespace treespec::engine {

enum class FinishReason { none, eog, length, context, cancelled, stop };
const char* finish_reason_name(FinishReason r);

struct SequenceParams {
  sampling::SamplingParams sampling;
  verify::Mode mode = verify::Mode::lossless;  // used when sampling.temp > 0
  verify::TypicalParams typical;
  int32_t n_predict = -1;   // max tokens to generate; -1 = until EOG or context end
  bool ignore_eog = false;
};

class Engine;

// One generation request. Owns its drafter and its statistics; the Engine assigns a
// KV slot while the sequence is active.
class Sequence {
 public:
  Sequence(std::vector<int32_t> prompt, SequenceParams params, std::unique_ptr<drafters::Drafter> drafter);

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const std::vector<int32_t>& generated() const { return generated_; }
  const std::vector<int32_t>& context() const { return context_; }  // prompt + generated
  const SequenceParams& params() const { return params_; }
  drafters::Drafter& drafter() { return *drafter_; }
  bool finished() const { return finish_ != FinishReason::none; }
  FinishReason finish_reason() const { return finish_; }
  void cancel() { cancel_requested_ = true; }
  int32_t slot() const { return slot_; }
  const SpecStats& stats() const { return stats_; }

  // Called with each batch of newly emitted tokens (in order).
  std::function<void(std::span<const int32_t>)> on_tokens;

 private:
  friend class Engine;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> generated_;
  std::vector<int32_t> context_;
  SequenceParams params_;
  std::unique_ptr<drafters::Drafter> drafter_;
  core::Rng rng_;
  int32_t slot_ = -1;
  FinishReason finish_ = FinishReason::none;
  bool cancel_requested_ = false;
  SpecStats stats_;
};

// Largest context (positions per sequence) the engine accepts: RoPE computes angles from
// float positions, which are exact integers only up to 2^24.
constexpr int32_t kMaxContext = 1 << 24;

struct EngineParams {
  int32_t n_threads = 1;
  int32_t n_ctx = 2048;   // positions per sequence (prompt + generated)
  int32_t n_slots = 1;
  int32_t n_batch = 512;  // prefill chunk
};

// Picks the tree budget (max nodes incl. root) for each sequence of a step. The default
// gives each drafter its own max_nodes(); the ProPD controller plugs in here.
class BudgetPolicy {
 public:
  virtual ~BudgetPolicy() = default;
  virtual void plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) = 0;
  // Measured step: batch size, rows fed, mean context, seconds.
  virtual void observe_step(int32_t n_seqs, int32_t n_rows, double mean_ctx, double seconds) {}
};

class Engine {
 public:
  // InvalidArgument for a parameter < 1 or n_ctx > kMaxContext; Error "out of memory:
  // the KV cache ... needs N bytes" (kv::KvCache::check_memory) before allocating a cache
  // larger than the available memory.
  Engine(const model::Model& model, const EngineParams& params);
  ~Engine();

  const model::Model& model() const { return model_; }
  const EngineParams& params() const { return params_; }
  kv::KvCache& kv() { return kv_; }
  model::ForwardContext& ctx() { return ctx_; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  void set_eog_ids(std::vector<int32_t> ids) { eog_ids_ = std::move(ids); }
  void set_budget_policy(BudgetPolicy* policy) { budget_policy_ = policy; }
  int32_t free_slots() const;

  // Validates the prompt (non-empty, ids in vocab, fits the context), takes a free slot
  // and prefills all prompt tokens but the last (which becomes the first tree root).
  // InvalidArgument for a bad prompt; Status no_slot when all slots are busy.
  Status add(Sequence& seq);

  // One decode step for every given active sequence (one forward pass for all).
  // Sequences that finish are released (their slot is free afterwards).
  void step(std::span<Sequence* const> seqs);

  // Finishes a sequence early (frees its slot).
  void release(Sequence& seq, FinishReason reason);

  // Convenience: add + step until finished.
  Status generate(Sequence& seq);

  // Engine-wide totals (every step counted once, whatever the batch size).
  const SpecStats& totals() const { return totals_; }

 private:
  bool is_eog(int32_t tok) const;
  void emit(Sequence& seq, std::span<const int32_t> tokens);

  const model::Model& model_;
  EngineParams params_;
  model::ForwardContext ctx_;
  kv::KvCache kv_;
  std::vector<bool> slot_used_;
  std::vector<int32_t> eog_ids_;
  BudgetPolicy* budget_policy_ = nullptr;
  SpecStats totals_;
  // Step buffers.
  model::Batch batch_;
  core::AlignedBuffer<float> logits_;  // [rows, n_vocab]
  core::AlignedBuffer<float> normed_;  // [rows, n_embd]
};

}  // namespace treespec::engine
