#include "drafters/ptd/ptd_drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/assert.h"
#include "treespec/status.h"

namespace treespec::drafters {

void PtdParams::validate() const {
  auto check = [](const char* name, int32_t v, int32_t lo, int32_t hi) {
    if (v < lo || v > hi) throw InvalidArgument(fmt::format("ptd {} must be in {}..{}, got {}", name, lo, hi, v));
  };
  check("max depth", max_depth, 1, 64);
  check("width", width, 1, 64);
  check("spine", spine, 1, 64);
  check("init depth", init_depth, 0, 64);
  check("seeds", n_seeds, 0, 64);
  check("trie cap", trie_cap, 1, 1 << 16);
  check("eos climb", eos_climb, 0, 64);
  check("max draft rows", max_draft_rows, 0, 4096);
  check("max trie rows", max_trie_rows, 0, 4096);
}

PtdDrafter::PtdDrafter(const PtdParams& p, std::vector<int32_t> eog_ids, uint64_t seed, int32_t n_vocab)
    : p_(p), eog_ids_(std::move(eog_ids)), seed_(seed), n_vocab_(n_vocab), rng_(seed), pool_(p.trie_cap) {
  p_.validate();
}

std::vector<int32_t> PtdDrafter::pruning_eos_ids() const {
  if (p_.real_eos) return eog_ids_;
  return {PtdParams::kReferenceEosId};
}

void PtdDrafter::begin(std::span<const int32_t> prompt) {
  // Per request: a fresh pool and draft tree, and a reproducible seed draw.
  rng_.reseed(seed_);
  draft_.clear();
  pool_.clear();
  pool_.counters = {};
  ref_guess_.reset();
  ref_guess_key_ = -1;
  step_snapshot_.reset();
  layout_ = {};
  anchor_ = -1;
  st_ = {};
  draft_.seed(prompt, p_.n_seeds, p_.init_depth, n_vocab_, rng_);
}

tree::TokenTree PtdDrafter::propose(const DraftInput& in) {
  TREESPEC_ASSERT(!in.context.empty(), "ptd: empty context");
  anchor_ = in.context.back();
  const ptd::Trie* guess = nullptr;
  step_snapshot_.reset();
  if (p_.live_feedback) {
    guess = pool_.find(anchor_);
  } else if (ref_guess_ && ref_guess_key_ == anchor_) {
    step_snapshot_ = ref_guess_;
    guess = &*step_snapshot_;
  }
  const int32_t trie_have = guess ? guess->size() : 0;
  const ptd::RowSplit split = ptd::split_rows(in.budget, p_.max_draft_rows, p_.max_trie_rows, draft_.size(), trie_have);
  st_.budget_trimmed += draft_.trim_to(split.draft);
  const std::vector<int32_t> sel = guess ? guess->breadth_first(split.trie) : std::vector<int32_t>{};
  layout_ = ptd::build_step(anchor_, draft_, guess, sel);
  st_.steps += 1;
  st_.draft_rows += layout_.n_draft;
  st_.trie_rows += layout_.n_trie;
  st_.max_draft_rows = std::max<int64_t>(st_.max_draft_rows, layout_.n_draft);
  st_.max_trie_rows = std::max<int64_t>(st_.max_trie_rows, layout_.n_trie);
  return layout_.tree;
}

void PtdDrafter::feedback(const StepFeedback& fb) {
  if (layout_.n_trie == 0) return;
  // Fed trie rows in pre-order, with the model's argmax there.
  std::vector<std::pair<int32_t, int32_t>> fed;  // (trie id in the step's trie, pred)
  for (int32_t i = 1; i < layout_.tree.size(); ++i) {
    const int32_t tid = layout_.trie_id[static_cast<size_t>(i)];
    if (tid >= 0) fed.emplace_back(tid, fb.node_argmax[static_cast<size_t>(i)]);
  }
  ptd::Trie* live = pool_.find(anchor_);
  std::vector<int32_t> verified;  // ids in the live trie of the nodes that were verified
  if (p_.live_feedback) {
    TREESPEC_ASSERT(live != nullptr, "ptd: the verified trie disappeared");
    for (const auto& [tid, pred] : fed) {
      if (!live->alive(tid)) continue;
      verified.push_back(tid);
      if (pred < 0) continue;
      bool added = false;
      live->child(tid, pred, &added);
      pool_.counters.feedback_added += added ? 1 : 0;
    }
  } else {
    // The reference: if the live trie still has the snapshot's node count, expand it by
    // pre-order index; otherwise replace it with the expanded snapshot (dropping whatever
    // was inserted into the live trie since the snapshot was taken).
    TREESPEC_ASSERT(step_snapshot_.has_value(), "ptd: reference-mode feedback without a snapshot");
    const ptd::Trie& snap = *step_snapshot_;
    if (live != nullptr && live->size() == snap.size()) {
      const std::vector<int32_t> snap_pre = snap.preorder();
      const std::vector<int32_t> live_pre = live->preorder();
      for (const auto& [tid, pred] : fed) {
        const auto k = static_cast<size_t>(std::find(snap_pre.begin(), snap_pre.end(), tid) - snap_pre.begin());
        const int32_t lid = live_pre[k];
        verified.push_back(lid);
        if (pred < 0) continue;
        bool added = false;
        live->child(lid, pred, &added);
        pool_.counters.feedback_added += added ? 1 : 0;
      }
    } else {
      ptd::Trie expanded = snap;
      for (const auto& [tid, pred] : fed) {
        verified.push_back(tid);
        if (pred < 0) continue;
        bool added = false;
        expanded.child(tid, pred, &added);
        pool_.counters.feedback_added += added ? 1 : 0;
      }
      pool_.counters.snapshot_replacements += live != nullptr ? 1 : 0;
      pool_.put(anchor_, std::move(expanded));
      live = pool_.find(anchor_);
    }
  }
  if (p_.reinsert) {
    // Every verified node's subtree (with the feedback just added) goes under its own
    // token. Sources are copied first: a merge may evict from this very trie.
    std::vector<ptd::MergeSource> srcs;
    srcs.reserve(verified.size());
    for (int32_t id : verified) srcs.push_back(ptd::Pool::from_trie(*live, id));
    for (const auto& s : srcs) {
      pool_.merge(s);
      pool_.counters.reinsert_merges += 1;
    }
  }
}

void PtdDrafter::observe(const StepFeedback& fb) {
  TREESPEC_ASSERT(fb.tree.size() == layout_.tree.size(), "ptd: feedback for a different tree than proposed");
  const auto& path = fb.result.path;
  const int32_t y = fb.result.bonus;
  const int32_t first = path.size() > 1 ? fb.tree.token(path[1]) : y;
  st_.observed += 1;
  st_.accepted += fb.result.n_accepted();

  // Whether the draft tree is deep enough for pool insertion (I) this step: its structure
  // is what was fed, preds do not change it.
  const bool deep = draft_.max_depth() >= p_.max_depth;
  std::optional<ptd::Trie> retrieved;
  bool have_retrieved = false;
  auto retrieve = [&] {  // reference mode: where the cache server snapshots P[y]
    const ptd::Trie* t = pool_.find(y);
    if (t != nullptr && !t->empty()) retrieved = *t;
    have_retrieved = true;
  };
  if (!p_.live_feedback && !deep) retrieve();  // the reference's "retrieve" request: before F

  // F: feedback of the model's predictions at every verified trie node.
  feedback(fb);

  // D1: every draft node's prediction. D2: snapshot for the pool insertion.
  for (int32_t i = 1; i < layout_.tree.size(); ++i) {
    const int32_t did = layout_.draft_id[static_cast<size_t>(i)];
    if (did >= 0) draft_.set_pred(did, fb.node_argmax[static_cast<size_t>(i)]);
  }
  std::optional<ptd::DraftTree> snapshot;
  if (deep) snapshot = draft_;

  // D3-D6: grow, spine, slide (+ width), EOS.
  st_.grown += draft_.grow(p_.width);
  draft_.maintain_spine(p_.spine, first);
  st_.slides += draft_.slide(p_.max_depth, p_.width);
  st_.eos_cuts += draft_.prune_eos(pruning_eos_ids(), p_.eos_climb);

  // I: key-first insertion into P[y], then every other snapshot node under its own token.
  if (snapshot) {
    st_.insert_steps += 1;
    const std::vector<int32_t> order = snapshot->preorder();
    for (int32_t u : order) {
      if (snapshot->tok(u) == y) pool_.merge(ptd::Pool::from_draft(*snapshot, u));
    }
    if (!p_.live_feedback) retrieve();
    for (int32_t u : order) {
      if (snapshot->tok(u) != y) pool_.merge(ptd::Pool::from_draft(*snapshot, u));
    }
  }
  if (!p_.live_feedback) {
    TREESPEC_ASSERT(have_retrieved, "ptd: reference mode must snapshot the next guess trie");
    ref_guess_ = std::move(retrieved);
    ref_guess_key_ = y;
  }
}

std::vector<std::pair<std::string, double>> PtdDrafter::counters() const {
  auto per = [](int64_t a, int64_t n) { return n > 0 ? static_cast<double>(a) / static_cast<double>(n) : 0.0; };
  const auto& c = pool_.counters;
  return {
      {"steps", static_cast<double>(st_.steps)},
      {"draft_rows", static_cast<double>(st_.draft_rows)},
      {"trie_rows", static_cast<double>(st_.trie_rows)},
      {"draft_rows_per_step", per(st_.draft_rows, st_.steps)},
      {"trie_rows_per_step", per(st_.trie_rows, st_.steps)},
      {"max_draft_rows", static_cast<double>(st_.max_draft_rows)},
      {"max_trie_rows", static_cast<double>(st_.max_trie_rows)},
      {"observed_steps", static_cast<double>(st_.observed)},
      {"accepted_tokens", static_cast<double>(st_.accepted)},
      {"accepted_per_step", per(st_.accepted, st_.observed)},
      {"mean_accepted_length", st_.observed > 0 ? 1.0 + per(st_.accepted, st_.observed) : 0.0},
      {"budget_trimmed_nodes", static_cast<double>(st_.budget_trimmed)},
      {"draft_nodes_grown", static_cast<double>(st_.grown)},
      {"draft_slides", static_cast<double>(st_.slides)},
      {"eos_cuts", static_cast<double>(st_.eos_cuts)},
      {"pool_insert_steps", static_cast<double>(st_.insert_steps)},
      {"pool_keys", static_cast<double>(pool_.n_keys())},
      {"pool_nodes", static_cast<double>(pool_.n_nodes())},
      {"pool_merges", static_cast<double>(c.merges)},
      {"pool_nodes_inserted", static_cast<double>(c.nodes_inserted)},
      {"feedback_nodes_added", static_cast<double>(c.feedback_added)},
      {"pool_evictions", static_cast<double>(c.evictions)},
      {"pool_nodes_evicted", static_cast<double>(c.nodes_evicted)},
      {"reinsert_merges", static_cast<double>(c.reinsert_merges)},
      {"snapshot_replacements", static_cast<double>(c.snapshot_replacements)},
  };
}

}  // namespace treespec::drafters
