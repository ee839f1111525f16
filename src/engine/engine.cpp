#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/assert.h"
#include "core/log.h"
#include "core/timer.h"
#include "engine/grammar_step.h"
#include "engine/row_logits.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace treespec::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::eog: return "eog";
    case FinishReason::length: return "length";
    case FinishReason::context: return "context";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::stop: return "stop";
  }
  return "?";
}

nlohmann::json BudgetPolicy::stats_json() const { return nullptr; }

Sequence::Sequence(std::vector<int32_t> prompt, SequenceParams params, std::unique_ptr<drafters::Drafter> drafter)
    : prompt_(std::move(prompt)),
      context_(prompt_),
      params_(std::move(params)),
      drafter_(drafter ? std::move(drafter) : std::make_unique<drafters::NoneDrafter>()),
      rng_(params_.sampling.seed) {
  if (params_.grammar.grammar) gstate_ = grammar::State::initial(params_.grammar.grammar);
}

namespace {
// Checked before any buffer exists, so a bad or too large request allocates nothing.
const EngineParams& checked(const model::Model& model, const EngineParams& params) {
  if (params.n_threads < 1) throw InvalidArgument(fmt::format("thread count must be >= 1, got {}", params.n_threads));
  if (params.n_ctx < 1) throw InvalidArgument(fmt::format("context size must be >= 1, got {}", params.n_ctx));
  if (params.n_batch < 1) throw InvalidArgument(fmt::format("batch size must be >= 1, got {}", params.n_batch));
  if (params.n_slots < 1)
    throw InvalidArgument(fmt::format("sequence slot count must be >= 1, got {}", params.n_slots));
  if (params.n_kv_cells < 0)
    throw InvalidArgument(fmt::format("KV cache size must be >= 0 cells, got {}", params.n_kv_cells));
  if (params.n_kv_cells > 0 && params.n_kv_cells < params.n_ctx) {
    throw InvalidArgument(fmt::format("the KV cache pool ({} cells) is smaller than one sequence's context ({} cells)",
                                      params.n_kv_cells, params.n_ctx));
  }
  // Memory first: for a huge context "needs N bytes, M available" is the useful message.
  kv::KvCache::check_memory(engine_kv_shape(model, params));
  if (params.n_ctx > kMaxContext) {
    throw InvalidArgument(
        fmt::format("context size {} is larger than {} (RoPE takes positions as float, exact only up to "
                    "2^24)",
                    params.n_ctx, kMaxContext));
  }
  return params;
}
}  // namespace

Engine::Engine(const model::Model& model, const EngineParams& params)
    : model_(model),
      params_(checked(model, params)),
      ctx_(model, params.n_threads),
      kv_(engine_kv_shape(model, params)),
      slot_used_(static_cast<size_t>(params.n_slots), false),
      slot_seq_(static_cast<size_t>(params.n_slots), nullptr),
      eog_ids_(tokenizer::eog_ids(model.gguf(), model.hparams().n_vocab)) {}

Engine::~Engine() = default;

kv::KvShape engine_kv_shape(const model::Model& model, const EngineParams& params) {
  kv::KvShape shape = model.kv_shape(params.n_slots, params.n_ctx);
  shape.n_pool_cells = params.n_kv_cells;
  shape.type_k = params.type_k;
  shape.type_v = params.type_v;
  return shape;
}

int32_t Engine::free_slots() const {
  return static_cast<int32_t>(std::count(slot_used_.begin(), slot_used_.end(), false));
}

bool Engine::is_eog(int32_t tok) const { return std::find(eog_ids_.begin(), eog_ids_.end(), tok) != eog_ids_.end(); }

int32_t resolve_context_size(int32_t requested, int32_t n_ctx_train) {
  if (requested <= 0) return std::min(n_ctx_train > 0 ? n_ctx_train : 4096, 4096);
  if (n_ctx_train > 0 && requested > n_ctx_train) {
    TS_LOG_WARN("-c/--ctx-size {} is beyond the model's training context ({}): output past {} tokens may degrade",
                requested, n_ctx_train, n_ctx_train);
  }
  return requested;
}

Status Engine::add(Sequence& seq) {
  const auto& hp = model_.hparams();
  if (seq.prompt_.empty()) throw InvalidArgument("prompt is empty: nothing to condition on (add a BOS token)");
  for (size_t i = 0; i < seq.prompt_.size(); ++i) {
    if (seq.prompt_[i] < 0 || seq.prompt_[i] >= hp.n_vocab) {
      throw InvalidArgument(fmt::format("prompt token {} at index {} is outside the vocabulary (0..{})", seq.prompt_[i],
                                        i, hp.n_vocab - 1));
    }
  }
  if (static_cast<int64_t>(seq.prompt_.size()) > params_.n_ctx) {
    throw InvalidArgument(
        fmt::format("prompt has {} tokens but the context holds {} (raise -c)", seq.prompt_.size(), params_.n_ctx));
  }
  seq.params_.sampling.validate();
  if (seq.params_.grammar.mask && seq.params_.grammar.mask->n_vocab() != hp.n_vocab) {
    throw InvalidArgument(fmt::format("grammar is bound to a vocabulary of {} tokens but the model has {}",
                                      seq.params_.grammar.mask->n_vocab(), hp.n_vocab));
  }
  if ((seq.params_.grammar.mask == nullptr) != (seq.params_.grammar.grammar == nullptr)) {
    throw InvalidArgument("grammar: a constraint needs both its grammar and the vocabulary's token mask");
  }
  for (const sampling::LogitBias& b : seq.params_.sampling.logit_bias) {
    if (b.token >= hp.n_vocab) {
      throw InvalidArgument(
          fmt::format("logit_bias token {} is outside the vocabulary (0..{})", b.token, hp.n_vocab - 1));
    }
  }
  if (seq.params_.top_logprobs < 0)
    throw InvalidArgument(fmt::format("top_logprobs must be >= 0, got {}", seq.params_.top_logprobs));
  const bool resume = seq.preempted_;
  if (!resume) seq.stats_.n_prompt = static_cast<int64_t>(seq.prompt_.size());
  if (seq.params_.n_predict == 0) {
    seq.finish_ = FinishReason::length;
    return {};
  }
  int32_t slot = -1;
  for (int32_t i = 0; i < params_.n_slots; ++i) {
    if (!slot_used_[static_cast<size_t>(i)]) {
      slot = i;
      break;
    }
  }
  if (slot < 0) return {StatusCode::no_slot, "all sequence slots are busy"};
  // The tokens to prefill (all but the last, the first step's root) and that root.
  const std::vector<int32_t>& tokens = resume ? seq.context_ : seq.prompt_;
  const auto n_need = static_cast<int64_t>(tokens.size());
  // Cells of a prefix some sequence already computed (never the last token, the first
  // step's root); held while cached prefixes are evicted to make room.
  const PrefixMatch shared =
      params_.prefix_cache && seq.params().cache_prompt ? match_prefix(tokens, n_need - 1) : PrefixMatch{};
  kv_.retain(shared.blocks);
  const int32_t n_blocks = kv::KvCache::blocks_for(n_need) - shared.n_cells / kv::kBlockCells;
  while (n_blocks > kv_.n_free_blocks() && evict_prefix()) {
  }
  if (n_blocks > kv_.n_free_blocks()) {
    kv_.release(shared.blocks);
    return {StatusCode::kv_full, fmt::format("the KV cache pool has {} free cells; the prompt needs {}",
                                             static_cast<int64_t>(kv_.n_free_blocks()) * kv::kBlockCells,
                                             static_cast<int64_t>(n_blocks) * kv::kBlockCells)};
  }
  slot_used_[static_cast<size_t>(slot)] = true;
  slot_seq_[static_cast<size_t>(slot)] = &seq;
  seq.slot_ = slot;
  seq.preempted_ = false;
  seq.admitted_ = ++n_admitted_;
  kv_.clear(slot);
  const Status adopted = kv_.adopt_prefix(slot, shared.blocks, shared.n_cells);
  TREESPEC_ASSERT(adopted.ok(), "prefix adoption must fit (free blocks checked above)");
  kv_.release(shared.blocks);
  if (!resume) {
    seq.stats_.n_prompt_cached = shared.n_cells;
    totals_.n_prompt_cached += shared.n_cells;
  }
  seq.drafter_->begin(tokens);

  const double t0 = core::now_s();
  const auto n_pre = static_cast<int32_t>(tokens.size()) - 1;
  for (int32_t b = kv_.n_past(slot); b < n_pre; b += params_.n_batch) {
    const int32_t n = std::min(params_.n_batch, n_pre - b);
    batch_.clear();
    batch_.add_chain(slot, kv_.n_past(slot),
                     std::span<const int32_t>(tokens).subspan(static_cast<size_t>(b), static_cast<size_t>(n)));
    ctx_.reserve(n, params_.n_ctx);
    float* x = ctx_.x();
    model_.embed(batch_, x);
    Status st = model_.run_layers(ctx_, batch_, 0, model_.hparams().n_layer, x, kv_);
    TREESPEC_ASSERT(st.ok(), "prefill rows must fit (prompt length and free blocks checked above)");
    if (seq.drafter_->wants_prompt_hidden()) {
      normed_.reserve(static_cast<size_t>(n) * hp.n_embd, "normed hidden states");
      model_.final_norm(x, n, {}, normed_.data());
      seq.drafter_->observe_prompt(b, n, normed_.data());
    }
    std::vector<int32_t> chain(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) chain[static_cast<size_t>(i)] = i;
    st = kv_.commit(slot, chain);
    TREESPEC_ASSERT(st.ok(), "prefill commit must fit");
  }
  const double dt = core::now_s() - t0;
  seq.stats_.t_prompt += dt;
  totals_.t_prompt += dt;
  totals_.n_prompt += seq.stats_.n_prompt;
  return {};
}

void Engine::release(Sequence& seq, FinishReason reason) {
  if (seq.finish_ == FinishReason::none) seq.finish_ = reason;
  if (seq.slot_ >= 0) {
    if (params_.prefix_cache && seq.params().cache_prompt) cache_prefix(seq);
    kv_.clear(seq.slot_);  // its blocks go back to the pool now (cached ones stay)
    slot_used_[static_cast<size_t>(seq.slot_)] = false;
    slot_seq_[static_cast<size_t>(seq.slot_)] = nullptr;
    seq.slot_ = -1;
  }
}

void Engine::preempt(Sequence& seq) {
  TREESPEC_ASSERT(seq.slot_ >= 0 && !seq.finished(), "preempt: the sequence is not active");
  kv_.clear(seq.slot_);
  slot_used_[static_cast<size_t>(seq.slot_)] = false;
  slot_seq_[static_cast<size_t>(seq.slot_)] = nullptr;
  seq.slot_ = -1;
  seq.preempted_ = true;
  ++n_preemptions_;
}

Engine::PrefixMatch Engine::match_prefix(const std::vector<int32_t>& tokens, int64_t n_max) const {
  // Leading cells of `have` (n_committed of them computed) that `tokens` starts with.
  auto common_cells = [&](const std::vector<int32_t>& have, int64_t n_committed) {
    const int64_t n =
        std::min({n_max, n_committed, static_cast<int64_t>(have.size()), static_cast<int64_t>(tokens.size())});
    int64_t m = 0;
    while (m < n && have[static_cast<size_t>(m)] == tokens[static_cast<size_t>(m)]) ++m;
    return static_cast<int32_t>(m);
  };
  PrefixMatch best;
  int32_t best_slot = -1;
  const CachedPrefix* best_cached = nullptr;
  for (size_t i = 0; i < slot_seq_.size(); ++i) {
    const Sequence* o = slot_seq_[i];
    if (o == nullptr) continue;
    const int32_t n = common_cells(o->context_, kv_.n_past(static_cast<int32_t>(i)));
    if (n > best.n_cells) {
      best.n_cells = n;
      best_slot = static_cast<int32_t>(i);
    }
  }
  for (const CachedPrefix& c : prefix_cache_) {
    const int32_t n = common_cells(c.tokens, static_cast<int64_t>(c.tokens.size()));
    if (n > best.n_cells) {
      best.n_cells = n;
      best_cached = &c;
      best_slot = -1;
    }
  }
  if (best_cached != nullptr) {
    best.blocks.assign(best_cached->blocks.begin(),
                       best_cached->blocks.begin() + kv::KvCache::blocks_for(best.n_cells));
  } else if (best_slot >= 0) {
    best.blocks = kv_.prefix_blocks(best_slot, best.n_cells);
  }
  return best;
}

void Engine::cache_prefix(const Sequence& seq) {
  constexpr size_t kMaxCachedPrefixes = 64;
  // The committed cells of tokens in the context: a step that ends the sequence (-n, an
  // end-of-generation token) can commit accepted tokens it never emits, whose cells
  // have no token to match against.
  const auto n =
      static_cast<int32_t>(std::min<int64_t>(kv_.n_past(seq.slot_), static_cast<int64_t>(seq.context_.size())));
  if (n == 0) return;
  CachedPrefix c;
  c.blocks = kv_.prefix_blocks(seq.slot_, n);
  c.tokens.assign(seq.context_.begin(), seq.context_.begin() + n);
  // An entry this one extends is redundant (this one holds the same cells).
  std::erase_if(prefix_cache_, [&](CachedPrefix& o) {
    const bool covered =
        o.tokens.size() <= c.tokens.size() && std::equal(o.tokens.begin(), o.tokens.end(), c.tokens.begin());
    if (covered) kv_.release(o.blocks);
    return covered;
  });
  kv_.retain(c.blocks);
  prefix_cache_.push_back(std::move(c));
  if (prefix_cache_.size() > kMaxCachedPrefixes) evict_prefix();
}

bool Engine::evict_prefix() {
  if (prefix_cache_.empty()) return false;
  kv_.release(prefix_cache_.front().blocks);
  prefix_cache_.erase(prefix_cache_.begin());
  return true;
}

void Engine::reserve_roots(std::vector<Sequence*>& seqs) {
  for (Sequence* s : seqs) {
    if (s->slot_ < 0) continue;  // preempted for an earlier sequence of this step
    while (kv_.reserve(s->slot_, 1).code() == StatusCode::kv_full) {
      if (evict_prefix()) continue;  // cached prefixes go before any running sequence
      // The newest active sequence gives its blocks back (vLLM's recompute preemption).
      Sequence* victim = nullptr;
      for (Sequence* o : slot_seq_) {
        if (o != nullptr && (victim == nullptr || o->admitted_ > victim->admitted_)) victim = o;
      }
      TREESPEC_ASSERT(victim != nullptr, "preemption: some sequence holds the pool's blocks");
      preempt(*victim);
      if (victim == s) break;
    }
  }
  std::erase_if(seqs, [](const Sequence* s) { return s->slot_ < 0; });
  // Room for this step's trees: cached prefixes give way to a few blocks per sequence.
  while (kv_.n_free_blocks() < 4 * static_cast<int32_t>(seqs.size()) && evict_prefix()) {
  }
}

void Engine::emit(Sequence& seq, std::span<const int32_t> tokens) {
  const size_t before = seq.generated_.size();
  for (int32_t t : tokens) {
    if (!seq.params_.ignore_eog && is_eog(t)) {
      seq.finish_ = FinishReason::eog;
      break;
    }
    seq.generated_.push_back(t);
    seq.context_.push_back(t);
    if (seq.params_.grammar.mask) seq.gstate_ = seq.params_.grammar.mask->advance(seq.gstate_, t);
    if (seq.params_.n_predict >= 0 && static_cast<int64_t>(seq.generated_.size()) >= seq.params_.n_predict) {
      seq.finish_ = FinishReason::length;
      break;
    }
  }
  const size_t added = seq.generated_.size() - before;
  seq.stats_.n_generated += static_cast<int64_t>(added);
  totals_.n_generated += static_cast<int64_t>(added);
  if (added > 0 && seq.on_tokens) {
    seq.on_tokens(std::span<const int32_t>(seq.generated_).subspan(before, added));
  }
}

double Engine::forward_trees(std::span<Sequence* const> seqs, std::span<const tree::TokenTree> trees) {
  std::vector<const drafters::PruneSpec*> specs(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) specs[i] = &seqs[i]->drafter_->prune();
  const std::vector<int32_t> layers = pruning_.plan(specs, trees, model_.hparams().n_layer);
  batch_.clear();
  for (size_t i = 0; i < seqs.size(); ++i) batch_.add_tree(seqs[i]->slot_, kv_.n_past(seqs[i]->slot_), trees[i]);
  return run_rows(layers, [&](int32_t l, float* x) {
    pruning_.prune_at(l, model_, &ctx_.pool(), trees, batch_, x, next_batch_);
  });
}

double Engine::run_rows(std::span<const int32_t> cuts, const std::function<void(int32_t, float*)>& cut) {
  const auto& hp = model_.hparams();
  const int32_t L = hp.n_layer;
  ctx_.reserve(batch_.n_rows(), params_.n_ctx);
  float* x = ctx_.x();
  model_.embed(batch_, x);
  double row_layers = 0.0;
  int32_t cur = 0;
  auto run_to = [&](int32_t l) {
    Status st = model_.run_layers(ctx_, batch_, cur, l, x, kv_);
    TREESPEC_ASSERT(st.ok(), "tree rows must fit (budget clamped to free cells)");
    row_layers += static_cast<double>(batch_.n_rows()) * (l - cur);
    cur = l;
  };
  for (int32_t l : cuts) {
    run_to(l);
    cut(l, x);
    std::swap(batch_, next_batch_);
  }
  run_to(L);
  const int32_t n_out = batch_.n_rows();
  logits_.reserve(static_cast<size_t>(n_out) * hp.n_vocab, "logits");
  normed_.reserve(static_cast<size_t>(n_out) * hp.n_embd, "normed hidden states");
  model_.final_norm(x, n_out, {}, normed_.data());
  model_.lm_head(ctx_, normed_.data(), n_out, logits_.data());
  return row_layers / std::max(1, L);
}

void Engine::read_rows(Sequence& s, const model::BatchSegment& seg, const tree::TokenTree& t, const GrammarStep* cut,
                       const GrammarStep& grammar, NodeRows& rows) {
  const auto& hp = model_.hparams();
  const auto n = static_cast<size_t>(t.size());
  rows.logits.assign(n, nullptr);
  rows.hidden.assign(n, nullptr);
  rows.argmax.assign(n, -1);
  const bool constrained = s.params_.grammar.mask != nullptr;
  // Greedy rows are masked only when their argmax is refused, unless logprobs need the whole row.
  const bool lazy = s.params_.sampling.greedy() && !s.params_.wants_logprobs();
  std::vector<int32_t> path;
  for (int32_t r = seg.row_begin; r < seg.row_begin + seg.n_rows; ++r) {
    const int32_t fnode = batch_.node[static_cast<size_t>(r)];
    const int32_t node = cut ? cut->drafted_of(fnode) : fnode;
    float* row = logits_.data() + static_cast<size_t>(r) * hp.n_vocab;
    // Logit bias, then penalties with the row's own history (row_logits.h), then the grammar.
    process_tree_row(row, hp.n_vocab, s.params_.sampling, s.context_, t, node, path);
    if (constrained) grammar.mask_row(node, row, lazy);
    const auto k = static_cast<size_t>(node);
    rows.logits[k] = row;
    rows.hidden[k] = normed_.data() + static_cast<size_t>(r) * hp.n_embd;
    rows.argmax[k] = sampling::argmax(row, hp.n_vocab);
  }
}

std::vector<Sequence*> Engine::runnable(std::span<Sequence* const> seqs_in) {
  std::vector<Sequence*> seqs;
  for (Sequence* s : seqs_in) {
    if (s->finished()) continue;
    TREESPEC_ASSERT(s->slot_ >= 0, "step: sequence was not added to the engine");
    if (s->cancel_requested_) {
      release(*s, FinishReason::cancelled);
      continue;
    }
    if (kv_.n_free(s->slot_) < 1) {
      release(*s, FinishReason::context);
      continue;
    }
    seqs.push_back(s);
  }
  reserve_roots(seqs);
  return seqs;
}

void Engine::draft_trees(std::span<Sequence* const> seqs, Drafted& d) {
  const auto& hp = model_.hparams();
  const size_t n = seqs.size();
  d.budgets.resize(n);
  for (size_t i = 0; i < n; ++i) {
    // max_nodes() == 0 means "no limit": the free context bounds it (clamped below).
    const int32_t mx = seqs[i]->drafter_->max_nodes();
    d.budgets[i] = mx > 0 ? mx : kv_.n_available(seqs[i]->slot_);
  }
  if (budget_policy_) budget_policy_->plan(seqs, d.budgets);
  d.trees.assign(n, tree::TokenTree());
  d.t_draft.assign(n, 0.0);
  d.gsteps.clear();
  d.gsteps.resize(n);
  d.cut.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *seqs[i];
    const double t0 = core::now_s();
    drafters::DraftInput in;
    in.slot = s.slot_;
    in.context = s.context_;
    in.n_past = kv_.n_past(s.slot_);
    // Within the sequence's context and what the pool can still give it; the cells are
    // taken now, so the sequences after it see what is left.
    in.budget = std::clamp(d.budgets[i], 1, kv_.n_available(s.slot_));
    d.budgets[i] = in.budget;
    const Status reserved = kv_.reserve(s.slot_, in.budget);
    TREESPEC_ASSERT(reserved.ok(), "tree budget clamped to the available cells");
    in.min_value = budget_policy_ ? budget_policy_->min_node_value() : 0.0;
    in.sampling = &s.params_.sampling;
    in.coupled = s.params_.mode == verify::Mode::coupled && !s.params_.sampling.greedy();
    tree::TokenTree t = s.drafter_->propose(in);
    TREESPEC_ASSERT(!t.empty() && t.token(0) == s.context_.back(), "drafter must root its tree at the last token");
    if (t.size() > in.budget) t = t.prefix(in.budget);
    for (int32_t k = 0; k < t.size(); ++k) {
      TREESPEC_ASSERT(t.token(k) >= 0 && t.token(k) < hp.n_vocab, "drafter proposed a token outside the vocabulary");
    }
    if (s.params_.grammar.mask && d.gsteps[i].cut(t, s.params_.grammar, s.gstate_, s.params_.ignore_eog)) {
      d.cut[i] = 1;
      t = d.gsteps[i].forwarded();
    }
    d.trees[i] = std::move(t);
    d.t_draft[i] = core::now_s() - t0;
  }
}

Engine::SeqTimes Engine::verify_and_commit(Sequence& s, size_t i, const Drafted& d, double t_fwd) {
  const auto& hp = model_.hparams();
  // Verification sees the drafted tree (cut nodes have no logits); KV rows are the
  // forwarded tree's.
  const GrammarStep* cut = d.cut[i] ? &d.gsteps[i] : nullptr;
  const tree::TokenTree& t = cut ? cut->drafted() : d.trees[i];
  const int32_t n_fwd = d.trees[i].size();
  const auto& seg = batch_.segs[i];
  const double t0 = core::now_s();
  NodeRows rows;
  read_rows(s, seg, t, cut, d.gsteps[i], rows);
  const verify::VerifyResult res =
      verify::verify(s.params_.mode, t, rows.logits, hp.n_vocab, s.params_.sampling, s.params_.typical, s.rng_,
                     s.drafter_->draft_distributions(), static_cast<int64_t>(s.context_.size()));
  const double t1 = core::now_s();
  const Status st = kv_.commit(s.slot_, cut ? cut->forwarded_path(res.path) : res.path);
  TREESPEC_ASSERT(st.ok(), "commit of verified rows must fit");
  std::vector<int32_t> out;
  out.reserve(res.path.size());
  for (size_t k = 1; k < res.path.size(); ++k) out.push_back(t.token(res.path[k]));
  out.push_back(res.bonus);
  const bool logprobs = s.params_.wants_logprobs();
  if (logprobs) append_logprobs(s.logprobs_, rows.logits, res.path, out, hp.n_vocab, s.params_.top_logprobs);
  emit(s, out);
  if (logprobs) s.logprobs_.resize(s.generated_.size());  // what emit did not take (EOG, -n)
  if (!s.finished()) {
    drafters::StepFeedback fb{t, res, rows.argmax, rows.logits, rows.hidden, s.context_};
    s.drafter_->observe(fb);
  }
  const double t2 = core::now_s();
  int32_t max_cand_depth = 0;
  for (int32_t k = 1; k < t.size(); ++k) {
    if (t.is_candidate(k)) max_cand_depth = std::max(max_cand_depth, t.depth(k));
  }
  s.stats_.record_step(t.size(), max_cand_depth, t.n_candidates(), res.n_accepted());
  totals_.record_step(t.size(), max_cand_depth, t.n_candidates(), res.n_accepted());
  if (pruning_.layer(i) > 0) {
    s.stats_.record_prune(n_fwd, n_fwd - seg.n_rows, pruning_.layer(i), hp.n_layer);
    totals_.record_prune(n_fwd, n_fwd - seg.n_rows, pruning_.layer(i), hp.n_layer);
  }
  s.stats_.t_draft += d.t_draft[i];
  s.stats_.t_forward += t_fwd;
  s.stats_.n_forwards += 1;
  s.stats_.t_verify += t1 - t0;
  s.stats_.t_commit += t2 - t1;
  totals_.t_draft += d.t_draft[i];
  SeqStepReport& rep = seq_reports_[i];
  rep.seq = &s;
  rep.budget = d.budgets[i];
  rep.n_nodes = n_fwd;
  rep.n_late = seg.n_rows;
  rep.prune_layer = pruning_.layer(i);
  rep.survived = pruning_.survived(i);
  rep.n_accepted = res.n_accepted();
  if (s.finished()) {
    release(s, s.finish_);
  } else if (kv_.n_free(s.slot_) < 1) {
    release(s, FinishReason::context);
  }
  return {t1 - t0, t2 - t1};
}

void Engine::step(std::span<Sequence* const> seqs_in) {
  const double t_step0 = core::now_s();
  const std::vector<Sequence*> seqs = runnable(seqs_in);
  if (seqs.empty()) return;
  Drafted d;
  draft_trees(seqs, d);

  // One forward pass for every tree (early pruning inside, per sequence).
  const double t_fwd0 = core::now_s();
  int32_t n_rows = 0;
  for (const auto& t : d.trees) n_rows += t.size();
  const double rows_eff = forward_trees(seqs, d.trees);
  const int32_t n_rows_late = batch_.n_rows();
  const double t_fwd = core::now_s() - t_fwd0;
  double mean_ctx = 0.0;
  for (Sequence* s : seqs) mean_ctx += static_cast<double>(kv_.n_past(s->slot_));
  mean_ctx /= static_cast<double>(seqs.size());

  // Verify, commit, observe.
  seq_reports_.assign(seqs.size(), SeqStepReport{});
  double t_verify_total = 0.0, t_commit_total = 0.0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqTimes tm = verify_and_commit(*seqs[i], i, d, t_fwd);
    t_verify_total += tm.verify;
    t_commit_total += tm.commit;
  }
  totals_.n_forwards += 1;
  totals_.t_forward += t_fwd;
  totals_.t_verify += t_verify_total;
  totals_.t_commit += t_commit_total;
  if (budget_policy_) {
    StepReport r;
    r.n_seqs = static_cast<int32_t>(seqs.size());
    r.n_rows = n_rows;
    r.n_rows_late = n_rows_late;
    r.rows_eff = rows_eff;
    r.mean_ctx = mean_ctx;
    r.t_forward = t_fwd;
    r.t_step = core::now_s() - t_step0;
    r.seqs = seq_reports_;
    budget_policy_->observe(r);
  }
}

double Engine::probe_step(int32_t n_seqs, int32_t n_nodes, int32_t n_ctx, int32_t prune_layer, int32_t n_late) {
  const auto& hp = model_.hparams();
  if (n_seqs < 1 || n_nodes < 1 || n_ctx < 0) return -1.0;
  if (n_ctx + n_nodes > kv_.n_cells()) return -1.0;
  std::vector<int32_t> slots;
  for (int32_t i = 0; i < params_.n_slots && static_cast<int32_t>(slots.size()) < n_seqs; ++i) {
    if (!slot_used_[static_cast<size_t>(i)]) slots.push_back(i);
  }
  if (static_cast<int32_t>(slots.size()) < n_seqs) return -1.0;
  // A binary-heap-shaped tree (depth ~ log2 n, like a bushy draft tree); arbitrary tokens.
  tree::TokenTree t(1 % hp.n_vocab);
  for (int32_t i = 1; i < n_nodes; ++i)
    t.add(static_cast<int32_t>((static_cast<int64_t>(i) * 7919) % hp.n_vocab), (i - 1) / 2);
  // The committed prefix: zeroed cells (never garbage: uninitialised floats could be
  // denormals and skew the timing), then n_past = n_ctx without computing anything.
  std::vector<int32_t> chain(static_cast<size_t>(n_ctx));
  for (int32_t i = 0; i < n_ctx; ++i) chain[static_cast<size_t>(i)] = i;
  for (int32_t s : slots) {
    kv_.clear(s);
    if (!kv_.reserve(s, n_ctx + n_nodes).ok()) {
      for (int32_t r : slots) kv_.clear(r);
      return -1.0;  // the pool cannot hold the probe
    }
    kv_.zero_cells(s);
    Status st = kv_.commit(s, chain);
    TREESPEC_ASSERT(st.ok(), "probe: prefix fits (checked)");
  }
  const int32_t L = hp.n_layer;
  const bool prune = prune_layer > 0 && prune_layer < L && n_late >= 1 && n_late < n_nodes;
  std::vector<int32_t> late(static_cast<size_t>(prune ? n_late : 0));
  for (int32_t i = 0; i < static_cast<int32_t>(late.size()); ++i)
    late[static_cast<size_t>(i)] = i;  // a prefix: ancestor-closed
  const double t0 = core::now_s();
  batch_.clear();
  for (int32_t s : slots) batch_.add_tree(s, n_ctx, t);
  const int32_t cuts[] = {prune_layer};
  run_rows(std::span<const int32_t>(cuts, prune ? 1 : 0), [&](int32_t, float* x) {
    next_batch_.clear();
    for (int32_t s : slots) next_batch_.add_tree_rows(s, n_ctx, t, late);
    const int64_t E = hp.n_embd;
    for (int32_t k = 0; k < n_seqs; ++k) {
      for (int32_t i = 0; i < n_late; ++i) {
        std::memmove(x + (static_cast<int64_t>(k) * n_late + i) * E, x + (static_cast<int64_t>(k) * n_nodes + i) * E,
                     static_cast<size_t>(E) * sizeof(float));
      }
    }
  });
  const double dt = core::now_s() - t0;
  for (int32_t s : slots) kv_.clear(s);
  batch_.clear();
  return dt;
}

Status Engine::generate(Sequence& seq) {
  if (Status st = add(seq); !st.ok()) return st;
  Sequence* one[] = {&seq};
  while (!seq.finished()) step(one);
  return {};
}

}  // namespace treespec::engine
