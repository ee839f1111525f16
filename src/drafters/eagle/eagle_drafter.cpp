#include "drafters/eagle/eagle_drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/assert.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::drafters {

void EagleParams::validate() const {
  if (depth < 1 || depth > 64) throw InvalidArgument(fmt::format("--eagle-depth must be in 1..64, got {}", depth));
  if (width < 1 || width > 64) throw InvalidArgument(fmt::format("--eagle-width must be in 1..64, got {}", width));
  if (top_k < 1 || top_k > 16) throw InvalidArgument(fmt::format("--eagle-topk must be in 1..16, got {}", top_k));
  if (n_nodes < 1 || n_nodes > 1024)
    throw InvalidArgument(fmt::format("--eagle-nodes must be in 1..1024, got {}", n_nodes));
}

namespace {
constexpr int32_t kEagleInitialCells = 256;
constexpr double kCurveAlpha = 0.05;  // weight of a proposal in the per-size average

// E_n of a chain whose depth-d node is accepted with probability prod_{i <= d} a_i, a_i the
// held-out top-1 of depth i (the last one repeated; 0.5 without a table).
std::vector<double> chain_prior(const std::vector<float>& top1, int32_t n_max) {
  std::vector<double> e(static_cast<size_t>(std::max(1, n_max)), 0.0);
  double path = 1.0;
  for (size_t n = 1; n < e.size(); ++n) {
    const double a = top1.empty() ? 0.5 : static_cast<double>(top1[std::min(n - 1, top1.size() - 1)]);
    path *= a;
    e[n] = e[n - 1] + path;
  }
  return e;
}

}  // namespace

EagleDrafter::EagleDrafter(std::shared_ptr<const EagleLayer> layer, const model::Model& target, const EagleParams& p,
                           core::ThreadPool* pool, uint64_t seed)
    : layer_(std::move(layer)),
      target_(target),
      lm_(layer_->model()),
      p_(p),
      // Its own stream: the verifier draws from the request's seed.
      rng_(seed ^ 0x6a09e667f3bcc909ULL),
      ctx_(lm_, core::pool_or_own(pool, own_pool_)),
      tctx_(target, ctx_.pool()),
      kv_(std::make_unique<kv::KvCache>(lm_.kv_shape(1, kEagleInitialCells))) {
  p_.validate();
  prior_ = chain_prior(layer_->info().calib_top1, std::max(p_.n_nodes, p_.depth + 1));
}

void EagleDrafter::begin(std::span<const int32_t> /*prompt*/) {
  kv_->truncate(0, 0);
  c0_ = -1;
  pend_.clear();
  ran_chain_ = 0;
  dtree_ = tree::TokenTree();
  nodes_.clear();
}

int64_t EagleDrafter::known_pairs() const {
  const auto E = static_cast<size_t>(lm_.hparams().n_embd);
  return kv_->n_past(0) + ran_chain_ + static_cast<int64_t>(pend_.size() / E);
}

void EagleDrafter::reset(int64_t c0) {
  kv_->truncate(0, 0);
  pend_.clear();
  n_resets_ += c0_ >= 0 ? 1 : 0;  // not the first start
  c0_ = c0;
  ran_chain_ = 0;
}

void EagleDrafter::append_features(int64_t first, int32_t n, std::span<const float* const> rows) {
  if (c0_ < 0 || c0_ + known_pairs() != first) reset(first);
  const auto E = static_cast<size_t>(lm_.hparams().n_embd);
  for (int32_t i = 0; i < n; ++i)
    pend_.insert(pend_.end(), rows[static_cast<size_t>(i)], rows[static_cast<size_t>(i)] + E);
}

void EagleDrafter::observe_prompt(int32_t first, int32_t n, const float* hidden) {
  const auto E = static_cast<size_t>(lm_.hparams().n_embd);
  std::vector<const float*> rows(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = hidden + static_cast<size_t>(i) * E;
  append_features(first, n, rows);
}

void EagleDrafter::observe(const StepFeedback& fb) {
  // The root sits before the accepted tokens and the bonus token in the new context.
  const auto& path = fb.result.path;
  const int64_t root_pos = static_cast<int64_t>(fb.context.size()) - static_cast<int64_t>(path.size()) - 1;
  if (root_pos < 0 || fb.context[static_cast<size_t>(root_pos)] != fb.tree.token(0)) {
    reset(-1);  // not the step this context came from (the sequence ended early): start over
    return;
  }
  std::vector<const float*> rows;
  for (int32_t node : path) {
    const float* h =
        static_cast<size_t>(node) < fb.node_hidden.size() ? fb.node_hidden[static_cast<size_t>(node)] : nullptr;
    if (h == nullptr) break;
    rows.push_back(h);
  }
  append_features(root_pos, static_cast<int32_t>(rows.size()), rows);
}

void EagleDrafter::commit_chain() {
  if (ran_chain_ <= 0) return;
  std::vector<int32_t> iota(static_cast<size_t>(ran_chain_));
  std::iota(iota.begin(), iota.end(), 0);
  const Status st = kv_->commit(0, iota);
  TREESPEC_ASSERT(st.ok(), "eagle: chain commit fits (cells reserved)");
  ran_chain_ = 0;
}

void EagleDrafter::run_causal(int32_t n) {
  const int32_t E = lm_.hparams().n_embd;
  const int32_t n_past = kv_->n_past(0);
  if (kv_->n_cells() < n_past + n) kv_->grow(std::max(n_past + n, 2 * kv_->n_cells()));
  model::Batch batch;
  batch.add_chain(0, n_past, tokens_.subspan(static_cast<size_t>(c0_ + n_past + 1), static_cast<size_t>(n)));
  emb_.reserve(static_cast<size_t>(n) * E, "eagle embeddings");
  target_.embed(batch, emb_.data());
  ctx_.reserve(n, kv_->n_cells());
  lm_.stack_input(ctx_, emb_.data(), pend_.data(), n, ctx_.x());
  const Status st = lm_.run_layers(ctx_, batch, 0, 1, ctx_.x(), *kv_);
  TREESPEC_ASSERT(st.ok(), "eagle: chain rows fit (cells reserved)");
  ran_chain_ = n;
  commit_chain();
  pend_.erase(pend_.begin(), pend_.begin() + static_cast<ptrdiff_t>(n) * E);
  n_forwards_ += 1;
  n_rows_ += n;
  n_chain_rows_ += n;
}

int32_t EagleDrafter::add_node(int32_t token, int32_t parent, int32_t depth, float value, float step_p) {
  int32_t i = 0;
  if (dtree_.empty()) {
    dtree_ = tree::TokenTree(token);
  } else {
    i = dtree_.add(token, parent, step_p);
  }
  Node nd;
  nd.depth = depth;
  nd.value = value;
  nd.step_p = step_p;
  nodes_.push_back(nd);
  return i;
}

void EagleDrafter::forward(std::span<const int32_t> nodes, const float* chain_feat) {
  const int32_t E = lm_.hparams().n_embd;
  const int32_t V = target_.hparams().n_vocab;
  const auto n = static_cast<int32_t>(nodes.size());
  const int32_t n_past = kv_->n_past(0);
  if (kv_->n_cells() < n_past + dtree_.size()) kv_->grow(std::max(n_past + dtree_.size(), 2 * kv_->n_cells()));
  model::Batch batch;
  batch.add_tree_rows(0, n_past, dtree_, nodes);
  emb_.reserve(static_cast<size_t>(n) * E, "eagle embeddings");
  feat_.reserve(static_cast<size_t>(n) * E, "eagle features");
  target_.embed(batch, emb_.data());
  // Chain rows read the target's features, drafts their parent's prediction.
  for (int32_t r = 0; r < n; ++r) {
    const int32_t node = nodes[static_cast<size_t>(r)];
    const Node& nd = nodes_[static_cast<size_t>(node)];
    const float* src =
        nd.depth <= 0 ? chain_feat + static_cast<size_t>(node) * E
                      : ys_.data() + static_cast<size_t>(nodes_[static_cast<size_t>(dtree_.parent(node))].y_row) * E;
    std::memcpy(feat_.data() + static_cast<size_t>(r) * E, src, static_cast<size_t>(E) * sizeof(float));
  }
  ctx_.reserve(n, kv_->n_cells());
  float* x = ctx_.x();
  lm_.stack_input(ctx_, emb_.data(), feat_.data(), n, x);
  const Status st = lm_.run_layers(ctx_, batch, 0, 1, x, *kv_);
  TREESPEC_ASSERT(st.ok(), "eagle: draft rows fit (cells reserved)");
  // Predicted features of the drafts and of the root's pair (the chain's last row) only.
  std::vector<int32_t> out;
  for (int32_t r = 0; r < n; ++r) {
    if (nodes_[static_cast<size_t>(nodes[static_cast<size_t>(r)])].depth >= 0) out.push_back(r);
  }
  const auto n_out = static_cast<int32_t>(out.size());
  // ys_ keeps earlier rows: grow by copying.
  const size_t need = static_cast<size_t>(n_ys_ + n_out) * E;
  if (ys_.size() < need) {
    core::AlignedBuffer<float> bigger(std::max(need, 2 * ys_.size()), "eagle predicted features");
    if (n_ys_ > 0) std::memcpy(bigger.data(), ys_.data(), static_cast<size_t>(n_ys_) * E * sizeof(float));
    ys_ = std::move(bigger);
  }
  float* y = ys_.data() + static_cast<size_t>(n_ys_) * E;
  lm_.final_norm(x, n, out, y);
  logits_.reserve(static_cast<size_t>(n_out) * V, "eagle logits");
  target_.lm_head(tctx_, y, n_out, logits_.data());
  for (int32_t k = 0; k < n_out; ++k) {
    nodes_[static_cast<size_t>(nodes[static_cast<size_t>(out[static_cast<size_t>(k)])])].y_row = n_ys_ + k;
  }
  n_ys_ += n_out;
  n_forwards_ += 1;
  n_rows_ += n;
}

void EagleDrafter::add_children(int32_t node, const float* logits, const sampling::SamplingParams* sampling) {
  const Node parent = nodes_[static_cast<size_t>(node)];
  if (parent.depth >= p_.depth) return;
  const int32_t V = target_.hparams().n_vocab;
  const bool sampled = sampling != nullptr && !sampling->greedy();
  if (!sampled) {
    const sampling::TopProbs cand = sampling::top_softmax(logits, V, p_.top_k);
    for (size_t i = 0; i < cand.ids.size(); ++i) {
      add_node(cand.ids[i], node, parent.depth + 1, parent.value * cand.p[i], cand.p[i]);
    }
    return;
  }
  // Sampling: one child, drawn from the draft's distribution warped like the target's. Its
  // ranking key is fixed before the draw (the parent's times q's top probability), so
  // whether it is proposed does not depend on which token was drawn.
  sampling::Distribution q = sampling::warp(logits, V, *sampling);
  if (q.ids.empty()) return;
  const float key = parent.value * q.p[0];
  if (coupled_) {
    // The coupled verifier emits the coupled sample of p here; the coupled sample of q
    // with the same noise agrees with it whenever q is close to p (a point-mass draft).
    const int32_t tok = sampling::coupled_choice(q, sampling::noise_key(sampling->seed, noise_pos0_ + parent.depth));
    add_node(tok, node, parent.depth + 1, key, q.prob_of(tok));
  } else {
    q_store_.push_back(std::move(q));
    nodes_[static_cast<size_t>(node)].q_index = static_cast<int32_t>(q_store_.size()) - 1;
    const sampling::Distribution& qs = q_store_.back();
    const int32_t tok = qs.sample(rng_);
    add_node(tok, node, parent.depth + 1, key, qs.prob_of(tok));
  }
  n_sampled_ += 1;
}

std::vector<int32_t> EagleDrafter::ranked_drafts() const {
  std::vector<int32_t> r;
  for (int32_t i = 0; i < dtree_.size(); ++i) {
    if (nodes_[static_cast<size_t>(i)].depth > 0) r.push_back(i);
  }
  std::stable_sort(r.begin(), r.end(), [&](int32_t a, int32_t b) {
    return nodes_[static_cast<size_t>(a)].value > nodes_[static_cast<size_t>(b)].value;
  });
  return r;
}

tree::TokenTree EagleDrafter::propose(const DraftInput& in) {
  const std::span<const int32_t> ctx = in.context;
  TREESPEC_ASSERT(!ctx.empty(), "eagle: empty context");
  const auto len = static_cast<int64_t>(ctx.size());
  tree::TokenTree out(ctx.back());
  q_ptr_.clear();
  q_store_.clear();
  coupled_ = in.coupled;
  noise_pos0_ = len;
  tokens_ = ctx;
  commit_chain();
  dtree_ = tree::TokenTree();
  nodes_.clear();
  n_ys_ = 0;
  // Every pair up to the root's must be known (the target's features of every position
  // from c0_); otherwise start again from the root, whose feature the next step brings.
  if (c0_ < 0 || c0_ + known_pairs() != len - 1 || pend_.empty()) {
    if (c0_ < 0 || c0_ + known_pairs() != len - 1) reset(len - 1);
    return out;
  }
  if (in.budget <= 1) return out;  // the known pairs wait for the next proposal
  n_proposals_ += 1;
  const int32_t E = lm_.hparams().n_embd;
  auto n_pend = static_cast<int32_t>(pend_.size() / static_cast<size_t>(E));
  if (n_pend > kMaxChainRows) {
    for (int32_t left = n_pend - kMaxChainRows; left > 0;) {
      const int32_t n = std::min(left, 512);
      run_causal(n);
      left -= n;
    }
    n_pend = kMaxChainRows;
  }
  // The chain of known pairs, its last the root's: one pass runs them all.
  const int32_t n_past = kv_->n_past(0);
  for (int32_t i = 0; i < n_pend; ++i) {
    add_node(ctx[static_cast<size_t>(c0_ + n_past + i + 1)], i - 1, i - (n_pend - 1), 1.0f, 1.0f);
  }
  const int32_t root = n_pend - 1;
  {
    std::vector<int32_t> rows(static_cast<size_t>(n_pend));
    std::iota(rows.begin(), rows.end(), 0);
    forward(rows, pend_.data());
  }
  ran_chain_ = n_pend;
  pend_.clear();
  n_chain_rows_ += n_pend;
  add_children(root, logits_.data(), in.sampling);
  // Best-first passes: the best unexpanded drafts whose children could still make the cut
  // (rank < budget - 2: a child ranks below its parent), at most width per pass.
  const int32_t budget = in.budget;
  const auto V = static_cast<size_t>(target_.hparams().n_vocab);
  for (;;) {
    const std::vector<int32_t> ranked = ranked_drafts();
    std::vector<int32_t> frontier;
    const size_t limit = std::min(ranked.size(), static_cast<size_t>(std::max(0, budget - 2)));
    for (size_t i = 0; i < limit && static_cast<int32_t>(frontier.size()) < p_.width; ++i) {
      const Node& nd = nodes_[static_cast<size_t>(ranked[i])];
      if (nd.y_row < 0 && nd.depth < p_.depth && nd.value >= in.min_value) frontier.push_back(ranked[i]);
    }
    if (frontier.empty()) break;
    std::sort(frontier.begin(), frontier.end());
    forward(frontier, nullptr);
    for (size_t k = 0; k < frontier.size(); ++k) add_children(frontier[k], logits_.data() + k * V, in.sampling);
  }
  record_curve(ranked_drafts());
  return cut_to_budget(root, budget, in.min_value);
}

void EagleDrafter::record_curve(const std::vector<int32_t>& ranked) {
  // The ranked order is ancestor-closed (a child's value never exceeds its parent's, and
  // ties keep the parent, added first), so its first n - 1 nodes are the tree of size n.
  const size_t n_known = ranked.size() + 1;
  if (curve_.size() < n_known) {
    const size_t old = curve_.size();
    curve_.resize(n_known);
    for (size_t n = old; n < n_known; ++n) curve_[n] = n < prior_.size() ? prior_[n] : prior_.back();
  }
  double e = 0.0;
  for (size_t n = 1; n < n_known; ++n) {
    e += static_cast<double>(nodes_[static_cast<size_t>(ranked[n - 1])].value);
    curve_[n] += kCurveAlpha * (e - curve_[n]);
  }
}

bool EagleDrafter::expected_accepted(std::span<double> out) const {
  const std::vector<double>& c = curve_.empty() ? prior_ : curve_;
  for (size_t n = 0; n < out.size(); ++n) out[n] = c[std::min(n, c.size() - 1)];
  if (!out.empty()) out[0] = 0.0;
  return true;
}

tree::TokenTree EagleDrafter::cut_to_budget(int32_t root, int32_t budget, double min_value) {
  // The best budget - 1 drafts, emitted best first: a parent always comes before its
  // children (it is kept first), and the tree's first n nodes are the tree for budget n
  // (what --spec auto's prefix arms grade from one shadow tree).
  tree::TokenTree out(dtree_.token(root));
  std::vector<int32_t> out_of(static_cast<size_t>(dtree_.size()), -1);
  out_of[static_cast<size_t>(root)] = 0;
  std::vector<int32_t> dtree_of{root};
  for (int32_t i : ranked_drafts()) {
    if (out.size() >= budget) break;
    const int32_t par = dtree_.parent(i);
    if (out_of[static_cast<size_t>(par)] < 0) continue;
    // The value floor cuts point-mass drafts only: whether a sampled draft is proposed must
    // not depend on what was drawn.
    if (nodes_[static_cast<size_t>(par)].q_index < 0 && nodes_[static_cast<size_t>(i)].value < min_value) continue;
    out_of[static_cast<size_t>(i)] =
        out.add(dtree_.token(i), out_of[static_cast<size_t>(par)], nodes_[static_cast<size_t>(i)].step_p);
    dtree_of.push_back(i);
  }
  q_ptr_.assign(static_cast<size_t>(out.size()), nullptr);
  for (int32_t e = 0; e < out.size(); ++e) {
    const int32_t qi = nodes_[static_cast<size_t>(dtree_of[static_cast<size_t>(e)])].q_index;
    if (qi >= 0) q_ptr_[static_cast<size_t>(e)] = &q_store_[static_cast<size_t>(qi)];
  }
  n_drafted_ += out.size() - 1;
  return out;
}

std::vector<std::pair<std::string, double>> EagleDrafter::counters() const {
  return {{"eagle_proposals", static_cast<double>(n_proposals_)},
          {"eagle_forwards", static_cast<double>(n_forwards_)},
          {"eagle_rows", static_cast<double>(n_rows_)},
          {"eagle_chain_rows", static_cast<double>(n_chain_rows_)},
          {"eagle_tokens_proposed", static_cast<double>(n_drafted_)},
          {"eagle_sampled_nodes", static_cast<double>(n_sampled_)},
          {"eagle_resets", static_cast<double>(n_resets_)},
          {"eagle_kv_cells", static_cast<double>(kv_->n_cells())}};
}

std::unique_ptr<Drafter> make_eagle_drafter(const EagleParams& p, const model::Model& target, uint64_t seed,
                                            core::ThreadPool* pool) {
  p.validate();
  if (p.path.empty()) {
    throw InvalidArgument(fmt::format(
        "--spec eagle needs an EAGLE layer: --eagle FILE (train one with: treespec train-eagle -m {} -o EAGLE.gguf)",
        target.gguf().path()));
  }
  return std::make_unique<EagleDrafter>(load_eagle_layer(p.path, target), target, p, pool, seed);
}

}  // namespace treespec::drafters
