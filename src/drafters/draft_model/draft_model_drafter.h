// Draft-model speculation (Leviathan et al., 2023; Chen et al., 2023), with SpecInfer-style
// trees (Miao et al., 2024): a smaller language model with the target's vocabulary drafts
// the next tokens autoregressively with its own KV cache; the target verifies them in one
// forward pass. The draft is a second GGUF (`-md`), a subset of a model's layers
// (`--draft-layers`: self-drafting on the target's own weights), or both.
//
// One drafter per sequence. Its KV cache holds exactly the committed context: after each
// step the draft rows the target accepted are committed in place (their K/V are reused),
// everything else is dropped, and tokens the draft has not run yet (the bonus token, an
// accepted leaf) are fed at the next propose together with the new root.
//
// Chain mode: up to n_draft_max tokens; stops when the draft's top probability falls below
// p_min. Tree mode: the same, plus branches where the draft's other candidates reach
// p_split; nodes are expanded best-first by path probability, up to tree_width per draft
// forward pass, until the node budget (DraftInput::budget) is spent. Sampling (temp > 0):
// a node with one child draws it from the draft's warped distribution q (reported through
// draft_distributions(), verified with min(1, p/q)); a node with several children takes
// the top ones deterministically (point masses). Details and rationale: README.md here and
// docs/draft.md.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/rng.h"
#include "drafters/draft_model/draft_lm.h"
#include "drafters/drafter.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

struct DraftModelParams {
  std::string model_path;     // -md/--model-draft: draft GGUF (empty: the target's own layers)
  std::string layers;         // --draft-layers: e.g. "0-2,4"; empty: all layers of the draft model
  int32_t n_draft_max = 8;    // --draft-max: tokens per chain / tree depth
  int32_t n_draft_min = 0;    // --draft-min: shorter drafts are not verified (point-mass drafts only)
  float p_min = 0.75f;        // --draft-p-min: stop below a node whose children cover less draft mass
  bool tree = false;          // --draft-tree
  float p_split = 0.1f;       // --draft-p-split: a non-top candidate becomes a branch at this draft probability
  int32_t n_tree_nodes = 16;  // --draft-tree-nodes: tree size incl. the root when no budget policy sets one
  int32_t tree_width = 4;     // --draft-tree-width: nodes expanded per draft forward pass
  void validate() const;      // InvalidArgument naming the flag
};

class DraftModelDrafter final : public Drafter {
 public:
  // Most children one node gets (llama.cpp's llama-speculative also tries at most 8).
  static constexpr int32_t kMaxChildren = 8;
  // Pending tokens up to this many ride along as tree rows of the next draft pass; longer
  // runs (the prompt) are prefilled as causal chunks first.
  static constexpr int32_t kMaxPendingRows = 16;

  DraftModelDrafter(std::unique_ptr<DraftLm> lm, const DraftModelParams& p, uint64_t seed);

  std::string name() const override { return "draft"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  std::span<const sampling::Distribution* const> draft_distributions() const override { return q_ptr_; }
  int32_t max_nodes() const override { return p_.tree ? p_.n_tree_nodes : p_.n_draft_max + 1; }
  std::vector<std::pair<std::string, double>> counters() const override;

  const DraftLm& lm() const { return *lm_; }
  // Tokens whose K/V the draft holds as committed (cells [0, n)): always a prefix of the
  // context, one short of it (the root) right after propose().
  const std::vector<int32_t>& committed() const { return committed_; }

 private:
  // One node of the draft's own tree: pending chain (depth < 0), root (0), drafts (> 0).
  struct Node {
    int32_t depth = 0;
    float path_p = 1.0f;  // ranking key (product of draft probabilities; see add_children)
    float step_p = 1.0f;  // draft probability of this token at its parent
    bool forwarded = false;
    int32_t q_index = -1;  // >= 0: its one child was sampled from q_store_[q_index]
  };

  void sync(std::span<const int32_t> ctx);
  void prefill(std::span<const int32_t> tokens);
  int32_t add_node(int32_t token, int32_t parent, int32_t depth, float path_p, float step_p);
  // Runs dtree_ rows `nodes` through the draft; logits of every row into logits_.
  void forward_nodes(std::span<const int32_t> nodes, bool need_logits_of_last_only);
  void add_children(int32_t node, const float* logits, const sampling::SamplingParams* sampling, int32_t max_depth);
  std::vector<int32_t> ranked_drafts() const;  // drafted nodes, best path_p first (ties: lower index)

  std::unique_ptr<DraftLm> lm_;
  DraftModelParams p_;
  core::Rng rng_;
  // This proposal's coupled noise (DraftInput::coupled): a sampled draft is the coupled
  // sample of the draft's q at the child's absolute position, pos0 + parent depth.
  bool coupled_ = false;
  int64_t noise_pos0_ = 0;
  std::vector<int32_t> committed_;
  tree::TokenTree dtree_;    // last proposal: pending chain, root, drafted nodes
  std::vector<Node> nodes_;  // [dtree_.size()]
  std::deque<sampling::Distribution> q_store_;
  std::vector<const sampling::Distribution*> q_ptr_;  // [proposed tree size]
  core::AlignedBuffer<float> logits_;                 // [rows, n_vocab]
  // Counters (for `run --json` stats.drafter and the docs).
  int64_t n_proposals_ = 0, n_forwards_ = 0, n_rows_ = 0, n_prefill_ = 0, n_reused_ = 0, n_drafted_ = 0;
  int64_t n_sampled_nodes_ = 0, n_dropped_min_ = 0;
};

// The drafter `--spec draft` builds for `target`: loads and checks -md, parses
// --draft-layers against the draft model (InvalidArgument when neither is given or either
// is bad). seed: the request's seed (draws of sampled drafts use their own stream); pool:
// the engine's (null: a private one-thread pool).
std::unique_ptr<Drafter> make_draft_model_drafter(const DraftModelParams& p, const model::Model& target, uint64_t seed,
                                                  core::ThreadPool* pool);

}  // namespace treespec::drafters
