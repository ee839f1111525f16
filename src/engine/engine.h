// Engine: runs sequences through prefill and speculative decode steps.
//
// One Engine owns a ForwardContext and a KvCache: n_slots sequence slots of at most
// n_ctx cells each, in one paged pool of n_kv_cells cells (docs/kv.md). Each step, every active sequence's drafter proposes a tree, all trees go
// through ONE forward pass, each is verified with its own sampling parameters, and the
// accepted path's KV is committed. Plain decoding is the NoneDrafter. The Engine is not
// thread-safe: one thread drives it (the server's scheduler, the CLI, the bench).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "drafters/drafter.h"
#include "engine/early_prune.h"
#include "engine/stats.h"
#include "grammar/token_mask.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "treespec/status.h"
#include "verify/verify.h"

namespace treespec::engine {

enum class FinishReason { none, eog, length, context, cancelled, stop };
const char* finish_reason_name(FinishReason r);

// -c/--ctx-size as run, serve and bench resolve it: 0 = the model's training context, at
// most 4096 (4096 when the model gives none); a size beyond the training context is kept
// but logs a one-line warning (positions the model never saw in training).
int32_t resolve_context_size(int32_t requested, int32_t n_ctx_train);

struct SequenceParams {
  sampling::SamplingParams sampling;
  verify::Mode mode = verify::Mode::coupled;  // used when sampling.temp > 0
  verify::TypicalParams typical;
  int32_t n_predict = -1;  // max tokens to generate; -1 = until EOG or context end
  bool ignore_eog = false;
  // Reuse cached KV of a prompt prefix and offer this sequence's to later ones (when the
  // engine's prefix cache is on; llama-server's per-request cache_prompt). The output is
  // the same either way.
  bool cache_prompt = true;
  // Constrained output (docs/grammar.md): every token, drafted or sampled, must keep the
  // grammar alive; the end of generation only where it can end. Empty = unconstrained.
  grammar::Constraint grammar;
  // Record, for each emitted token, its log-probability (logprobs) and the top_logprobs
  // most likely alternatives (Sequence::logprobs(); sampling::token_logprob: the
  // log-softmax at temperature 1 of the row's logits after logit bias, penalties and the
  // grammar's mask).
  // Off (the default) costs nothing.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool wants_logprobs() const { return logprobs || top_logprobs > 0; }
};

class Engine;
class GrammarStep;  // engine/grammar_step.h

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
  const drafters::Drafter& drafter() const { return *drafter_; }
  bool finished() const { return finish_ != FinishReason::none; }
  // Set when the engine took this sequence's KV blocks for others (the shared pool ran
  // out): it holds no slot and is not finished; add() it again to resume (its context is
  // recomputed, which gives the same K/V bit for bit, so its output does not change).
  bool preempted() const { return preempted_; }
  FinishReason finish_reason() const { return finish_; }
  void cancel() { cancel_requested_ = true; }
  int32_t slot() const { return slot_; }
  int64_t admitted() const { return admitted_; }  // admission order (1, 2, ...); preemption takes the newest
  const SpecStats& stats() const { return stats_; }
  // One entry per generated() token when params().wants_logprobs(), else empty. The
  // same with or without speculation: token k's entry comes from the logits row that
  // chose it (accepted path node k, the bonus from the last one).
  const std::vector<sampling::TokenLogprob>& logprobs() const { return logprobs_; }

  // Called with each batch of newly emitted tokens (in order).
  std::function<void(std::span<const int32_t>)> on_tokens;

 private:
  friend class Engine;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> generated_;
  std::vector<int32_t> context_;
  std::vector<sampling::TokenLogprob> logprobs_;  // per generated_ token (when asked)
  SequenceParams params_;
  std::unique_ptr<drafters::Drafter> drafter_;
  core::Rng rng_;
  grammar::State gstate_;  // after the generated tokens (when params_.grammar is set)
  int32_t slot_ = -1;
  FinishReason finish_ = FinishReason::none;
  bool cancel_requested_ = false;
  bool preempted_ = false;
  int64_t admitted_ = 0;  // admission order (preemption takes the newest first)
  SpecStats stats_;
};

// Largest context (positions per sequence) the engine accepts: RoPE computes angles from
// float positions, which are exact integers only up to 2^24.
constexpr int32_t kMaxContext = 1 << 24;

struct EngineParams {
  int32_t n_threads = 1;
  int32_t n_ctx = 2048;  // positions per sequence (prompt + generated)
  int32_t n_slots = 1;
  int32_t n_batch = 512;  // prefill chunk
  // Cells of the KV pool shared by the slots; 0 = n_slots * n_ctx (every slot can fill
  // its context). Fewer makes sequences compete for blocks (serve's -c, docs/kv.md).
  int32_t n_kv_cells = 0;
  tensor::DType type_k = tensor::DType::f16;  // -ctk
  tensor::DType type_v = tensor::DType::f16;  // -ctv
  // Reuse the KV blocks of a prompt prefix another live or recently finished sequence
  // computed (the server's prompt cache; docs/kv.md). Finished sequences' blocks stay
  // until the pool needs them.
  bool prefix_cache = false;
};
// The KV cache shape an Engine with these parameters allocates.
kv::KvShape engine_kv_shape(const model::Model& model, const EngineParams& params);

// One sequence's part of a measured step (BudgetPolicy::observe).
struct SeqStepReport {
  const Sequence* seq = nullptr;
  int32_t budget = 1;                 // nodes granted (after the context clamp)
  int32_t n_nodes = 1;                // tree rows fed to the first layers
  int32_t n_late = 1;                 // rows that reached the last layer (n_nodes unless pruned)
  int32_t prune_layer = 0;            // layers run on every row before pruning; 0 = not pruned
  std::span<const uint8_t> survived;  // per node, 1 = reached the last layer (empty: all)
  int32_t n_accepted = 0;             // drafted tokens accepted
};

// What one Engine::step measured, for budget policies.
struct StepReport {
  int32_t n_seqs = 0;
  int32_t n_rows = 0;       // rows fed to the first layer
  int32_t n_rows_late = 0;  // rows that reached the last layer
  double rows_eff = 0.0;    // row-layers computed / n_layer (= n_rows without pruning)
  double mean_ctx = 0.0;    // mean committed cells
  double t_forward = 0.0;   // seconds in the forward pass (embedding to logits, pruning included)
  double t_step = 0.0;      // seconds of the whole step (draft, forward, verify, commit, observe)
  std::span<const SeqStepReport> seqs;
};

// Picks the tree budget (max nodes incl. root) for each sequence of a step. The default
// gives each drafter its own max_nodes(); the budget controller (budget_controller.h,
// ProPD's dynamic tree sizing for every drafter) plugs in here.
class BudgetPolicy {
 public:
  virtual ~BudgetPolicy() = default;
  // budgets[i] arrives as the most sequence i can use (its drafter's max_nodes(), or the
  // free context when that is 0); the policy writes the budget to grant.
  virtual void plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) = 0;
  // After plan(): the least chance of acceptance a tree node must have to be worth its
  // row this step (DraftInput::min_value; one value for the batch, 0 = no floor).
  // Drafters that know their nodes' chances (dynamic trees) cut their trees there.
  virtual double min_node_value() const { return 0.0; }
  // The measured step (batch size, rows fed, mean context, forward seconds, ...).
  virtual void observe(const StepReport& r) {}
  // Statistics for reports (run --json "budget", the bench); null when the policy keeps none.
  virtual nlohmann::json stats_json() const;
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
  const kv::KvCache& kv() const { return kv_; }
  model::ForwardContext& ctx() { return ctx_; }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  void set_eog_ids(std::vector<int32_t> ids) { eog_ids_ = std::move(ids); }
  void set_budget_policy(BudgetPolicy* policy) { budget_policy_ = policy; }
  int32_t free_slots() const;

  // Validates the prompt (non-empty, ids in vocab, fits the context), takes a free slot
  // and prefills all prompt tokens but the last (which becomes the first tree root).
  // InvalidArgument for a bad prompt; Status no_slot when all slots are busy, kv_full
  // when the KV pool lacks the blocks for the prompt (nothing changes then). A
  // preempted sequence resumes: its prompt and generated tokens are prefilled again.
  Status add(Sequence& seq);

  // One decode step for every given active sequence (one forward pass for all).
  // Sequences that finish are released (their slot is free afterwards). When the KV
  // pool has no block for a sequence's next row, the newest active sequences are
  // preempted (Sequence::preempted(); the caller add()s them again later, oldest
  // first) until it has one.
  void step(std::span<Sequence* const> seqs);
  int64_t n_preemptions() const { return n_preemptions_; }

  // Finishes a sequence early (frees its slot).
  void release(Sequence& seq, FinishReason reason);

  // Convenience: add + step until finished.
  Status generate(Sequence& seq);

  // Engine-wide totals (every step counted once, whatever the batch size).
  const SpecStats& totals() const { return totals_; }

  // Times one synthetic verification forward (embedding to logits; no drafting, verify or
  // commit) of n_seqs trees of n_nodes rows each after n_ctx committed cells, on free
  // slots that are left empty afterwards. With prune_layer in (0, n_layer), layers
  // [prune_layer, n_layer) run on the first n_late rows of each tree only (the prune
  // head's cost is not included). For the budget controller's start-up sweep. Returns
  // seconds, or a negative value when there are not enough free slots or cells.
  double probe_step(int32_t n_seqs, int32_t n_nodes, int32_t n_ctx, int32_t prune_layer = 0, int32_t n_late = 0);

 private:
  bool is_eog(int32_t tok) const;
  // step()'s parts: the sequences that can take a step (others are released or
  // preempted), their drafted trees, and one sequence's verification and commit.
  std::vector<Sequence*> runnable(std::span<Sequence* const> seqs_in);
  struct Drafted {
    std::vector<int32_t> budgets;        // nodes granted per sequence
    std::vector<tree::TokenTree> trees;  // the trees forwarded
    std::vector<double> t_draft;         // seconds drafting
    std::vector<GrammarStep> gsteps;     // under a grammar: what it cut, and the row masks
    std::vector<uint8_t> cut;            // 1 = the grammar cut the drafted tree
  };
  void draft_trees(std::span<Sequence* const> seqs, Drafted& d);
  struct SeqTimes {
    double verify = 0.0, commit = 0.0;
  };
  SeqTimes verify_and_commit(Sequence& s, size_t i, const Drafted& d, double t_fwd);
  void emit(Sequence& seq, std::span<const int32_t> tokens);
  // Gives every sequence at least one writable cell, preempting the newest active
  // sequences when the pool is out of blocks; drops preempted ones from `seqs`.
  void reserve_roots(std::vector<Sequence*>& seqs);
  void preempt(Sequence& seq);
  // One sequence's rows of the step's forward pass, per node of its drafted tree t (null /
  // -1 for nodes without a row), after logit bias, penalties and the grammar's mask.
  // `cut`: how t maps to the forwarded rows (null when nothing was cut).
  struct NodeRows {
    std::vector<const float*> logits;
    std::vector<const float*> hidden;
    std::vector<int32_t> argmax;
  };
  void read_rows(Sequence& s, const model::BatchSegment& seg, const tree::TokenTree& t, const GrammarStep* cut,
                 const GrammarStep& grammar, NodeRows& rows);
  // Prefix cache: the longest run of committed cells that a live sequence or a cached
  // prefix shares with `tokens` (at most n_max cells) and the pool blocks holding them.
  struct PrefixMatch {
    std::vector<int32_t> blocks;  // kv::KvCache::blocks_for(n_cells) of them
    int32_t n_cells = 0;
  };
  PrefixMatch match_prefix(const std::vector<int32_t>& tokens, int64_t n_max) const;
  void cache_prefix(const Sequence& seq);  // keeps a finishing sequence's committed cells
  bool evict_prefix();                     // drops the oldest cached prefix; false if none
  // Embedding to logits for every tree, pruning each sequence whose drafter asks for it
  // (Drafter::prune(), early_prune.h). Afterwards batch_ holds the rows that reached the
  // last layer, logits_/normed_ their outputs, and pruning_ what happened to sequence i.
  // Returns row-layers computed / n_layer.
  double forward_trees(std::span<Sequence* const> seqs, std::span<const tree::TokenTree> trees);
  // The forward both forward_trees and probe_step run: embeds batch_, runs the layers,
  // and after each layer of `cuts` (increasing) lets `cut(l, x)` write the surviving rows
  // into next_batch_ (and move their hidden states in x), which then becomes batch_;
  // final norm and LM head of the rows that reach the last layer into normed_/logits_.
  // Returns row-layers computed / n_layer.
  double run_rows(std::span<const int32_t> cuts, const std::function<void(int32_t, float*)>& cut);

  const model::Model& model_;
  EngineParams params_;
  model::ForwardContext ctx_;
  kv::KvCache kv_;
  std::vector<bool> slot_used_;
  std::vector<Sequence*> slot_seq_;  // the sequence holding each slot
  int64_t n_admitted_ = 0;
  struct CachedPrefix {
    std::vector<int32_t> tokens;  // one per cached cell
    std::vector<int32_t> blocks;  // retained in kv_ (the last one partly filled when the cells end mid-block)
  };
  std::vector<CachedPrefix> prefix_cache_;  // oldest first
  int64_t n_preemptions_ = 0;
  std::vector<int32_t> eog_ids_;
  BudgetPolicy* budget_policy_ = nullptr;
  SpecStats totals_;
  // Step buffers.
  model::Batch batch_;
  model::Batch next_batch_;
  core::AlignedBuffer<float> logits_;  // [rows, n_vocab]
  core::AlignedBuffer<float> normed_;  // [rows, n_embd]
  EarlyPruning pruning_;               // what forward_trees pruned, per sequence of the step
  std::vector<SeqStepReport> seq_reports_;
};

}  // namespace treespec::engine
