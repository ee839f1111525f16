#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/assert.h"
#include "core/timer.h"
#include "gguf/gguf.h"

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

Sequence::Sequence(std::vector<int32_t> prompt, SequenceParams params, std::unique_ptr<drafters::Drafter> drafter)
    : prompt_(std::move(prompt)),
      context_(prompt_),
      params_(params),
      drafter_(drafter ? std::move(drafter) : std::make_unique<drafters::NoneDrafter>()),
      rng_(params.sampling.seed) {}

namespace {
std::vector<int32_t> eog_from_gguf(const gguf::GgufFile& f, int32_t n_vocab) {
  std::vector<int32_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = f.get_int(key, -1);
    if (id >= 0 && id < n_vocab && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}
}  // namespace

namespace {
// Checked before any buffer exists, so a bad or too large request allocates nothing.
const EngineParams& checked(const model::Model& model, const EngineParams& params) {
  if (params.n_threads < 1) throw InvalidArgument(fmt::format("thread count must be >= 1, got {}", params.n_threads));
  if (params.n_ctx < 1) throw InvalidArgument(fmt::format("context size must be >= 1, got {}", params.n_ctx));
  if (params.n_batch < 1) throw InvalidArgument(fmt::format("batch size must be >= 1, got {}", params.n_batch));
  if (params.n_slots < 1) throw InvalidArgument(fmt::format("sequence slot count must be >= 1, got {}", params.n_slots));
  // Memory first: for a huge context "needs N bytes, M available" is the useful message.
  kv::KvCache::check_memory(model.kv_shape(params.n_slots, params.n_ctx));
  if (params.n_ctx > kMaxContext) {
    throw InvalidArgument(fmt::format("context size {} is larger than {} (RoPE takes positions as float, exact only up to "
                                      "2^24)", params.n_ctx, kMaxContext));
  }
  return params;
}
}  // namespace

Engine::Engine(const model::Model& model, const EngineParams& params)
    : model_(model),
      params_(checked(model, params)),
      ctx_(model, params.n_threads),
      kv_(model.kv_shape(params.n_slots, params.n_ctx)),
      slot_used_(static_cast<size_t>(params.n_slots), false),
      eog_ids_(eog_from_gguf(model.gguf(), model.hparams().n_vocab)) {}

Engine::~Engine() = default;

int32_t Engine::free_slots() const {
  return static_cast<int32_t>(std::count(slot_used_.begin(), slot_used_.end(), false));
}

bool Engine::is_eog(int32_t tok) const { return std::find(eog_ids_.begin(), eog_ids_.end(), tok) != eog_ids_.end(); }

Status Engine::add(Sequence& seq) {
  const auto& hp = model_.hparams();
  if (seq.prompt_.empty()) throw InvalidArgument("prompt is empty: nothing to condition on (add a BOS token)");
  for (size_t i = 0; i < seq.prompt_.size(); ++i) {
    if (seq.prompt_[i] < 0 || seq.prompt_[i] >= hp.n_vocab) {
      throw InvalidArgument(fmt::format("prompt token {} at index {} is outside the vocabulary (0..{})", seq.prompt_[i], i, hp.n_vocab - 1));
    }
  }
  if (static_cast<int64_t>(seq.prompt_.size()) > params_.n_ctx) {
    throw InvalidArgument(fmt::format("prompt has {} tokens but the context holds {} (raise -c)", seq.prompt_.size(), params_.n_ctx));
  }
  seq.params_.sampling.validate();
  seq.stats_.n_prompt = static_cast<int64_t>(seq.prompt_.size());
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
  slot_used_[static_cast<size_t>(slot)] = true;
  seq.slot_ = slot;
  kv_.clear(slot);
  seq.drafter_->begin(seq.prompt_);

  // Prefill everything but the last prompt token, which is the first step's root.
  const double t0 = core::now_s();
  const auto n_pre = static_cast<int32_t>(seq.prompt_.size()) - 1;
  for (int32_t b = 0; b < n_pre; b += params_.n_batch) {
    const int32_t n = std::min(params_.n_batch, n_pre - b);
    batch_.clear();
    batch_.add_chain(slot, kv_.n_past(slot), std::span<const int32_t>(seq.prompt_).subspan(static_cast<size_t>(b), static_cast<size_t>(n)));
    ctx_.reserve(n, params_.n_ctx);
    float* x = ctx_.x();
    model_.embed(batch_, x);
    Status st = model_.run_layers(ctx_, batch_, 0, model_.hparams().n_layer, x, kv_);
    TREESPEC_ASSERT(st.ok(), "prefill rows must fit (prompt length checked above)");
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
    slot_used_[static_cast<size_t>(seq.slot_)] = false;
    seq.slot_ = -1;
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

void Engine::step(std::span<Sequence* const> seqs_in) {
  const auto& hp = model_.hparams();
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
  if (seqs.empty()) return;

  // Draft.
  std::vector<int32_t> budgets(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    // max_nodes() == 0 means "no limit": the free context bounds it (clamped below).
    const int32_t mx = seqs[i]->drafter_->max_nodes();
    budgets[i] = mx > 0 ? mx : kv_.n_free(seqs[i]->slot_);
  }
  if (budget_policy_) budget_policy_->plan(seqs, budgets);
  std::vector<tree::TokenTree> trees(seqs.size());
  std::vector<double> t_draft(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const double t0 = core::now_s();
    drafters::DraftInput in;
    in.slot = s.slot_;
    in.context = s.context_;
    in.n_past = kv_.n_past(s.slot_);
    in.budget = std::clamp(budgets[i], 1, kv_.n_free(s.slot_));
    in.sampling = &s.params_.sampling;
    tree::TokenTree t = s.drafter_->propose(in);
    TREESPEC_ASSERT(!t.empty() && t.token(0) == s.context_.back(), "drafter must root its tree at the last token");
    if (t.size() > in.budget) {  // a topological prefix is ancestor-closed
      std::vector<int32_t> keep(static_cast<size_t>(in.budget));
      for (int32_t k = 0; k < in.budget; ++k) keep[static_cast<size_t>(k)] = k;
      t = t.subtree(keep);
    }
    for (int32_t k = 0; k < t.size(); ++k) {
      TREESPEC_ASSERT(t.token(k) >= 0 && t.token(k) < hp.n_vocab, "drafter proposed a token outside the vocabulary");
    }
    trees[i] = std::move(t);
    t_draft[i] = core::now_s() - t0;
  }

  // One forward pass for every tree.
  const double t_fwd0 = core::now_s();
  batch_.clear();
  for (size_t i = 0; i < seqs.size(); ++i) batch_.add_tree(seqs[i]->slot_, kv_.n_past(seqs[i]->slot_), trees[i]);
  const int32_t n_rows = batch_.n_rows();
  ctx_.reserve(n_rows, params_.n_ctx);
  logits_.reserve(static_cast<size_t>(n_rows) * hp.n_vocab, "logits");
  normed_.reserve(static_cast<size_t>(n_rows) * hp.n_embd, "normed hidden states");
  float* x = ctx_.x();
  model_.embed(batch_, x);
  Status st = model_.run_layers(ctx_, batch_, 0, hp.n_layer, x, kv_);
  TREESPEC_ASSERT(st.ok(), "tree rows must fit (budget clamped to free cells)");
  model_.final_norm(x, n_rows, {}, normed_.data());
  model_.lm_head(ctx_, normed_.data(), n_rows, logits_.data());
  const double t_fwd = core::now_s() - t_fwd0;
  double mean_ctx = 0.0;
  for (Sequence* s : seqs) mean_ctx += static_cast<double>(kv_.n_past(s->slot_));
  mean_ctx /= static_cast<double>(seqs.size());

  // Verify, commit, observe.
  double t_verify_total = 0.0, t_commit_total = 0.0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const tree::TokenTree& t = trees[i];
    const auto& seg = batch_.segs[i];
    const double t0 = core::now_s();
    std::vector<const float*> node_logits(static_cast<size_t>(t.size()), nullptr);
    std::vector<const float*> node_hidden(static_cast<size_t>(t.size()), nullptr);
    std::vector<int32_t> node_argmax(static_cast<size_t>(t.size()), -1);
    for (int32_t r = seg.row_begin; r < seg.row_begin + seg.n_rows; ++r) {
      const auto node = static_cast<size_t>(batch_.node[static_cast<size_t>(r)]);
      node_logits[node] = logits_.data() + static_cast<size_t>(r) * hp.n_vocab;
      node_hidden[node] = normed_.data() + static_cast<size_t>(r) * hp.n_embd;
      node_argmax[node] = sampling::argmax(node_logits[node], hp.n_vocab);
    }
    const verify::VerifyResult res = verify::verify(s.params_.mode, t, node_logits, hp.n_vocab, s.params_.sampling,
                                                    s.params_.typical, s.rng_, s.drafter_->draft_distributions());
    const double t1 = core::now_s();
    st = kv_.commit(s.slot_, res.path);
    TREESPEC_ASSERT(st.ok(), "commit of verified rows must fit");
    std::vector<int32_t> out;
    out.reserve(res.path.size());
    for (size_t k = 1; k < res.path.size(); ++k) out.push_back(t.token(res.path[k]));
    out.push_back(res.bonus);
    emit(s, out);
    if (!s.finished()) {
      drafters::StepFeedback fb{t, res, node_argmax, node_logits, node_hidden, s.context_};
      s.drafter_->observe(fb);
    }
    const double t2 = core::now_s();
    int32_t max_cand_depth = 0;
    for (int32_t k = 1; k < t.size(); ++k) {
      if (t.is_candidate(k)) max_cand_depth = std::max(max_cand_depth, t.depth(k));
    }
    s.stats_.record_step(t.size(), max_cand_depth, t.n_candidates(), res.n_accepted());
    s.stats_.t_draft += t_draft[i];
    s.stats_.t_forward += t_fwd;
    s.stats_.n_forwards += 1;
    s.stats_.t_verify += t1 - t0;
    s.stats_.t_commit += t2 - t1;
    totals_.record_step(t.size(), max_cand_depth, t.n_candidates(), res.n_accepted());
    totals_.t_draft += t_draft[i];
    t_verify_total += t1 - t0;
    t_commit_total += t2 - t1;
    if (s.finished()) {
      release(s, s.finish_);
    } else if (kv_.n_free(s.slot_) < 1) {
      release(s, FinishReason::context);
    }
  }
  totals_.n_forwards += 1;
  totals_.t_forward += t_fwd;
  totals_.t_verify += t_verify_total;
  totals_.t_commit += t_commit_total;
  if (budget_policy_) budget_policy_->observe_step(static_cast<int32_t>(seqs.size()), n_rows, mean_ctx, t_fwd);
}

Status Engine::generate(Sequence& seq) {
  if (Status st = add(seq); !st.ok()) return st;
  Sequence* one[] = {&seq};
  while (!seq.finished()) step(one);
  return {};
}

}  // namespace treespec::engine
