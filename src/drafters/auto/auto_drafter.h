// `--spec auto`: one drafter that holds several methods (its arms: plain decoding, prompt
// lookup, PTD, Medusa at several tree sizes, a draft model) and proposes with the one the
// budget policy selects for the step (engine::AutoPolicy; docs/auto.md). Every arm is a
// lossless drafter, so whatever the choice the output is plain decoding's.
//
// Shadow grading: the text does not depend on the drafter (greedy, coupled sampling), so
// an arm's tree can be graded against the text without verifying it. Every step the
// shadowed methods (lookup: always; Medusa: when its heads ran on the previous step's
// accepted node) also propose their largest tree, and once the text is known each of
// their arms is graded (Medusa's sizes are prefixes of one best-first tree) into
// ArmSamples for the policy: no trial steps needed to know what they would accept.
//
// Medusa observes (runs its heads) while it is the step's arm or the policy's hint for
// the next one, and on the steps the policy asks for a shadow grade (one sequence every
// `shadow_every`-th step; docs/auto.md). EAGLE observes every step (its cache needs the
// hidden states), but a bigger tree costs it more draft passes: it drafts its largest
// tree only when asked for a grade, else the chosen arm's size (which grades its smaller
// arms). PTD observes only its own
// steps (it reads its own aux rows) and resumes from its state after a pause; the draft
// model re-syncs its cache with the context when it drafts again.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "drafters/drafter.h"

namespace treespec::drafters {

struct AutoParams {
  std::string
      arms;  // --auto-arms: methods to choose from (comma list of none, lookup, ptd, medusa, draft, eagle); "" = all available
  double explore = 0.01;     // --auto-explore: share of decode time spent on trials of arms that are not shadowed
  int32_t trial_steps = 3;   // --auto-trial: consecutive steps of one trial
  int32_t shadow_every = 4;  // --auto-shadow-every: Medusa's heads run for one sequence every N-th step to grade it
  void validate() const;     // InvalidArgument naming the flag
};

class AutoDrafter final : public Drafter {
 public:
  AutoDrafter() = default;
  // Adds a method with its arms (name or name/size, max_nodes = the arm's tree size).
  // `follows`: the method can observe steps whose tree another arm proposed; `shadow`:
  // its proposals are graded on every step it is ready for (it must then be side-effect
  // free: propose() may be called on steps it does not draft).
  void add(std::unique_ptr<Drafter> d, bool follows, bool shadow, std::vector<ArmInfo> arms);

  std::string name() const override { return "auto"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  bool wants_prompt_hidden() const override;
  void observe_prompt(int32_t first, int32_t n, const float* hidden) override;
  std::span<const sampling::Distribution* const> draft_distributions() const override;
  int32_t max_nodes() const override;
  std::vector<std::pair<std::string, double>> counters() const override;
  std::span<const ArmInfo> arms() const override { return arms_; }
  void select_arm(int32_t arm, int32_t next, bool shadow) override;
  void take_arm_samples(std::vector<ArmSample>& out) override;
  void arm_acceptance(std::span<double> tok, std::span<double> weight) const override;

 private:
  struct Method {
    std::unique_ptr<Drafter> d;
    bool follows = false;
    bool shadow = false;
    bool ready = false;         // observed the last step (a follower), or needs nothing (lookup)
    bool asked = false;         // the policy asked this sequence for a shadow grade at the last step
    int32_t max_nodes = 1;      // largest arm
    std::vector<int32_t> arms;  // its arms
  };
  // A shadow proposal waiting for the text that grades it.
  struct Pending {
    int32_t method = 0;
    int32_t ran_arm = -1;    // the arm that drafted the step from this tree (-1: none of the method's)
    int64_t root_index = 0;  // context index of the tree's root
    int32_t budget = 0;      // the budget it was drafted with: arms larger than that are not graded from it
    tree::TokenTree tree;
  };
  // Grades p against `context`: false while the text is too short to tell.
  bool grade(const Pending& p, std::span<const int32_t> context);

  std::vector<Method> methods_;
  std::vector<ArmInfo> arms_;
  std::vector<int32_t> arm_method_;  // [arms] -> methods_ index
  int32_t cur_ = 0, next_ = 0;
  bool shadow_ = false;    // followers observe this step to be graded
  int32_t proposed_ = -1;  // method that proposed the last tree
  int32_t proposed_arm_ = -1;
  int64_t proposed_root_ = 0;
  std::vector<Pending> pending_;
  std::vector<ArmSample> samples_;
  void record(const ArmSample& s);                         // into samples_ and this sequence's estimates
  std::vector<double> seq_tok_, seq_n_;                    // per arm: this sequence's EMA of tokens per step, samples
  std::vector<int64_t> steps_, accepted_, shadow_graded_;  // per arm
};

}  // namespace treespec::drafters
