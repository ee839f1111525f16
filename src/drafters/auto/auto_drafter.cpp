#include "drafters/auto/auto_drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/assert.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {
// Shadow trees wait at most this many steps for their text (a sequence that ends leaves
// its last few ungraded).
constexpr size_t kMaxPending = 64;
constexpr size_t kMaxSamples = 4096;
// Weight of a new sample in a sequence's own estimate of an arm's tokens per step (faster
// than the policy's batch-wide one: the text changes within a request).
constexpr double kSeqAlpha = 0.1;
}  // namespace

void AutoParams::validate() const {
  if (!(explore >= 0.0 && explore <= 0.5))
    throw InvalidArgument(fmt::format("--auto-explore must be in [0, 0.5], got {}", explore));
  if (trial_steps < 1 || trial_steps > 64)
    throw InvalidArgument(fmt::format("--auto-trial must be in 1..64, got {}", trial_steps));
  if (shadow_every < 1 || shadow_every > 1024) {
    throw InvalidArgument(fmt::format("--auto-shadow-every must be in 1..1024, got {}", shadow_every));
  }
}

void AutoDrafter::add(std::unique_ptr<Drafter> d, bool follows, bool shadow, std::vector<ArmInfo> arms) {
  TREESPEC_ASSERT(d != nullptr && !arms.empty(), "auto: a method needs a drafter and at least one arm");
  Method m;
  m.d = std::move(d);
  m.follows = follows;
  m.shadow = shadow;
  m.ready = !follows;  // a follower needs the previous step's feedback; the others need nothing
  const auto mi = static_cast<int32_t>(methods_.size());
  for (auto& a : arms) {
    a.shadowed = shadow;
    a.observes = follows;
    m.max_nodes = std::max(m.max_nodes, a.max_nodes);
    m.arms.push_back(static_cast<int32_t>(arms_.size()));
    arms_.push_back(std::move(a));
    arm_method_.push_back(mi);
  }
  methods_.push_back(std::move(m));
  steps_.assign(arms_.size(), 0);
  accepted_.assign(arms_.size(), 0);
  shadow_graded_.assign(arms_.size(), 0);
  seq_tok_.assign(arms_.size(), 0.0);
  seq_n_.assign(arms_.size(), 0.0);
}

bool AutoDrafter::wants_prompt_hidden() const {
  return std::any_of(methods_.begin(), methods_.end(), [](const Method& m) { return m.d->wants_prompt_hidden(); });
}

void AutoDrafter::observe_prompt(int32_t first, int32_t n, const float* hidden) {
  for (auto& m : methods_) {
    if (m.d->wants_prompt_hidden()) m.d->observe_prompt(first, n, hidden);
  }
}

void AutoDrafter::begin(std::span<const int32_t> prompt) {
  for (auto& m : methods_) {
    m.d->begin(prompt);
    m.ready = !m.follows;
  }
  cur_ = next_ = 0;
  proposed_ = proposed_arm_ = -1;
  pending_.clear();
  samples_.clear();
  std::fill(seq_tok_.begin(), seq_tok_.end(), 0.0);
  std::fill(seq_n_.begin(), seq_n_.end(), 0.0);
}

void AutoDrafter::record(const ArmSample& smp) {
  // Without a policy taking them (an AutoDrafter used on its own), keep only the newest.
  if (samples_.size() >= kMaxSamples) samples_.erase(samples_.begin(), samples_.begin() + kMaxSamples / 2);
  samples_.push_back(smp);
  const auto a = static_cast<size_t>(smp.arm);
  seq_n_[a] += 1.0;
  seq_tok_[a] += std::max(kSeqAlpha, 1.0 / seq_n_[a]) * (smp.tokens - seq_tok_[a]);
}

void AutoDrafter::arm_acceptance(std::span<double> tok, std::span<double> weight) const {
  for (size_t a = 0; a < arms_.size() && a < tok.size() && a < weight.size(); ++a) {
    tok[a] = seq_tok_[a];
    weight[a] = std::min(seq_n_[a], 2.0 / kSeqAlpha - 1.0);  // an EMA's effective number of samples
  }
}

void AutoDrafter::select_arm(int32_t arm, int32_t next, bool shadow) {
  const auto n = static_cast<int32_t>(arms_.size());
  TREESPEC_ASSERT(arm >= 0 && arm < n && next >= 0 && next < n, "auto: arm out of range");
  cur_ = arm;
  next_ = next;
  shadow_ = shadow;
}

tree::TokenTree AutoDrafter::propose(const DraftInput& in) {
  TREESPEC_ASSERT(!methods_.empty(), "auto: no methods");
  const int32_t chosen = arm_method_[static_cast<size_t>(cur_)];
  const int32_t n = std::min(in.budget, std::max(1, arms_[static_cast<size_t>(cur_)].max_nodes));
  const auto root_index = static_cast<int64_t>(in.context.size()) - 1;
  tree::TokenTree out;
  for (size_t j = 0; j < methods_.size(); ++j) {
    Method& m = methods_[j];
    const bool is_chosen = static_cast<int32_t>(j) == chosen;
    // A method whose bigger trees cost more (EAGLE) drafts its largest only when asked.
    const bool shadow = m.shadow && m.ready && (m.asked || !m.d->drafting_grows_with_budget());
    if (!is_chosen && !shadow) continue;
    DraftInput sub = in;
    sub.budget = shadow ? m.max_nodes : n;  // a shadowed method drafts its largest tree; the arm takes a prefix
    tree::TokenTree t = m.d->propose(sub);
    if (is_chosen) {
      out = t.prefix(n);        // smaller trees are prefixes of the largest (best-first order)
      set_prune(m.d->prune());  // the engine reads the pruning of the drafter it was given
    }
    if (m.shadow) {  // also the chosen arm's own tree: it grades the method's smaller arms
      if (pending_.size() >= kMaxPending) pending_.erase(pending_.begin());
      pending_.push_back({static_cast<int32_t>(j), is_chosen ? cur_ : -1, root_index, sub.budget, std::move(t)});
    }
  }
  proposed_ = chosen;
  proposed_arm_ = cur_;
  proposed_root_ = root_index;
  return out;
}

bool AutoDrafter::grade(const Pending& p, std::span<const int32_t> context) {
  const tree::TokenTree& t = p.tree;
  std::vector<int32_t> chain;  // the matched path, node indices (increasing)
  int32_t node = 0;
  for (int64_t idx = p.root_index + 1;; ++idx) {
    const auto& kids = t.children(node);
    if (kids.empty()) break;
    if (idx >= static_cast<int64_t>(context.size())) return false;  // the text that decides is not there yet
    int32_t next = -1;
    for (int32_t c : kids) {
      if (t.is_candidate(c) && t.token(c) == context[static_cast<size_t>(idx)]) {
        next = c;
        break;
      }
    }
    if (next < 0) break;
    chain.push_back(next);
    node = next;
  }
  for (int32_t a : methods_[static_cast<size_t>(p.method)].arms) {
    const int32_t cap = arms_[static_cast<size_t>(a)].max_nodes;
    if (a == p.ran_arm || cap > p.budget) continue;  // the step's own result; a tree cut smaller than the arm
    int32_t acc = 0;
    while (static_cast<size_t>(acc) < chain.size() && chain[static_cast<size_t>(acc)] < cap) ++acc;
    record({a, 1 + acc, std::min(cap, t.size()), false, p.root_index});
    shadow_graded_[static_cast<size_t>(a)] += 1;
  }
  return true;
}

void AutoDrafter::observe(const StepFeedback& fb) {
  if (proposed_ < 0) return;
  const auto arm = static_cast<size_t>(proposed_arm_);
  steps_[arm] += 1;
  accepted_[arm] += fb.result.n_accepted();
  record({proposed_arm_, 1 + fb.result.n_accepted(), fb.tree.size(), true, proposed_root_});
  const int32_t next_method = arm_method_[static_cast<size_t>(next_)];
  for (size_t j = 0; j < methods_.size(); ++j) {
    Method& m = methods_[j];
    const auto jm = static_cast<int32_t>(j);
    // A method that reads the target's hidden states (EAGLE) sees every step's: copying
    // them costs nothing next to the rows it would otherwise lose from its cache.
    const bool obs =
        jm == proposed_ || m.d->wants_prompt_hidden() || (m.follows && (jm == next_method || (m.shadow && shadow_)));
    if (obs) m.d->observe(fb);
    if (m.follows) m.ready = obs;
    m.asked = m.shadow && shadow_;
  }
  std::erase_if(pending_, [&](const Pending& p) { return grade(p, fb.context); });
}

void AutoDrafter::take_arm_samples(std::vector<ArmSample>& out) {
  out.insert(out.end(), samples_.begin(), samples_.end());
  samples_.clear();
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
    if (arms_[a].shadowed) out.emplace_back(arms_[a].name + ".shadow_graded", static_cast<double>(shadow_graded_[a]));
  }
  return out;
}

}  // namespace treespec::drafters
