// EAGLE-2 speculation (Li et al., arXiv 2401.15077 and 2406.16858): one small decoder
// layer (EagleLayer) drafts at the feature level. It takes the target's final-normed hidden
// state f_t and the embedding of the next token, predicts f_{t+1}, and the target's own
// output matrix turns the prediction into next-token logits; drafting feeds predictions
// back in, so each draft token depends on the ones before it (unlike Medusa heads).
//
// One drafter per sequence. Its one-layer KV cache holds a cell per context position t
// from the first one whose feature it was given (the prompt's, through
// observe_prompt(), then every accepted node's, through observe()): pair (f_t, x_{t+1}).
// Pairs are always computed from the target's true features, so after each step the
// newly known pairs run as a causal chain ahead of the root's draft rows, and every
// drafted row (computed from predicted features) is dropped.
//
// The tree is EAGLE-2's: grown best-first by the product of the draft's probabilities
// along the path, up to --eagle-width nodes expanded per draft pass and --eagle-topk
// children each, never expanding a node whose children could not make the final cut (the
// budget - 1 best), nor one below the budget policy's value floor; then re-ranked and cut
// to the budget. Sampling (temp > 0): each expanded node gets one child drawn from the
// draft's warped distribution q (reported by draft_distributions(), verified with
// min(1, p/q)), or the coupled draw of q under coupled verification. docs/eagle.md.
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
#include "drafters/drafter.h"
#include "drafters/eagle/eagle_layer.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace treespec::drafters {

struct EagleParams {
  std::string path;       // --eagle: the layer file (train-eagle)
  int32_t depth = 6;      // --eagle-depth: deepest draft token
  int32_t width = 4;      // --eagle-width: nodes expanded per draft pass
  int32_t top_k = 4;      // --eagle-topk: children considered per expanded node
  int32_t n_nodes = 12;   // --eagle-nodes: tree size incl. the root when no budget policy sets one
  void validate() const;  // InvalidArgument naming the flag
};

class EagleDrafter final : public Drafter {
 public:
  // Newly known pairs up to this many run as rows of the root's draft pass; longer runs
  // (the prompt) run first as causal chunks.
  static constexpr int32_t kMaxChainRows = 32;

  EagleDrafter(std::shared_ptr<const EagleLayer> layer, const model::Model& target, const EagleParams& p,
               core::ThreadPool* pool, uint64_t seed);

  std::string name() const override { return "eagle"; }
  void begin(std::span<const int32_t> prompt) override;
  bool wants_prompt_hidden() const override { return true; }
  bool drafting_grows_with_budget() const override { return true; }
  void observe_prompt(int32_t first, int32_t n, const float* hidden) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  std::span<const sampling::Distribution* const> draft_distributions() const override { return q_ptr_; }
  int32_t max_nodes() const override { return p_.n_nodes; }
  std::vector<std::pair<std::string, double>> counters() const override;
  // For the budget controller: out[n-1] = expected accepted drafted tokens of the best
  // n - 1 nodes, the sum of their path probabilities, averaged over the proposals that
  // grew that many (an exponential average per size); before any, a chain guessed from
  // the file's held-out top-1 table. Sizes never grown are flat beyond the largest.
  bool expected_accepted(std::span<double> out) const override;

  // Context position of KV cell 0 (-1: none yet) and pairs known (in cells or pending).
  int64_t first_position() const { return c0_; }
  int64_t known_pairs() const;

 private:
  struct Node {
    int32_t depth = 0;     // < 0: the chain of known pairs; 0: the root's pair; > 0: drafts
    float value = 1.0f;    // product of the draft's probabilities along the path (ranking key)
    float step_p = 1.0f;   // draft probability at its parent
    int32_t y_row = -1;    // row of ys_ holding its predicted feature (forwarded nodes)
    int32_t q_index = -1;  // >= 0: its one child was drawn from q_store_[q_index]
  };

  void reset(int64_t c0);
  void append_features(int64_t first, int32_t n, std::span<const float* const> rows);
  void commit_chain();
  void run_causal(int32_t n);  // n pending pairs as a committed causal chunk
  int32_t add_node(int32_t token, int32_t parent, int32_t depth, float value, float step_p);
  // Forwards dtree_ rows `nodes` (features: pend_ for the chain, the parent's ys_ row for
  // drafts); their predicted features into ys_, their logits into logits_ (in order).
  void forward(std::span<const int32_t> nodes, const float* chain_feat);
  void add_children(int32_t node, const float* logits, const sampling::SamplingParams* sampling);
  std::vector<int32_t> ranked_drafts() const;  // drafted nodes, best value first (ties: lower index)
  tree::TokenTree cut_to_budget(int32_t root, int32_t budget, double min_value);
  void record_curve(const std::vector<int32_t>& ranked);  // this proposal's E_n into curve_

  std::shared_ptr<const EagleLayer> layer_;
  const model::Model& target_;
  const model::Model& lm_;  // layer_->model()
  EagleParams p_;
  core::Rng rng_;
  std::unique_ptr<core::ThreadPool> own_pool_;
  model::ForwardContext ctx_;   // the layer's
  model::ForwardContext tctx_;  // the target's (its output matrix)
  std::unique_ptr<kv::KvCache> kv_;
  std::span<const int32_t> tokens_;  // this propose's context
  int64_t c0_ = -1;                  // context position of cell 0
  std::vector<float> pend_;          // features of known pairs not in cells yet [n, n_embd]
  int32_t ran_chain_ = 0;            // chain rows of the last proposal, committed at the next
  bool coupled_ = false;
  int64_t noise_pos0_ = 0;
  tree::TokenTree dtree_;
  std::vector<Node> nodes_;
  std::vector<int32_t> out_of_;  // dtree_ node -> proposed tree node (-1: not proposed)
  std::deque<sampling::Distribution> q_store_;
  std::vector<const sampling::Distribution*> q_ptr_;
  core::AlignedBuffer<float> emb_, feat_, x_, ys_, logits_;
  int32_t n_ys_ = 0;
  std::vector<double> curve_;  // curve_[n - 1]: E_n (see expected_accepted)
  std::vector<double> prior_;  // E_n before any proposal (from the file's calibration)
  int64_t n_proposals_ = 0, n_forwards_ = 0, n_rows_ = 0, n_chain_rows_ = 0, n_drafted_ = 0, n_resets_ = 0;
  int64_t n_sampled_ = 0;
};

std::unique_ptr<Drafter> make_eagle_drafter(const EagleParams& p, const model::Model& target, uint64_t seed,
                                            core::ThreadPool* pool);

}  // namespace treespec::drafters
