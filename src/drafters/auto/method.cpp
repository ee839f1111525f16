// --spec auto in the method registry (drafters/registry.h): its arms are the registered
// methods that say how auto may use them (MethodInfo::auto_arm).
#include <fmt/format.h>

#include <algorithm>

#include "drafters/auto/auto_drafter.h"
#include "drafters/registry.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {

std::vector<std::string> arm_capable() {
  std::vector<std::string> out;
  for (const MethodInfo& m : methods()) {
    if (m.auto_arm != AutoArm::no) out.push_back(m.name);
  }
  return out;
}

// The methods its arms come from: --auto-arms (none always among them: the fallback that
// never loses), else every arm-capable method available for this config and model.
std::vector<std::string> arm_methods(const SpecConfig& cfg, const model::Model* model) {
  const std::string& s = cfg.params<AutoParams>().arms;
  const std::vector<std::string> capable = arm_capable();
  std::vector<std::string> out;
  if (s.empty()) {
    for (const MethodInfo& m : methods()) {
      if (m.auto_arm != AutoArm::no && m.default_arm && m.default_arm(cfg, model)) out.push_back(m.name);
    }
    return out;
  }
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string name = s.substr(at, comma - at);
    if (std::find(capable.begin(), capable.end(), name) == capable.end()) {
      throw InvalidArgument(
          fmt::format("--auto-arms: unknown method '{}' in '{}' (known: {})", name, s, fmt::join(capable, ", ")));
    }
    if (std::find(out.begin(), out.end(), name) != out.end())
      throw InvalidArgument(fmt::format("--auto-arms: '{}' given twice in '{}'", name, s));
    out.push_back(name);
    at = comma + 1;
  }
  // none first, always: the policy's arm 0 is plain decoding (its step is the unit of cost).
  const auto none = std::find(out.begin(), out.end(), "none");
  if (none == out.end()) {
    out.insert(out.begin(), "none");
  } else {
    std::rotate(out.begin(), none, none + 1);
  }
  return out;
}

std::unique_ptr<Drafter> make_auto(const SpecConfig& cfg, const DrafterEnv& env) {
  cfg.params<AutoParams>().validate();
  auto a = std::make_unique<AutoDrafter>();
  for (const std::string& name : arm_methods(cfg, env.model)) {
    const MethodInfo& m = method(name);
    SpecConfig sub = cfg;
    sub.method = name;
    std::unique_ptr<Drafter> d = m.make(sub, env, "auto");
    const int32_t own = std::max(1, d->max_nodes());
    switch (m.auto_arm) {
      case AutoArm::prefixes: {
        // Best-first tree prefixes of 2, 4, 8, ... nodes up to the tree's own size, all
        // graded from one shadow tree.
        std::vector<ArmInfo> arms;
        for (int32_t n = 2; n < own; n *= 2) arms.push_back({fmt::format("{}/{}", name, n), n});
        arms.push_back({fmt::format("{}/{}", name, own), own});
        a->add(std::move(d), /*follows=*/true, /*shadow=*/true, std::move(arms));
        break;
      }
      case AutoArm::shadow: a->add(std::move(d), false, /*shadow=*/true, {ArmInfo{name, own}}); break;
      // Graded only by trials. A warm-up arm (the draft model) is tried once at the start;
      // PTD's pool pays only after many steps and it feeds tens of rows: tried when its
      // credit allows.
      case AutoArm::trial:
      case AutoArm::warm_up:
        a->add(std::move(d), false, false, {ArmInfo{name, own, /*warm_up=*/m.auto_arm == AutoArm::warm_up}});
        break;
      case AutoArm::no: break;  // arm_methods() lists none of these
    }
  }
  return a;
}

}  // namespace

MethodInfo auto_method() {
  MethodInfo m;
  m.name = "auto";
  m.summary = "chooses among the other methods' arms (and tree sizes) step by step, from measured speed";
  m.options = [](OptionSink& s, SpecConfig& c) {
    auto& p = c.params<AutoParams>();
    OptionDesc arms{"--auto-arms",
                    "auto: methods to choose from, a comma list of none, lookup, ptd, medusa, draft, eagle (default: "
                    "none, lookup, ptd, medusa when heads are given or in the model, draft when -md or --draft-layers "
                    "is given, eagle when --eagle is given)"};
    arms.show_default = false;
    s.value(arms, p.arms);
    s.value({"--auto-explore",
             "auto: share of decode time spent on trials of the arms that cannot be graded without running (ptd, "
             "draft)"},
            p.explore);
    s.value({"--auto-trial", "auto: consecutive steps per trial of an arm"}, p.trial_steps);
    s.value({"--auto-shadow-every",
             "auto: Medusa's heads and EAGLE's largest tree run for one sequence every N-th step (4x rarer while "
             "neither is near the best), so their arms are graded while another drafts"},
            p.shadow_every);
  };
  // auto picks the method and the tree size itself: its own policy, never --budget.
  m.budget = [](const SpecConfig& c) -> std::optional<BudgetRequest> {
    if (!c.budget.budget.empty()) {
      throw InvalidArgument(
          fmt::format("--budget {} does not apply to --spec auto: it chooses the method and the tree size itself "
                      "(tune it with --auto-arms, --auto-explore)",
                      c.budget.budget));
    }
    const AutoParams& p = c.params<AutoParams>();
    p.validate();
    BudgetRequest r;
    r.kind = BudgetRequest::Kind::choose;
    r.explore = p.explore;
    r.trial_steps = p.trial_steps;
    r.shadow_every = p.shadow_every;
    r.probe = c.budget.probe;
    return r;
  };
  m.make = [](const SpecConfig& c, const DrafterEnv& env, const std::string&) { return make_auto(c, env); };
  return m;
}

}  // namespace treespec::drafters
