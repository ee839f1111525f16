// `--spec auto`: one drafter that holds several methods (its arms: plain decoding, prompt
// lookup, PTD, Medusa at several tree sizes, a draft model) and proposes with the one the
// budget policy selects for the step (engine::AutoPolicy picks it from measured step time
// and accepted tokens, per batch size; docs/auto.md). Every arm is a lossless drafter, so
// whatever the choice the output is plain decoding's.
//
// Arms that read any step's feedback (Medusa: the heads run on the accepted node's
// hidden state, whoever drafted the tree) observe while they are the step's arm or the
// policy's hint for the next one, so a switch to them drafts at once; arms that can only
// read their own trees (PTD) observe their own steps and resume from their state after a
// pause. Stateless ones (lookup, the draft model, which re-syncs its cache) need nothing.
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
  std::string arms;         // --auto-arms: methods to choose from (comma list of none, lookup, ptd, medusa, draft); "" = all available
  double explore = 0.03;    // --auto-explore: share of decode time spent on trying arms other than the best
  int32_t trial_steps = 3;  // --auto-trial: consecutive steps of one trial
  void validate() const;    // InvalidArgument naming the flag
};

class AutoDrafter final : public Drafter {
 public:
  AutoDrafter() = default;
  // Adds a method with its arms (each with the method's name or name/size); `follows`:
  // the method can observe steps whose tree another arm proposed.
  void add(std::unique_ptr<Drafter> d, bool follows, std::vector<ArmInfo> arms);

  std::string name() const override { return "auto"; }
  void begin(std::span<const int32_t> prompt) override;
  tree::TokenTree propose(const DraftInput& in) override;
  void observe(const StepFeedback& fb) override;
  std::span<const sampling::Distribution* const> draft_distributions() const override;
  int32_t max_nodes() const override;
  std::vector<std::pair<std::string, double>> counters() const override;
  std::span<const ArmInfo> arms() const override { return arms_; }
  void select_arm(int32_t arm, int32_t next) override;

  int32_t current_arm() const { return cur_; }

 private:
  struct Method {
    std::unique_ptr<Drafter> d;
    bool follows = false;
  };
  std::vector<Method> methods_;
  std::vector<ArmInfo> arms_;
  std::vector<int32_t> arm_method_;  // [arms] -> methods_ index
  int32_t cur_ = 0, next_ = 0;
  int32_t proposed_ = -1;            // method that proposed the last tree
  int32_t proposed_arm_ = -1;
  std::vector<int64_t> steps_, accepted_;  // per arm
};

}  // namespace treespec::drafters
