// Method specs: how `treespec bench` names a speculative method together with its
// parameters, so one sweep can hold several variants of the same drafter
// (`lookup:draft=4`, `propd:no-prune`, `medusa:tree=auto:32`).
//
// A spec is NAME plus parameters; each parameter KEY[=VALUE] maps to the method's own
// CLI flag `--NAME-KEY [VALUE]` (the flags every drafter registers in the shared
// add_spec_options), or to `KEY [VALUE]` verbatim when KEY already starts with "--".
// The bench library never interprets parameters itself: the caller resolves a spec into
// a drafters::SpecConfig (the CLI does it with the same flag table `run` uses), so a new
// drafter joins the bench the moment it joins the factory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace treespec::bench {

struct MethodSpec {
  std::string label;  // unique name of this variant in tables and JSON (canonical form)
  std::string name;   // drafter method, e.g. "lookup"
  std::vector<std::pair<std::string, std::string>> params;  // (key, value); value "" = flag
  // Came from "all" rather than being named: a sweep may drop it (with a note) when the
  // model cannot run it, e.g. Medusa without heads in the GGUF.
  bool from_all = false;

  // ["--lookup-draft", "4", "--propd-no-prune", ...]
  std::vector<std::string> to_flags() const;
};

// One item of a --spec list: NAME[:PARAM[:PARAM...]], PARAM = KEY[=VALUE]. A segment
// that does not start like a key (a letter or "--") continues the previous value, so
// `medusa:tree=auto:32` is one parameter tree="auto:32". InvalidArgument on bad syntax.
MethodSpec parse_method_item(std::string_view text);

// A --method argument: NAME[:PARAM[,PARAM...]] (commas separate parameters; values may
// hold ':'). InvalidArgument on bad syntax.
MethodSpec parse_method_arg(std::string_view text);

// A --spec list: comma-separated items (see parse_method_item). "all" expands to every
// name in `known`. Items are not checked against `known` here (see validate_methods).
std::vector<MethodSpec> parse_spec_list(std::string_view list, const std::vector<std::string>& known);

// Checks names against `known` and labels for duplicates; puts "none" first (adding it
// when missing: every speedup is measured against it in the same run).
std::vector<MethodSpec> normalize_methods(std::vector<MethodSpec> methods, const std::vector<std::string>& known);

// Comma-separated integers in [lo, hi], e.g. "1,2,4,8"; `flag` names the option in errors.
std::vector<int32_t> parse_int_list(std::string_view list, std::string_view flag, int32_t lo, int32_t hi);

// Tree budgets: comma-separated integers >= 1, "own" (= 0: each drafter's own size, the
// default) or "dynamic" / its alias "auto" (= kBudgetDynamic: the budget controller,
// engine/budget_controller.h; `auto` means the same in run, bench and serve).
constexpr int32_t kBudgetDynamic = -1;
std::vector<int32_t> parse_budget_list(std::string_view list);

std::string budget_label(int32_t budget);  // "own", "dynamic" or the number

}  // namespace treespec::bench
