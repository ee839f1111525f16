#include "drafters/auto/auto_drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/assert.h"
#include "treespec/status.h"

namespace treespec::drafters {

void AutoParams::validate() const {
  if (!(explore >= 0.0 && explore <= 0.5)) throw InvalidArgument(fmt::format("--auto-explore must be in [0, 0.5], got {}", explore));
  if (trial_steps < 1 || trial_steps > 64) throw InvalidArgument(fmt::format("--auto-trial must be in 1..64, got {}", trial_steps));
}

void AutoDrafter::add(std::unique_ptr<Drafter> d, bool follows, std::vector<ArmInfo> arms) {
  TREESPEC_ASSERT(d != nullptr && !arms.empty(), "auto: a method needs a drafter and at least one arm");
  const auto m = static_cast<int32_t>(methods_.size());
  methods_.push_back({std::move(d), follows});
  for (auto& a : arms) {
    arms_.push_back(std::move(a));
    arm_method_.push_back(m);
  }
  steps_.assign(arms_.size(), 0);
  accepted_.assign(arms_.size(), 0);
}

void AutoDrafter::begin(std::span<const int32_t> prompt) {
  for (auto& m : methods_) m.d->begin(prompt);
  cur_ = next_ = 0;
  proposed_ = proposed_arm_ = -1;
}

void AutoDrafter::select_arm(int32_t arm, int32_t next) {
  const auto n = static_cast<int32_t>(arms_.size());
  TREESPEC_ASSERT(arm >= 0 && arm < n && next >= 0 && next < n, "auto: arm out of range");
  cur_ = arm;
  next_ = next;
}

tree::TokenTree AutoDrafter::propose(const DraftInput& in) {
  TREESPEC_ASSERT(!methods_.empty(), "auto: no methods");
  const int32_t m = arm_method_[static_cast<size_t>(cur_)];
  Drafter& d = *methods_[static_cast<size_t>(m)].d;
  DraftInput sub = in;
  sub.budget = std::min(in.budget, std::max(1, arms_[static_cast<size_t>(cur_)].max_nodes));
  set_prune(d.prune());  // the engine reads the pruning of the drafter it was given
  proposed_ = m;
  proposed_arm_ = cur_;
  return d.propose(sub);
}

void AutoDrafter::observe(const StepFeedback& fb) {
  if (proposed_ < 0) return;
  steps_[static_cast<size_t>(proposed_arm_)] += 1;
  accepted_[static_cast<size_t>(proposed_arm_)] += fb.result.n_accepted();
  const int32_t next_method = arm_method_[static_cast<size_t>(next_)];
  for (size_t j = 0; j < methods_.size(); ++j) {
    const auto jm = static_cast<int32_t>(j);
    if (jm == proposed_ || (methods_[j].follows && jm == next_method)) methods_[j].d->observe(fb);
  }
}

std::span<const sampling::Distribution* const> AutoDrafter::draft_distributions() const {
  if (proposed_ < 0) return {};
  return methods_[static_cast<size_t>(proposed_)].d->draft_distributions();
}

int32_t AutoDrafter::max_nodes() const {
  int32_t most = 1;
  for (const auto& a : arms_) most = std::max(most, a.max_nodes);
  return most;
}

std::vector<std::pair<std::string, double>> AutoDrafter::counters() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t a = 0; a < arms_.size(); ++a) {
    out.emplace_back(arms_[a].name + ".steps", static_cast<double>(steps_[a]));
    out.emplace_back(arms_[a].name + ".accepted", static_cast<double>(accepted_[a]));
  }
  return out;
}

}  // namespace treespec::drafters
