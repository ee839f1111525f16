// Medusa decoding (Cai et al., 2024): K heads on the base model's final normed hidden
// state draft the next tree; the tree shape (static Medusa "choices" or best-first from
// the heads' calibration) says which (depth, rank) candidates it holds.
//
// Per step: the root is the last accepted token's bonus; depth d of the tree comes from
// head d-1's top-k at the last accepted node's hidden state, node (r_1..r_d) takes the
// rank-r_d token. The heads run in observe() on the ONE accepted node's hidden state that
// the verification forward already produced: no extra forward pass. The first step after
// prefill has no hidden state yet (prefill does not return one), so it proposes the root
// alone, like plain decoding. Drafts are point masses, so lossless sampling, greedy and
// typical acceptance all apply unchanged.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "drafters/drafter.h"
#include "drafters/medusa/dynamic_tree.h"
#include "drafters/medusa/medusa_heads.h"
#include "tree/tree_choices.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

struct MedusaParams {
  std::string heads_path;           // heads file; empty = heads stored in the model file
  std::string tree = "dynamic:16";  // dynamic:N | auto:N | NAME (in tree_file) | FILE | FILE:NAME
  std::string
      tree_file;  // where NAMEs are looked up (default: $TREESPEC_SHARED/data/tree_choices.json, ../shared/data/tree_choices.json)
  int32_t tree_nodes = 0;     // keep only the first N nodes incl. the root (0 = all)
  int32_t top_k = 10;         // candidates per head (Medusa's TOPK)
  float adapt_alpha = 0.02f;  // EMA rate of the live acceptance table
  void validate() const;
  // N of a `dynamic:N` tree (this step's best N nodes by the heads' confidence,
  // dynamic_tree.h), 0 for the static trees; InvalidArgument for a bad N.
  int32_t dynamic_nodes() const;
};

// The top-k tokens of every head at one hidden state, most likely first (ties: lower id).
class MedusaCandidates {
 public:
  MedusaCandidates(std::shared_ptr<const MedusaHeads> heads, int32_t top_k, core::ThreadPool* pool);
  // h: one final-normed hidden state [n_embd].
  void compute(const float* h);
  int32_t n_heads() const { return heads_->n_heads(); }
  int32_t top_k() const { return top_k_; }
  // Head k's candidates [top_k].
  std::span<const int32_t> top(int32_t k) const {
    return std::span<const int32_t>(ids_).subspan(static_cast<size_t>(k) * static_cast<size_t>(top_k_),
                                                  static_cast<size_t>(top_k_));
  }
  // Head k's candidates' softmax probabilities over the draft vocabulary [top_k].
  std::span<const float> prob(int32_t k) const {
    return std::span<const float>(probs_).subspan(static_cast<size_t>(k) * static_cast<size_t>(top_k_),
                                                  static_cast<size_t>(top_k_));
  }
  // Rank of `token` among head k's candidates, -1 if absent.
  int32_t rank_of(int32_t k, int32_t token) const;

 private:
  std::shared_ptr<const MedusaHeads> heads_;
  int32_t top_k_;
  core::ThreadPool* pool_;
  std::vector<int32_t> ids_;   // [n_heads, top_k]
  std::vector<float> probs_;   // [n_heads, top_k]
  std::vector<float> work_;    // [(n_heads + 1) * n_embd]
  std::vector<float> logits_;  // [n_heads, n_draft]
};

// The tree for one step: node i of `shape` takes token cand.top(depth - 1)[rank]; at most
// `budget` nodes (a prefix: ancestor-closed). The shape must fit (depth <= heads, rank < top_k).
tree::TokenTree fill_medusa_tree(int32_t root, const tree::TreeShape& shape, const MedusaCandidates& cand,
                                 int32_t budget);

// Grades every head's candidates once the token they predicted is known, so the live
// acceptance table sees each head's true top-k accuracy (not only on accepted paths).
class HeadAccuracyTracker {
 public:
  // Candidates computed for the tree whose root sits at context index `root_index`: head k
  // predicts context[root_index + k + 1].
  void add(int64_t root_index, const MedusaCandidates& cand);
  // Grades whatever `context` now reveals into table (depth k + 1 for head k) and, when
  // given, into conf: each of head k's candidates with its probability, counted only
  // while heads 0..k-1 all had their target among their candidates (conf is the chance
  // given the path so far was right, which is what a tree node's value multiplies).
  void grade(std::span<const int32_t> context, tree::AcceptanceTable& table, float alpha,
             HeadConfidence* conf = nullptr);
  void clear() { pending_.clear(); }

 private:
  struct Pending {
    int64_t root_index;
    int32_t graded;                          // heads graded so far (in order)
    bool chain;                              // every head graded so far had its target among its candidates
    std::vector<std::vector<int32_t>> cand;  // [n_heads][top_k]
    std::vector<std::vector<float>> prob;    // [n_heads][top_k]
  };
  std::deque<Pending> pending_;
};

class MedusaDrafter final : public Drafter {
 public:
  // `initial` seeds the live acceptance table (the calibration, or zeros).
  MedusaDrafter(const std::shared_ptr<const MedusaHeads>& heads, tree::TreeShape shape, const MedusaParams& p,
                core::ThreadPool* pool, tree::AcceptanceTable initial);
  std::string name() const override { return "medusa"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  int32_t max_nodes() const override { return dynamic_ > 0 ? dynamic_ : shape_.size(); }
  // Dynamic trees only: the mean expected accepted length of recent steps' trees.
  bool expected_accepted(std::span<double> out) const override;

  // The static tree (empty with dynamic trees).
  const tree::TreeShape& shape() const { return shape_; }
  const HeadConfidence& confidence() const { return conf_; }
  // Per-(depth, rank) acceptance measured on this sequence (EMA from the calibration).
  const tree::AcceptanceTable& live_table() const { return live_; }

 private:
  std::shared_ptr<const MedusaHeads> heads_;
  tree::TreeShape shape_;
  MedusaParams p_;
  MedusaCandidates cand_;
  bool have_cand_ = false;
  HeadAccuracyTracker tracker_;
  tree::AcceptanceTable live_;
  int32_t dynamic_ = 0;  // N of dynamic:N, else 0
  HeadConfidence conf_;
  ExpectedCurve curve_;
};

// Heads for this model: from p.heads_path, else from the model file. Checked against the
// model (InvalidArgument naming what differs) and shared between drafters of the process.
std::shared_ptr<const MedusaHeads> load_medusa_heads(const MedusaParams& p, const model::Model& m,
                                                     const char* method = "medusa");

// The heads' calibration as an acceptance table of top_k ranks (InvalidArgument if the
// heads carry no calibration).
tree::AcceptanceTable calibration_table(const MedusaHeads& heads, int32_t top_k);

// Resolves p.tree (auto:N, NAME, FILE, FILE:NAME), drops nodes deeper than the heads
// (logged), checks ranks against p.top_k and applies p.tree_nodes.
tree::TreeShape resolve_medusa_tree(const MedusaParams& p, const MedusaHeads& heads);

// Everything above: the drafter `--spec medusa` builds (`method`: the --spec errors name).
std::unique_ptr<Drafter> make_medusa_drafter(const MedusaParams& p, const model::Model& m, core::ThreadPool* pool,
                                             const char* method = "medusa");

}  // namespace treespec::drafters
