// Drafter: proposes the token tree a sequence verifies each step, and learns from the
// outcome. Every speculative method in treespec is a Drafter; the model, KV cache and
// verifiers are shared. Plain decoding is the drafter that proposes only the root.
//
// Contract: propose() returns a tree whose node 0 is `in.root` and that has at most
// `in.budget` nodes (the engine clamps the budget to the context left). Nodes marked
// aux are fed to the model for the drafter's own use and are never accepted.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sampling/sampling.h"
#include "tree/token_tree.h"
#include "verify/verify.h"

namespace treespec::core {
class ThreadPool;
}
namespace treespec::model {
class Model;
}

namespace treespec::drafters {

// One arm of a drafter that combines several methods (--spec auto, drafters/auto): a
// method at a tree size. The budget policy picks one arm per step (Drafter::select_arm).
struct ArmInfo {
  std::string name;       // e.g. "none", "lookup", "medusa/4"
  int32_t max_nodes = 1;  // largest tree it proposes (incl. the root)
  bool warm_up = false;   // tried once at the start (arms that are not shadowed)
  bool shadowed = false;  // graded on steps it does not draft (ArmSample), so never needs a trial
  bool observes = false;  // must observe a step to draft or be graded after it (Medusa: a heads pass per sequence)
};

// One graded outcome of an arm for one sequence at one step: the tokens the step emitted
// with its tree (`ran`) or would have emitted (1 + the longest path of its tree that the
// text produced afterwards matches: exact for greedy and coupled sampling, where the text
// does not depend on the drafter), and its rows.
struct ArmSample {
  int32_t arm = 0;
  int32_t tokens = 1;
  int32_t rows = 1;
  bool ran = false;
  int64_t position = 0;  // context index of the tree's root
};

// What early pruning scores a tree's rows with after an early layer: next-token logits
// from residual rows. The engine sees only this interface; the propd module's PruneHead
// (a trained head, or the logit lens: final norm + the model's output matrix) implements
// it, and any drafter may supply one through its PruneSpec.
class PruneScorer {
 public:
  virtual ~PruneScorer() = default;
  // logits[n, n_vocab] from residual rows x[n, n_embd] of model m taken after the
  // PruneSpec's layer. work: [2 * n * n_embd] floats of scratch.
  virtual void logits(const model::Model& m, const float* x, int32_t n, float* work, float* logits,
                      core::ThreadPool* pool) const = 0;
  // For reports (run --json stats.prune.head): "logit lens", "trained", ...
  virtual const char* kind() const = 0;
};

// Early pruning of a drafter's candidate nodes inside the verification forward (ProPD,
// docs/propd.md): after `layer` layers a child survives only if its token is among its
// parent's `top_k` next tokens under `head` (sampling::top_k_ids); pruned subtrees skip
// the later layers. The root and aux nodes are never tested (an aux node goes only with
// a pruned candidate ancestor). Off when layer == 0; when on, `head` must be set.
struct PruneSpec {
  int32_t layer = 0;
  int32_t top_k = 0;
  std::shared_ptr<const PruneScorer> head;
  bool enabled() const { return layer > 0 && top_k > 0; }
};

struct DraftInput {
  int32_t slot = 0;                  // KV cache sequence slot
  std::span<const int32_t> context;  // prompt + generated tokens; context.back() is the root
  int32_t n_past = 0;                // committed KV cells (= context.size() - 1)
  int32_t budget = 1;                // max tree nodes including the root
  // The budget policy's floor on a node's chance of acceptance for this step (0 = none):
  // a drafter that knows each node's chance (dynamic trees) leaves out the nodes below
  // it, as not worth their rows (BudgetPolicy::min_node_value).
  double min_value = 0.0;
  // The sequence's sampling parameters (nullptr: greedy). Drafters that sample their
  // proposals draw them from distributions warped the same way.
  const sampling::SamplingParams* sampling = nullptr;
  // The verifier samples with coupled noise (verify::Mode::coupled at temp > 0): a
  // drafter that samples should draw with sampling::coupled_choice at the draft's
  // absolute position (context.size() + depth - 1), the noise the verifier uses there.
  bool coupled = false;
};

// What the target model said about the proposed tree.
struct StepFeedback {
  const tree::TokenTree& tree;
  const verify::VerifyResult& result;         // accepted path (from the root) and bonus
  std::span<const int32_t> node_argmax;       // per node; -1 where the node has no logits
  std::span<const float* const> node_logits;  // per node [n_vocab] or nullptr (pruned)
  std::span<const float* const> node_hidden;  // per node final-normed hidden [n_embd] or nullptr
  std::span<const int32_t> context;           // context after this step's tokens were appended
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // A new sequence starts with this prompt (before prefill).
  virtual void begin(std::span<const int32_t> prompt) {}
  virtual tree::TokenTree propose(const DraftInput& in) = 0;
  virtual void observe(const StepFeedback& fb) {}
  // Drafters that read the target's hidden states (EAGLE) also want those of the prompt:
  // when true, the engine's prefill passes the final-normed hidden state of every row it
  // computes to observe_prompt(): rows first .. first + n - 1 of the tokens begin() gave,
  // hidden [n, n_embd], in order, after begin(). Rows of a cached prefix are not computed
  // and never passed (the first call may start after row 0).
  virtual bool wants_prompt_hidden() const { return false; }
  virtual void observe_prompt(int32_t first, int32_t n, const float* hidden) {}
  // Whether a bigger tree costs more to draft (EAGLE: one draft pass per level grown).
  // --spec auto then drafts such a method's largest tree only on the steps the policy
  // asks for a shadow grade, and the chosen arm's size otherwise.
  virtual bool drafting_grows_with_budget() const { return false; }
  // For lossless sampling with stochastic drafts: per node of the last proposed tree,
  // the distribution its children were drawn from (nullptr = deterministic children).
  // Empty = all deterministic (point masses).
  virtual std::span<const sampling::Distribution* const> draft_distributions() const { return {}; }
  // Largest tree this drafter ever proposes (used to size scratch rows); 0 = no limit.
  virtual int32_t max_nodes() const { return 1; }
  // Drafter-specific counters for reports, as (name, value) pairs; `run --json` prints them
  // under stats.drafter. Empty by default.
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
  // The drafter's own acceptance model, for the budget controller: out[n-1] = expected
  // accepted drafted tokens of the tree it would propose with budget n, n = 1..out.size()
  // (out[0] = 0). false = no model (the controller then learns one from outcomes); an
  // empty `out` only asks which.
  virtual bool expected_accepted(std::span<double> out) const { return false; }

  // Drafters that combine several methods (--spec auto): their arms, and the choice of
  // the next proposal's arm. `next` is the arm the policy expects to pick for the step
  // after; arms that must observe steps (ArmInfo::observes) observe this one when they
  // are `arm` or `next`, or when `shadow` asks for a grade. Every other drafter has no
  // arms and ignores the call.
  virtual std::span<const ArmInfo> arms() const { return {}; }
  virtual void select_arm(int32_t arm, int32_t next, bool shadow) {}
  // Appends the arm samples graded since the last call and forgets them.
  virtual void take_arm_samples(std::vector<ArmSample>& out) {}
  // This sequence's own estimate of each arm's tokens per step: tok[a] and the weight
  // (samples) behind it, zero where it has none. Acceptance is a property of the text,
  // so the policy blends it with the batch-wide estimate.
  virtual void arm_acceptance(std::span<double> tok, std::span<double> weight) const {}

  // Early pruning of this drafter's trees (set by the factory from --prune / --spec propd).
  const PruneSpec& prune() const { return prune_; }
  void set_prune(PruneSpec p) { prune_ = std::move(p); }

 private:
  PruneSpec prune_;
};

// Plain autoregressive decoding: the one-node tree.
class NoneDrafter final : public Drafter {
 public:
  std::string name() const override { return "none"; }
  tree::TokenTree propose(const DraftInput& in) override { return tree::TokenTree(in.context.back()); }
};

}  // namespace treespec::drafters
