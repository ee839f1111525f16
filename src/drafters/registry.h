// The registry of speculative methods. Each method describes itself in its own folder
// (drafters/<method>/method.cpp: a function returning its MethodInfo) and is listed once
// in registry.cpp's TREESPEC_DRAFTER_METHODS line; nothing else names it. From the
// registry come the method list (--spec's help, the server's /props, bench's `all`),
// every method's flags (the CLI adds them through an OptionSink), which method a flag
// selects, --spec auto's arms, the budget a method asks for, and the factory.
//
// An explicit list rather than self-registering static objects: the drafters are a
// static library, and a linker drops an object file no one references, registrar and all.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drafters/drafter.h"
#include "drafters/spec_config.h"

namespace treespec::drafters {

// One flag of a method, described without a command-line library.
struct OptionDesc {
  OptionDesc(std::string n, std::string h) : names(std::move(n)), help(std::move(h)) {}
  std::string names;  // CLI11 spelling: "--lookup-draft" or "--heads,--medusa-heads" (the first is its name)
  std::string help;
  bool show_default = true;  // help shows the default value
  // Methods besides its own it also applies to (--medusa-topk: propd). A method that can
  // be an arm of --spec auto lends its flags to auto as well.
  std::vector<std::string> also;
  bool any_with_prune = false;  // with --prune it applies to any method (a heads file's prune heads)
  std::string label;            // how errors name it when not `names`' first (e.g. "-md/--model-draft")
};

// Where a method puts its flags: the CLI implements it over CLI11; the registry's own
// implementation records which methods a flag belongs to.
class OptionSink {
 public:
  virtual ~OptionSink() = default;
  virtual void value(const OptionDesc& d, int32_t& v) = 0;
  virtual void value(const OptionDesc& d, float& v) = 0;
  virtual void value(const OptionDesc& d, double& v) = 0;
  virtual void value(const OptionDesc& d, std::string& v) = 0;
  virtual void value(const OptionDesc& d, bool& v) = 0;  // takes 0/1 (true/false)
  // A flag that sets `v` to true (false with `sets_false`: --budget-no-probe-style).
  virtual void flag(const OptionDesc& d, bool& v, bool sets_false = false) = 0;
};

// How --spec auto may use a method as one of its arms.
enum class AutoArm {
  no,        // never an arm
  shadow,    // one arm, graded on every step without running it (side-effect free proposals)
  prefixes,  // arms at tree prefixes of 2, 4, 8, ... nodes up to its own size, graded from one shadow tree
  trial,     // one arm, graded only by trials
  warm_up,   // a trial arm that is tried once at the start
};

struct MethodInfo {
  std::string name;
  std::string summary;  // one line for help texts
  AutoArm auto_arm = AutoArm::no;
  // A server request may choose it ("spec") whatever the server runs: it needs nothing
  // loaded at start (no heads file, no draft model).
  bool per_request = false;
  // Among --spec auto's arms when --auto-arms is not given (default: never).
  std::function<bool(const SpecConfig&, const model::Model*)> default_arm;
  // Its flags, bound to cfg.params<...>() of `cfg`.
  std::function<void(OptionSink&, SpecConfig&)> options;
  // Checks the files its parameters name (IoError naming the flag); may be empty.
  std::function<void(const SpecConfig&)> check_files;
  // The budget it asks for when it decides (propd without --budget: the controller;
  // auto: its own policy); nullopt: --budget as given. May be empty.
  std::function<std::optional<BudgetRequest>(const SpecConfig&)> budget;
  // The drafter. `as`: the method the user named (auto builds its arms with this too),
  // for error messages. InvalidArgument naming a bad parameter.
  std::function<std::unique_ptr<Drafter>(const SpecConfig&, const DrafterEnv&, const std::string& as)> make;
};

// Every method, in registration order (the order of help texts and lists).
const std::vector<MethodInfo>& methods();
// The method called `name`, or null.
const MethodInfo* find_method(std::string_view name);
// The method called `name`; InvalidArgument listing the known ones.
const MethodInfo& method(std::string_view name);

// The methods a flag (by its name, e.g. "--heads") applies to, the one it selects first
// when no --spec is given; empty: not a method's flag. `prune`: --prune was given.
std::vector<std::string> flag_methods(const std::string& name, bool prune);
// How errors name a flag (OptionDesc::label, else `name`).
std::string flag_label(const std::string& name);

// MethodInfo::budget of the methods the latency-model controller sizes unless --budget
// is given (lookup, lookahead, ptd, propd, eagle): the controller with this largest tree
// per sequence and re-plan interval (--budget-no-probe as given); nullopt when --budget
// was given. A fixed large tree pays only where extra rows are cheap: on 2-core CPUs the
// training-free drafters' own 30-50-row trees decoded at 0.08-0.47x plain
// (docs/benchmarks.md, "Training-free drafters under the controller").
std::optional<BudgetRequest> controller_unless_budget_given(const SpecConfig& c, int32_t n_max, int32_t interval);

// IoError "FLAG: cannot open 'PATH'" unless `path` is empty or a readable file
// (MethodInfo::check_files).
void check_readable(const std::string& path, const std::string& flag);

// The end-of-generation ids a drafter should use: env's, else the model's
// (tokenizer::eog_ids of its GGUF).
std::vector<int32_t> eog_ids_for(const DrafterEnv& env);

}  // namespace treespec::drafters
