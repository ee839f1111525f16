// ProPD (Zhong et al., 2024): Medusa-style head drafting with early pruning of the token
// tree and dynamic tree sizing (README.md here, docs/propd.md).
//
// Every step the drafter grows this step's best-first tree T_Nmax from the heads' own
// confidence (a dynamic tree, medusa/dynamic_tree.h: EAGLE-2's idea, with the heads'
// softmax calibrated online into acceptance chances), so T_1 ⊂ T_2 ⊂ ... ⊂ T_Nmax and
// E_n (expected_accepted: the mean over recent steps, seeded from the heads'
// calibration table) is known for every n. It proposes the prefix the engine grants:
// the BudgetController (engine/budget_controller.h) chooses the size from E_n and a
// fitted latency model, one value floor for the whole batch, and the drafter cuts this
// step's tree where its nodes fall below the floor (DraftInput::min_value). With
// --table-tree the trees are controller-sized prefixes of the best-first tree of a live
// per-(depth, rank) acceptance table instead (the same for every step; the arrangement
// before dynamic trees), with --static-tree that table's fixed Nmax tree (both kept as
// ablations). Early
// pruning happens inside the engine's verification forward (the drafter carries a
// PruneSpec, set by make_propd_drafter).
//
// The heads run lazily: observe() keeps the accepted node's final hidden state and
// propose() runs the heads only when the budget allows a tree (or every
// `refresh_every` steps, so the live table keeps learning while trees are 1 node).
// On a model where speculation does not pay, ProPD then costs what plain decoding costs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "drafters/drafter.h"
#include "drafters/medusa/medusa_drafter.h"
#include "drafters/propd/prune_spec.h"
#include "tree/tree_choices.h"

namespace treespec::model {
class Model;
}

namespace treespec::drafters {

struct PropdParams {
  std::string heads_path;      // --propd-heads: Medusa + prune heads (default: --heads, then the model file)
  int32_t n_max = 64;          // --propd-nmax: Nmax, the largest tree (nodes incl. the root)
  int32_t interval = 8;        // --propd-interval: R, steps between re-plans / tree rebuilds
  bool no_prune = false;       // --propd-no-prune (alias --no-prune): ablation without early pruning
  bool static_tree = false;    // --propd-static-tree (alias --static-tree): ablation with the fixed Nmax tree
  bool table_tree = false;     // --propd-table-tree: ablation, sized prefixes of the live table's best-first tree
  std::string tree;            // --propd-tree: the static tree (default: best-first auto:Nmax from the calibration)
  float adapt_alpha = 0.02f;   // EMA rate of the live acceptance table
  int32_t refresh_every = 64;  // heads run at least this often while trees are 1 node (0 = only when needed)
  void validate() const;       // InvalidArgument naming the flag
};

class PropdDrafter final : public Drafter {
 public:
  // `initial` seeds the live table; `static_shape` fixes the tree (--static-tree).
  PropdDrafter(const std::shared_ptr<const MedusaHeads>& heads, const PropdParams& p, int32_t top_k,
               core::ThreadPool* pool, tree::AcceptanceTable initial,
               std::optional<tree::TreeShape> static_shape = std::nullopt);
  std::string name() const override { return "propd"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  int32_t max_nodes() const override { return static_ ? static_->size() : n_max_; }
  bool expected_accepted(std::span<double> out) const override;

  // The static tree (--static-tree), else the seed's best-first tree of the calibration.
  const tree::TreeShape& shape() const { return static_ ? *static_ : best_.shape; }
  const HeadConfidence& confidence() const { return conf_; }
  // Trees grown every step from the heads' confidence (not --static-tree / --table-tree).
  bool dynamic() const { return !static_ && !p_.table_tree; }
  const tree::AcceptanceTable& live_table() const { return live_; }
  int64_t head_runs() const { return head_runs_; }

 private:
  void rebuild();

  std::shared_ptr<const MedusaHeads> heads_;
  PropdParams p_;
  MedusaCandidates cand_;
  HeadAccuracyTracker tracker_;
  tree::AcceptanceTable live_;
  std::optional<tree::TreeShape> static_;
  tree::BestFirstTree best_;             // T_Nmax of the live table (seeds the dynamic trees' curve)
  int32_t n_max_ = 1;                    // largest dynamic tree
  HeadConfidence conf_;                  // dynamic trees: the heads' calibrated confidence
  ExpectedCurve curve_;                  // dynamic trees: E_n over recent steps
  DynamicTree dyn_;                      // dynamic trees: this step's (grown when the heads run)
  std::vector<double> static_expected_;  // E_n of the static tree's prefixes
  std::vector<float> hidden_;            // [n_embd] accepted node's final normed state
  bool have_hidden_ = false;
  bool have_cand_ = false;  // cand_ computed from hidden_
  int64_t root_index_ = 0;  // context index of the next root
  int64_t steps_ = 0, since_heads_ = 0, head_runs_ = 0, rebuilt_at_runs_ = 0;
  int32_t last_budget_ = 1;  // budget of the last proposal
};

// --spec propd: heads from p.heads_path (or medusa.heads_path, or the model file), the
// live table seeded from their calibration, pruning per `prune` unless p.no_prune.
std::unique_ptr<Drafter> make_propd_drafter(const PropdParams& p, const MedusaParams& medusa, const PruneParams& prune,
                                            const model::Model& m, core::ThreadPool* pool);

}  // namespace treespec::drafters
