#include "bench/method_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "treespec/status.h"

namespace treespec::bench {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t b = 0;
  for (;;) {
    const size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  return out;
}

bool is_name(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// A segment starts a new parameter when it looks like KEY or KEY=... (KEY a name or --name).
bool starts_key(std::string_view seg) {
  const std::string_view key = seg.substr(0, seg.find('='));
  if (key.substr(0, 2) == "--") return is_name(key.substr(2));
  return is_name(key);
}

void add_param(MethodSpec& m, std::string_view seg, std::string_view whole) {
  const size_t eq = seg.find('=');
  const std::string_view key = trim(seg.substr(0, eq));
  if (!(key.substr(0, 2) == "--" ? is_name(key.substr(2)) : is_name(key))) {
    throw InvalidArgument(
        fmt::format("method spec '{}': '{}' is not a parameter name (expected KEY or KEY=VALUE)", whole, key));
  }
  std::string value = eq == std::string_view::npos ? std::string() : std::string(trim(seg.substr(eq + 1)));
  if (eq != std::string_view::npos && value.empty()) {
    throw InvalidArgument(fmt::format("method spec '{}': parameter '{}' has an empty value", whole, key));
  }
  m.params.emplace_back(std::string(key), std::move(value));
}

MethodSpec finish(MethodSpec m) {
  m.label = m.name;
  for (const auto& [k, v] : m.params) m.label += ":" + k + (v.empty() ? "" : "=" + v);
  return m;
}

MethodSpec parse_head(std::string_view text, std::string_view& rest) {
  text = trim(text);
  const size_t colon = text.find(':');
  const std::string_view name = trim(text.substr(0, colon));
  if (!is_name(name)) {
    throw InvalidArgument(fmt::format("method spec '{}': '{}' is not a method name", text, name));
  }
  MethodSpec m;
  m.name = std::string(name);
  rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (colon != std::string_view::npos && trim(rest).empty()) {
    throw InvalidArgument(fmt::format("method spec '{}': nothing after ':'", text));
  }
  return m;
}

}  // namespace

std::vector<std::string> MethodSpec::to_flags() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : params) {
    out.push_back(k.substr(0, 2) == "--" ? k : "--" + name + "-" + k);
    if (!v.empty()) out.push_back(v);
  }
  return out;
}

MethodSpec parse_method_item(std::string_view text) {
  std::string_view rest;
  MethodSpec m = parse_head(text, rest);
  if (!rest.empty()) {
    std::string pending;
    bool have = false;
    for (std::string_view seg : split(rest, ':')) {
      if (have && !starts_key(seg)) {
        pending += ':';  // continues a value such as auto:32
        pending += seg;
        continue;
      }
      if (have) add_param(m, pending, text);
      pending = std::string(seg);
      have = true;
    }
    if (have) add_param(m, pending, text);
  }
  return finish(std::move(m));
}

MethodSpec parse_method_arg(std::string_view text) {
  std::string_view rest;
  MethodSpec m = parse_head(text, rest);
  if (!rest.empty()) {
    for (std::string_view seg : split(rest, ',')) {
      if (trim(seg).empty()) throw InvalidArgument(fmt::format("method spec '{}': empty parameter", trim(text)));
      add_param(m, seg, trim(text));
    }
  }
  return finish(std::move(m));
}

std::vector<MethodSpec> parse_spec_list(std::string_view list, const std::vector<std::string>& known) {
  std::vector<MethodSpec> out;
  for (std::string_view item : split(list, ',')) {
    item = trim(item);
    if (item.empty()) throw InvalidArgument(fmt::format("--spec '{}': empty item", list));
    if (item == "all") {
      for (const auto& k : known) {
        out.push_back(parse_method_item(k));
        out.back().from_all = true;
      }
      continue;
    }
    out.push_back(parse_method_item(item));
  }
  return out;
}

std::vector<MethodSpec> normalize_methods(std::vector<MethodSpec> methods, const std::vector<std::string>& known) {
  std::vector<MethodSpec> out;
  for (auto& m : methods) {
    if (std::find(known.begin(), known.end(), m.name) == known.end()) {
      throw InvalidArgument(
          fmt::format("unknown speculative method '{}' in '{}' (known: {})", m.name, m.label, fmt::join(known, ", ")));
    }
    if (m.name == "none" && !m.params.empty()) {
      throw InvalidArgument(fmt::format("method 'none' takes no parameters (got '{}')", m.label));
    }
    const auto dup = std::find_if(out.begin(), out.end(), [&](const MethodSpec& o) { return o.label == m.label; });
    if (dup != out.end()) {  // "lookup,all" lists lookup twice: keep one, named if either was
      dup->from_all = dup->from_all && m.from_all;
      continue;
    }
    out.push_back(std::move(m));
  }
  auto none = std::find_if(out.begin(), out.end(), [](const MethodSpec& m) { return m.name == "none"; });
  if (none == out.end()) {
    out.insert(out.begin(), parse_method_item("none"));
  } else {
    std::rotate(out.begin(), none, none + 1);
  }
  return out;
}

std::vector<int32_t> parse_int_list(std::string_view list, std::string_view flag, int32_t lo, int32_t hi) {
  std::vector<int32_t> out;
  for (std::string_view item : split(list, ',')) {
    item = trim(item);
    int32_t v = 0;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size()) {
      throw InvalidArgument(fmt::format("{} '{}': '{}' is not an integer", flag, list, item));
    }
    if (v < lo || v > hi) throw InvalidArgument(fmt::format("{} '{}': {} is outside [{}, {}]", flag, list, v, lo, hi));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<int32_t> parse_budget_list(std::string_view list) {
  std::vector<int32_t> out;
  for (std::string_view item : split(list, ',')) {
    item = trim(item);
    // "own": each drafter's own size (0); "dynamic" or "auto": the budget controller (-1),
    // as `--budget auto` means in run and serve (engine::make_budget_policy).
    const int32_t v = item == "own"                         ? 0
                      : item == "dynamic" || item == "auto" ? kBudgetDynamic
                                                            : parse_int_list(item, "--budget", 1, 4096).front();
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::string budget_label(int32_t budget) {
  return budget == kBudgetDynamic ? "dynamic" : budget <= 0 ? "own" : std::to_string(budget);
}

}  // namespace treespec::bench
