#include "drafters/draft_model/draft_model_drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/assert.h"
#include "drafters/draft_model/compat.h"
#include "drafters/draft_model/layer_list.h"
#include "model/model.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::drafters {

void DraftModelParams::validate() const {
  if (n_draft_max < 1 || n_draft_max > 256) {
    throw InvalidArgument(fmt::format("--draft-max must be in 1..256, got {}", n_draft_max));
  }
  if (n_draft_min < 0 || n_draft_min > n_draft_max) {
    throw InvalidArgument(fmt::format("--draft-min must be in 0..--draft-max ({}), got {}", n_draft_max, n_draft_min));
  }
  if (!(p_min >= 0.0f && p_min <= 1.0f))
    throw InvalidArgument(fmt::format("--draft-p-min must be in [0, 1], got {}", p_min));
  if (!(p_split > 0.0f && p_split <= 1.0f)) {
    throw InvalidArgument(fmt::format("--draft-p-split must be in (0, 1], got {}", p_split));
  }
  if (n_tree_nodes < 1 || n_tree_nodes > 4096) {
    throw InvalidArgument(fmt::format("--draft-tree-nodes must be in 1..4096, got {}", n_tree_nodes));
  }
  if (tree_width < 1 || tree_width > 256) {
    throw InvalidArgument(fmt::format("--draft-tree-width must be in 1..256, got {}", tree_width));
  }
}

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<DraftLm> lm, const DraftModelParams& p, uint64_t seed)
    // Its own stream: the verifier draws from the request's seed, and reusing those
    // uniforms for the drafts would correlate proposal and acceptance.
    : lm_(std::move(lm)), p_(p), rng_(seed ^ 0xd1b54a32d192ed03ULL) {
  p_.validate();
}

void DraftModelDrafter::begin(std::span<const int32_t> /*prompt*/) {
  committed_.clear();
  lm_->truncate(0);
  dtree_ = tree::TokenTree();
  nodes_.clear();
}

void DraftModelDrafter::sync(std::span<const int32_t> ctx) {
  const auto n = static_cast<int64_t>(ctx.size());
  // The committed tokens must be a prefix of the context (always, unless the caller
  // switched sequences without begin()); cut back to the common prefix otherwise.
  const auto m = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(committed_.size()), n - 1));
  size_t lcp = 0;
  while (lcp < m && committed_[lcp] == ctx[lcp]) ++lcp;
  if (lcp < committed_.size()) {
    lm_->truncate(static_cast<int32_t>(lcp));
    committed_.resize(lcp);
    dtree_ = tree::TokenTree();
    nodes_.clear();
  }
  // Commit the last draft tree's rows that the context now confirms: walk it along the
  // context from its first node, through rows the draft ran, stopping before the root.
  if (!nodes_.empty()) {
    std::vector<int32_t> path;
    auto idx = static_cast<int64_t>(committed_.size());
    int32_t node = -1;
    if (idx < n - 1 && dtree_.token(0) == ctx[static_cast<size_t>(idx)] && nodes_[0].forwarded) {
      node = 0;
      path.push_back(0);
      ++idx;
      while (idx < n - 1) {
        int32_t next = -1;
        for (int32_t c : dtree_.children(node)) {
          if (dtree_.token(c) == ctx[static_cast<size_t>(idx)] && nodes_[static_cast<size_t>(c)].forwarded) {
            next = c;
            break;
          }
        }
        if (next < 0) break;
        path.push_back(next);
        node = next;
        ++idx;
      }
    }
    lm_->commit(path);
    for (int32_t k : path) committed_.push_back(dtree_.token(k));
    n_reused_ += static_cast<int64_t>(path.size());
    dtree_ = tree::TokenTree();
    nodes_.clear();
  }
}

void DraftModelDrafter::prefill(std::span<const int32_t> tokens) {
  constexpr size_t kChunk = 512;
  model::Batch batch;
  for (size_t b = 0; b < tokens.size(); b += kChunk) {
    const auto chunk = tokens.subspan(b, std::min(kChunk, tokens.size() - b));
    const auto n = static_cast<int32_t>(chunk.size());
    lm_->reserve_cells(lm_->n_past() + n);
    batch.clear();
    batch.add_chain(0, lm_->n_past(), chunk);
    lm_->forward(batch, {}, nullptr);
    lm_->commit_chain(n);
    committed_.insert(committed_.end(), chunk.begin(), chunk.end());
    n_forwards_ += 1;
    n_rows_ += n;
    n_prefill_ += n;
  }
}

int32_t DraftModelDrafter::add_node(int32_t token, int32_t parent, int32_t depth, float path_p, float step_p) {
  int32_t i = 0;
  if (dtree_.empty()) {
    TREESPEC_ASSERT(parent < 0, "draft tree: first node must be the root");
    dtree_ = tree::TokenTree(token);
  } else {
    i = dtree_.add(token, parent, step_p);
  }
  Node nd;
  nd.depth = depth;
  nd.path_p = path_p;
  nd.step_p = step_p;
  nodes_.push_back(nd);
  return i;
}

void DraftModelDrafter::forward_nodes(std::span<const int32_t> nodes, bool need_logits_of_last_only) {
  // Rows of later passes attend to the cells their ancestors wrote in earlier passes:
  // node i always lives in cell n_past + i.
  lm_->reserve_cells(lm_->n_past() + dtree_.size());
  model::Batch batch;
  batch.add_tree_rows(0, lm_->n_past(), dtree_, nodes);
  const auto n = static_cast<int32_t>(nodes.size());
  std::vector<int32_t> out;
  if (need_logits_of_last_only) {
    out.push_back(n - 1);
  } else {
    out.resize(static_cast<size_t>(n));
    std::iota(out.begin(), out.end(), 0);
  }
  logits_.reserve(out.size() * static_cast<size_t>(lm_->n_vocab()), "draft logits");
  lm_->forward(batch, out, logits_.data());
  for (int32_t k : nodes) nodes_[static_cast<size_t>(k)].forwarded = true;
  n_forwards_ += 1;
  n_rows_ += n;
}

void DraftModelDrafter::add_children(int32_t node, const float* logits, const sampling::SamplingParams* sampling,
                                     int32_t max_depth) {
  const Node parent = nodes_[static_cast<size_t>(node)];
  if (parent.depth >= max_depth) return;
  const int32_t n_vocab = lm_->n_vocab();
  const bool sampled = sampling != nullptr && !sampling->greedy();
  // Greedy: the draft's own softmax (temperature 1) ranks the children. Sampling: the
  // draft's distribution warped like the target's (temperature, top-k/p, min-p) is q.
  sampling::Distribution q;
  sampling::TopProbs cand;
  if (sampled) {
    q = sampling::warp(logits, n_vocab, *sampling);
    const size_t k = std::min<size_t>(q.ids.size(), kMaxChildren);
    cand.ids.assign(q.ids.begin(), q.ids.begin() + static_cast<ptrdiff_t>(k));
    cand.p.assign(q.p.begin(), q.p.begin() + static_cast<ptrdiff_t>(k));
  } else {
    cand = sampling::top_softmax(logits, n_vocab, p_.tree ? kMaxChildren : 1);
  }
  // Children: the top candidate, and in tree mode every other one with probability >=
  // p_split. Nothing below this node when they cover less than p_min of the draft's mass
  // (for a chain: the top probability, as llama.cpp's --draft-p-min).
  size_t n_child = 1;
  double cover = cand.p[0];
  if (p_.tree) {
    while (n_child < cand.ids.size() && cand.p[n_child] >= p_.p_split) cover += cand.p[n_child++];
  }
  if (cover < p_.p_min) return;
  if (sampled && n_child == 1 && coupled_) {
    // The coupled verifier emits the coupled sample of p at this position; proposing the
    // coupled sample of q with the same noise agrees with it whenever q is close to p.
    // The draw is a deterministic function of the context: a point-mass draft.
    const int32_t tok = sampling::coupled_choice(q, sampling::noise_key(sampling->seed, noise_pos0_ + parent.depth));
    add_node(tok, node, parent.depth + 1, parent.path_p * cand.p[0], q.prob_of(tok));
    n_sampled_nodes_ += 1;
    return;
  }
  if (sampled && n_child == 1) {
    // One child drawn from q. Its ranking key must not depend on which token was drawn
    // (else keeping or cutting it would depend on its value and bias the output), so it
    // is the parent's key times q's top probability, fixed before the draw.
    q_store_.push_back(std::move(q));
    nodes_[static_cast<size_t>(node)].q_index = static_cast<int32_t>(q_store_.size()) - 1;
    const sampling::Distribution& qs = q_store_.back();
    const int32_t tok = qs.sample(rng_);
    add_node(tok, node, parent.depth + 1, parent.path_p * cand.p[0], qs.prob_of(tok));
    n_sampled_nodes_ += 1;
    return;
  }
  for (size_t i = 0; i < n_child; ++i) {
    add_node(cand.ids[i], node, parent.depth + 1, parent.path_p * cand.p[i], cand.p[i]);
  }
}

std::vector<int32_t> DraftModelDrafter::ranked_drafts() const {
  std::vector<int32_t> r;
  for (int32_t i = 0; i < dtree_.size(); ++i) {
    if (nodes_[static_cast<size_t>(i)].depth > 0) r.push_back(i);
  }
  std::stable_sort(r.begin(), r.end(), [&](int32_t a, int32_t b) {
    return nodes_[static_cast<size_t>(a)].path_p > nodes_[static_cast<size_t>(b)].path_p;
  });
  return r;
}

tree::TokenTree DraftModelDrafter::propose(const DraftInput& in) {
  const std::span<const int32_t> ctx = in.context;
  TREESPEC_ASSERT(!ctx.empty(), "draft: empty context");
  const int32_t root = ctx.back();
  q_ptr_.clear();
  q_store_.clear();
  coupled_ = in.coupled;
  noise_pos0_ = static_cast<int64_t>(ctx.size());
  sync(ctx);
  tree::TokenTree out(root);
  // Chain: at most n_draft_max + 1 nodes. Tree: the budget (a budget policy may grow or
  // shrink it; by default it is n_tree_nodes).
  const int32_t budget = p_.tree ? in.budget : std::min(in.budget, p_.n_draft_max + 1);
  if (budget <= 1) return out;  // nothing to draft; unseen tokens are fed next time
  n_proposals_ += 1;

  std::span<const int32_t> pending = ctx.subspan(committed_.size(), ctx.size() - 1 - committed_.size());
  if (pending.size() > static_cast<size_t>(kMaxPendingRows)) {
    prefill(pending);
    pending = {};
  }
  // The draft tree: pending tokens as a chain, then the root; one pass runs them all.
  const auto n_pend = static_cast<int32_t>(pending.size());
  for (int32_t i = 0; i < n_pend; ++i) add_node(pending[static_cast<size_t>(i)], i - 1, i - n_pend, 1.0f, 1.0f);
  const int32_t r = add_node(root, n_pend - 1, 0, 1.0f, 1.0f);
  {
    std::vector<int32_t> rows(static_cast<size_t>(r + 1));
    std::iota(rows.begin(), rows.end(), 0);
    forward_nodes(rows, true);
    add_children(r, logits_.data(), in.sampling, p_.n_draft_max);
  }
  // Best-first rounds: expand the best-ranked drafts whose children could still make the
  // final cut (rank < budget - 2: a child ranks below its parent), up to tree_width per pass.
  const int32_t width = p_.tree ? p_.tree_width : 1;
  for (;;) {
    const std::vector<int32_t> ranked = ranked_drafts();
    std::vector<int32_t> frontier;
    const size_t limit = std::min(ranked.size(), static_cast<size_t>(std::max(0, budget - 2)));
    for (size_t i = 0; i < limit && static_cast<int32_t>(frontier.size()) < width; ++i) {
      const Node& nd = nodes_[static_cast<size_t>(ranked[i])];
      // Under the value floor, a node's children (worth less) would be cut: not expanded.
      if (!nd.forwarded && nd.depth < p_.n_draft_max && nd.path_p >= in.min_value) frontier.push_back(ranked[i]);
    }
    if (frontier.empty()) break;
    std::sort(frontier.begin(), frontier.end());
    forward_nodes(frontier, false);
    const auto n_vocab = static_cast<size_t>(lm_->n_vocab());
    for (size_t k = 0; k < frontier.size(); ++k) {
      add_children(frontier[k], logits_.data() + k * n_vocab, in.sampling, p_.n_draft_max);
    }
  }

  // The proposal: the budget - 1 best drafts (ancestor-closed: a node only after its parent).
  std::vector<uint8_t> keep(static_cast<size_t>(dtree_.size()), 0);
  for (int32_t i = 0; i <= r; ++i) keep[static_cast<size_t>(i)] = 1;
  int32_t n_keep = 0;
  bool any_sampled = false;
  for (int32_t i : ranked_drafts()) {
    if (n_keep >= budget - 1) break;
    if (!keep[static_cast<size_t>(dtree_.parent(i))]) continue;
    // The budget policy's value floor cuts point-mass drafts only: whether a sampled draft
    // is proposed must not depend on what was sampled (that would bias the output).
    if (nodes_[static_cast<size_t>(dtree_.parent(i))].q_index < 0 &&
        nodes_[static_cast<size_t>(i)].path_p < in.min_value)
      continue;
    keep[static_cast<size_t>(i)] = 1;
    ++n_keep;
    any_sampled |= nodes_[static_cast<size_t>(dtree_.parent(i))].q_index >= 0;
  }
  // --draft-min: too short a draft is not worth verifying (llama.cpp). Only for point-mass
  // drafts: dropping a draft because of what was sampled would bias the output.
  if (n_keep < p_.n_draft_min && !any_sampled) {
    n_dropped_min_ += 1;
    return out;
  }
  std::vector<int32_t> engine_of(static_cast<size_t>(dtree_.size()), -1);
  std::vector<int32_t> dtree_of{r};
  engine_of[static_cast<size_t>(r)] = 0;
  for (int32_t i = r + 1; i < dtree_.size(); ++i) {
    if (!keep[static_cast<size_t>(i)]) continue;
    const int32_t e = out.add(dtree_.token(i), engine_of[static_cast<size_t>(dtree_.parent(i))],
                              nodes_[static_cast<size_t>(i)].step_p);
    engine_of[static_cast<size_t>(i)] = e;
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

std::vector<std::pair<std::string, double>> DraftModelDrafter::counters() const {
  return {{"draft_proposals", static_cast<double>(n_proposals_)},
          {"draft_forwards", static_cast<double>(n_forwards_)},
          {"draft_rows", static_cast<double>(n_rows_)},
          {"draft_prefill_rows", static_cast<double>(n_prefill_)},
          {"draft_kv_reused_rows", static_cast<double>(n_reused_)},
          {"draft_tokens_proposed", static_cast<double>(n_drafted_)},
          {"draft_sampled_nodes", static_cast<double>(n_sampled_nodes_)},
          {"draft_dropped_min", static_cast<double>(n_dropped_min_)},
          {"draft_kv_cells", static_cast<double>(lm_->n_cells())},
          {"draft_layers", static_cast<double>(lm_->layers().size())}};
}

std::unique_ptr<Drafter> make_draft_model_drafter(const DraftModelParams& p, const model::Model& target, uint64_t seed,
                                                  core::ThreadPool* pool) {
  p.validate();
  if (p.model_path.empty() && p.layers.empty()) {
    throw InvalidArgument(
        "--spec draft needs a draft model: -md DRAFT.gguf, or --draft-layers LIST to draft with a "
        "subset of the target's own layers");
  }
  std::shared_ptr<const model::Model> owned;
  const model::Model* m = &target;
  if (!p.model_path.empty()) {
    owned = load_draft_model(p.model_path, target);
    m = owned.get();
  }
  std::vector<int32_t> layers;
  if (p.layers.empty()) {
    layers.resize(static_cast<size_t>(m->hparams().n_layer));
    std::iota(layers.begin(), layers.end(), 0);
  } else {
    layers = parse_layer_list(p.layers, m->hparams().n_layer);
  }
  auto lm = std::make_unique<DraftLm>(std::move(owned), *m, std::move(layers), pool);
  return std::make_unique<DraftModelDrafter>(std::move(lm), p, seed);
}

}  // namespace treespec::drafters
