#include "drafters/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "core/assert.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace treespec::drafters {

// Every method, one line each, in the order of help texts: training-free first, then the
// ones that need trained heads or a second model. Adding a method: a folder with its
// drafter and a method.cpp defining `MethodInfo <name>_method()`, and its name here.
#define TREESPEC_DRAFTER_METHODS(X) X(none) X(auto) X(lookup) X(lookahead) X(ptd) X(medusa) X(propd) X(draft) X(eagle)

#define TREESPEC_DECLARE_METHOD(name) MethodInfo name##_method();
TREESPEC_DRAFTER_METHODS(TREESPEC_DECLARE_METHOD)
#undef TREESPEC_DECLARE_METHOD

// Plain decoding: the tree is the root alone.
MethodInfo none_method() {
  MethodInfo m;
  m.name = "none";
  m.per_request = true;
  m.summary = "plain decoding, one token per step";
  m.auto_arm = AutoArm::shadow;
  m.default_arm = [](const SpecConfig&, const model::Model*) { return true; };
  m.make = [](const SpecConfig&, const DrafterEnv&, const std::string&) -> std::unique_ptr<Drafter> {
    return std::make_unique<NoneDrafter>();
  };
  return m;
}

const std::vector<MethodInfo>& methods() {
#define TREESPEC_METHOD_INFO(name) name##_method(),
  static const std::vector<MethodInfo> all = {TREESPEC_DRAFTER_METHODS(TREESPEC_METHOD_INFO)};
#undef TREESPEC_METHOD_INFO
  return all;
}

const MethodInfo* find_method(std::string_view name) {
  for (const MethodInfo& m : methods()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::vector<std::string> spec_methods() {
  std::vector<std::string> out;
  for (const MethodInfo& m : methods()) out.push_back(m.name);
  return out;
}

const MethodInfo& method(std::string_view name) {
  if (const MethodInfo* m = find_method(name)) return *m;
  throw InvalidArgument(
      fmt::format("unknown speculative method '{}' (known: {})", name, fmt::join(spec_methods(), ", ")));
}

namespace {

// Which methods each flag belongs to, from the methods' own option lists.
struct FlagOwners {
  std::vector<std::string> methods;  // its own first
  bool any_with_prune = false;
  std::string label;
};

class RecordingSink final : public OptionSink {
 public:
  RecordingSink(const MethodInfo& m, std::map<std::string, FlagOwners>& out) : m_(m), out_(out) {}
  void value(const OptionDesc& d, int32_t&) override { record(d); }
  void value(const OptionDesc& d, float&) override { record(d); }
  void value(const OptionDesc& d, double&) override { record(d); }
  void value(const OptionDesc& d, std::string&) override { record(d); }
  void value(const OptionDesc& d, bool&) override { record(d); }
  void flag(const OptionDesc& d, bool&, bool) override { record(d); }

 private:
  void record(const OptionDesc& d) {
    FlagOwners o;
    o.methods.push_back(m_.name);
    for (const std::string& a : d.also) o.methods.push_back(a);
    if (m_.auto_arm != AutoArm::no) o.methods.emplace_back("auto");  // auto takes its arms' flags
    o.any_with_prune = d.any_with_prune;
    o.label = d.label;
    const std::string name = d.names.substr(0, d.names.find(','));
    TREESPEC_ASSERT(out_.count(name) == 0, "two methods register the same flag");
    out_[name] = std::move(o);
  }
  const MethodInfo& m_;
  std::map<std::string, FlagOwners>& out_;
};

const std::map<std::string, FlagOwners>& flag_owners() {
  static const std::map<std::string, FlagOwners> owners = [] {
    std::map<std::string, FlagOwners> out;
    SpecConfig scratch;
    for (const MethodInfo& m : methods()) {
      if (!m.options) continue;
      RecordingSink sink(m, out);
      m.options(sink, scratch);
    }
    return out;
  }();
  return owners;
}

}  // namespace

std::vector<std::string> flag_methods(const std::string& name, bool prune) {
  const auto& owners = flag_owners();
  const auto it = owners.find(name);
  if (it == owners.end() || (prune && it->second.any_with_prune)) return {};
  return it->second.methods;
}

std::string flag_label(const std::string& name) {
  const auto& owners = flag_owners();
  const auto it = owners.find(name);
  return it == owners.end() || it->second.label.empty() ? name : it->second.label;
}

std::optional<BudgetRequest> controller_unless_budget_given(const SpecConfig& c, int32_t n_max, int32_t interval) {
  if (!c.budget.budget.empty()) return std::nullopt;
  BudgetRequest r;
  r.kind = BudgetRequest::Kind::controller;
  r.n_max = n_max;
  r.interval = interval;
  r.probe = c.budget.probe;
  return r;
}

void check_readable(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  if (!std::ifstream(path, std::ios::binary)) throw IoError(fmt::format("{}: cannot open '{}'", flag, path));
}

std::vector<int32_t> eog_ids_for(const DrafterEnv& env) {
  if (!env.eog_ids.empty() || env.model == nullptr) return env.eog_ids;
  return tokenizer::eog_ids(env.model->gguf(), env.model->hparams().n_vocab);
}

}  // namespace treespec::drafters
