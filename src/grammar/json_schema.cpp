// JSON Schema -> GBNF (json_schema.h). One rule per schema node, named after its place
// (property names, "item", "alt0"...), every value rule ending in `space`; built-in
// rules (json_schema_text.cpp) for the primitives. $ref targets become named rules
// once, so recursive schemas give recursive grammars; a $ref cycle that reaches itself
// without any JSON text in between would be left recursion and is refused.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "grammar/json_schema_internal.h"
#include "treespec/status.h"

namespace treespec::grammar {

namespace js_detail {
namespace {

// Keywords the converter honours, with the type they constrain ('*' = any type).
struct JsKeyword {
  const char* name;
  char group;
};
constexpr JsKeyword kJsKeywords[] = {
    {"type", '*'},
    {"enum", '*'},
    {"const", '*'},
    {"anyOf", '*'},
    {"oneOf", '*'},
    {"allOf", '*'},
    {"$ref", '*'},
    {"properties", 'o'},
    {"required", 'o'},
    {"additionalProperties", 'o'},
    {"items", 'a'},
    {"prefixItems", 'a'},
    {"minItems", 'a'},
    {"maxItems", 'a'},
    {"uniqueItems", 'a'},
    {"minLength", 's'},
    {"maxLength", 's'},
    {"pattern", 's'},
    {"format", 's'},
    {"minimum", 'n'},
    {"maximum", 'n'},
    {"exclusiveMinimum", 'n'},
    {"exclusiveMaximum", 'n'},
};
constexpr const char* kJsTypes[] = {"null", "boolean", "object", "array", "number", "integer", "string"};
constexpr const char* kJsQuote = R"("\"")";
constexpr int64_t kJsIntCap = 999999999999999999;    // explicit integer bounds: 18 digits
constexpr int64_t kJsIntDefault = 9999999999999999;  // an unbounded side: 16 digits, as llama.cpp
constexpr int kJsMaxNesting = 200;

char js_keyword_group(const std::string& key) {
  for (const JsKeyword& k : kJsKeywords) {
    if (key == k.name) return k.group;
  }
  return 0;
}

// A rule name for a child of rule `parent`: [a-zA-Z0-9-], never ending in "-<digits>"
// (the GBNF parser names its generated rules that way).
std::string js_child(const std::string& parent, std::string_view seg) {
  std::string s;
  for (char c : seg) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      s += c;
    } else if (!s.empty() && s.back() != '-') {
      s += '-';
    }
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  // The last '-' part must not be all digits: "x-1" -> "x-p1", "7" -> "p7", "" -> "p".
  const size_t last = s.find_last_of('-') == std::string::npos ? 0 : s.find_last_of('-') + 1;
  if (s.find_first_not_of("0123456789", last) == std::string::npos) s.insert(last, "p");
  std::string out = parent.empty() || parent == "root" ? s : parent + "-" + s;
  if (out.size() > 64) out = "x" + out.substr(out.size() - 63);
  return out;
}

std::string js_join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// sym repeated lo..hi times (hi < 0: unbounded) in GBNF.
std::string js_repeat(const std::string& sym, uint64_t lo, int64_t hi) {
  if (hi == 0) return "";
  if (hi < 0) return sym + (lo == 0 ? "*" : lo == 1 ? "+" : fmt::format("{{{},}}", lo));
  const auto h = static_cast<uint64_t>(hi);
  if (lo == 0 && h == 1) return sym + "?";
  if (lo == h) return lo == 1 ? sym : fmt::format("{}{{{}}}", sym, lo);
  return fmt::format("{}{{{},{}}}", sym, lo, h);
}

bool js_type_matches(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (v.is_number_integer()) return true;  // "integer"
  return v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>();
}

std::optional<uint64_t> js_count(const Json& n, const char* key, const std::string& path) {
  if (!n.contains(key)) return std::nullopt;
  const Json& v = n[key];
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() < 1e18 &&
      std::floor(v.get<double>()) == v.get<double>()) {
    return static_cast<uint64_t>(v.get<double>());
  }
  js_fail(path, fmt::format("'{}' must be a non-negative integer", key));
}

// An integer bound rounded up (or down), clamped to +-(kJsIntCap + 1).
int64_t js_int_bound(const Json& v, bool up) {
  if (v.is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), kJsIntCap + 1));
  if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), -kJsIntCap - 1, kJsIntCap + 1);
  const double d = up ? std::ceil(v.get<double>()) : std::floor(v.get<double>());
  if (d > 1e18) return kJsIntCap + 1;
  if (d < -1e18) return -kJsIntCap - 1;
  return static_cast<int64_t>(d);
}

// The type names of `type` (validated), integer dropped when number is there.
std::vector<std::string> js_types(const Json& t, const std::string& path) {
  std::vector<std::string> out;
  const Json list = t.is_array() ? t : Json::array({t});
  if (list.empty()) js_fail(path, "'type' must be a type name or a non-empty array of them");
  for (const Json& x : list) {
    const bool known =
        x.is_string() && std::any_of(std::begin(kJsTypes), std::end(kJsTypes), [&x](const char* n) { return x == n; });
    if (!known)
      js_fail(path,
              fmt::format("'type' {} is not one of null, boolean, object, array, number, integer, string", x.dump()));
    if (std::find(out.begin(), out.end(), x.get<std::string>()) == out.end()) out.push_back(x.get<std::string>());
  }
  if (std::find(out.begin(), out.end(), "number") != out.end()) {
    out.erase(std::remove(out.begin(), out.end(), "integer"), out.end());
  }
  return out;
}

// The value shapes of the known keywords; an unknown keyword is refused.
void js_check_keywords(const Json& n, const std::string& path) {
  for (const auto& [k, v] : n.items()) {
    if (js_is_annotation(k)) continue;
    const char g = js_keyword_group(k);
    if (g == 0) js_fail(path, fmt::format("unsupported keyword '{}'", k));
    auto need = [&, &key = k](bool ok, const char* what) {  // clang 14 cannot capture a structured binding
      if (!ok) js_fail(path, fmt::format("'{}' must be {}", key, what));
    };
    if (k == "enum" || k == "anyOf" || k == "oneOf" || k == "allOf" || k == "prefixItems") {
      need(v.is_array() && !v.empty(), k == "enum" ? "a non-empty array" : "a non-empty array of schemas");
    } else if (k == "$ref" || k == "pattern" || k == "format") {
      need(v.is_string(), "a string");
    } else if (k == "properties") {
      need(v.is_object(), "an object");
    } else if (k == "required") {
      need(v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); }),
           "an array of strings");
    } else if (k == "additionalProperties" || k == "items") {
      need(v.is_boolean() || v.is_object(), "a schema (an object or a boolean)");
    } else if (k == "uniqueItems") {
      need(v.is_boolean(), "a boolean");
    } else if (g == 'n') {
      need(v.is_number() && std::isfinite(v.get<double>()), "a number");
    } else if (k == "minItems" || k == "maxItems" || k == "minLength" || k == "maxLength") {
      js_count(n, k.c_str(), path);
    } else if (k == "type") {
      js_types(v, path);
    }
  }
}

// A JSON value as GBNF for exactly that value (one spelling; whitespace between
// tokens), without trailing space.
std::string js_const(const Json& v) {
  if (v.is_object()) {
    std::vector<std::string> members;
    for (const auto& [k, x] : v.items())
      members.push_back(js_literal(Json(k).dump()) + R"( space ":" space )" + js_const(x) + " space");
    return members.empty() ? R"("{" space "}")" : R"("{" space )" + js_join(members, R"( "," space )") + R"( "}")";
  }
  if (v.is_array()) {
    std::vector<std::string> items;
    for (const Json& x : v) items.push_back(js_const(x) + " space");
    return items.empty() ? R"("[" space "]")" : R"("[" space )" + js_join(items, R"( "," space )") + R"( "]")";
  }
  return js_literal(v.dump());
}

// Numbers between integer bounds. A number is written sign, integer part I, fraction;
// for a magnitude m = I.f between bounds the fractions allowed after I are all, only
// zero, only non-zero, or none, and that changes only at the bounds, so the integer
// parts split into a few ranges (js_int_range) each with one kind of fraction.
enum class JsFrac { none, zero, nonzero, all };
struct JsBound {
  std::optional<int64_t> v;
  bool excl = false;
};

JsFrac js_frac_at(int64_t i, const JsBound& lo, const JsBound& hi) {
  bool zero = true, nonzero = true;
  if (lo.v && (i < *lo.v)) return JsFrac::none;
  if (lo.v && i == *lo.v && lo.excl) zero = false;
  if (hi.v && i > *hi.v) return JsFrac::none;
  if (hi.v && i == *hi.v) {
    nonzero = false;
    zero = zero && !hi.excl;
  }
  return zero && nonzero ? JsFrac::all : zero ? JsFrac::zero : nonzero ? JsFrac::nonzero : JsFrac::none;
}

// Magnitudes (no sign) within lo..hi: "" when there is none.
std::string js_magnitudes(const JsBound& lo, const JsBound& hi) {
  std::vector<int64_t> cuts = {0, kJsIntDefault + 1};
  for (const JsBound* b : {&lo, &hi}) {
    for (int64_t d : {0, 1}) {
      if (b->v && *b->v + d > 0 && *b->v + d <= kJsIntDefault) cuts.push_back(*b->v + d);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<std::pair<std::pair<int64_t, int64_t>, JsFrac>> segs;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const JsFrac f = js_frac_at(cuts[k], lo, hi);
    if (!segs.empty() && segs.back().second == f) {
      segs.back().first.second = cuts[k + 1] - 1;
    } else {
      segs.push_back({{cuts[k], cuts[k + 1] - 1}, f});
    }
  }
  std::vector<std::string> alts;
  for (const auto& [range, f] : segs) {
    if (f == JsFrac::none) continue;
    const char* frac = f == JsFrac::all    ? R"(( "." [0-9]{1,16} )?)"
                       : f == JsFrac::zero ? R"(( "." "0"{1,16} )?)"
                                           : R"("." [0-9]{0,15} [1-9])";
    alts.push_back("( " + js_int_range(range.first, range.second) + " ) " + frac);
  }
  return js_join(alts, " | ");
}

// The bound of `key` (integer-valued; others refused) tightened into b.
void js_number_bound(const Json& n, const char* key, bool excl, bool lower, JsBound& b, const std::string& path) {
  if (!n.contains(key)) return;
  const Json& v = n[key];
  if (!js_type_matches(v, "integer")) {
    js_fail(path,
            fmt::format("'{}' {} on type number is not supported (only integer-valued bounds are)", key, v.dump()));
  }
  const int64_t x = js_int_bound(v, lower);
  if (!b.v || (lower ? x > *b.v : x < *b.v) || (x == *b.v && excl)) b = {x, excl};
}

// "" without bounds (the plain number rule), else the body of the bounded number rule.
std::string js_number_range(const Json& n, const std::string& path) {
  JsBound lo, hi;
  js_number_bound(n, "minimum", false, true, lo, path);
  js_number_bound(n, "exclusiveMinimum", true, true, lo, path);
  js_number_bound(n, "maximum", false, false, hi, path);
  js_number_bound(n, "exclusiveMaximum", true, false, hi, path);
  if (!lo.v && !hi.v) return "";
  std::vector<std::string> alts;
  // Non-negative numbers: m >= lo when lo >= 0 (a negative lower bound holds anyway).
  if (!hi.v || *hi.v >= 0) {
    const std::string pos = js_magnitudes(lo.v && *lo.v >= 0 ? lo : JsBound{}, hi);
    if (!pos.empty()) alts.push_back(pos);
  }
  // Negative numbers "-m": x <= hi is m >= -hi, x >= lo is m <= -lo. Skipped when
  // lo >= 0 (only -0 would be left, and "0" spells it).
  if (!lo.v || *lo.v < 0) {
    const JsBound mlo = hi.v && *hi.v <= 0 ? JsBound{-*hi.v, hi.excl} : JsBound{};
    const JsBound mhi = lo.v ? JsBound{-*lo.v, lo.excl} : JsBound{};
    const std::string neg = js_magnitudes(mlo, mhi);
    if (!neg.empty()) alts.push_back(R"("-" ( )" + neg + " )");
  }
  if (alts.empty()) js_fail(path, "no number is within 'minimum'/'exclusiveMinimum' and 'maximum'/'exclusiveMaximum'");
  return "( " + js_join(alts, " | ") + " ) space";
}

struct JsTrie {
  std::map<uint32_t, JsTrie> children;
  bool end = false;
};

class JsConverter {
 public:
  explicit JsConverter(const Json& root) : root_(root) {}
  std::string run();

 private:
  std::string visit(const Json& s, const std::string& name, const std::string& path);
  std::string body(const Json& s, const std::string& name, const std::string& path);
  std::string ref_rule(const std::string& ref, const std::string& path);
  const Json& resolve(const std::string& ref, const std::string& path) const;
  std::string alternatives(const Json& n, const std::string& name, const std::string& path);
  std::string enum_body(const Json& n, const std::string& path);
  std::string typed_body(const Json& n, const std::string& type, const std::string& name, const std::string& path);
  std::string object_body(const Json& n, const std::string& name, const std::string& path);
  std::string object_layout(const std::vector<std::string>& req, const std::vector<std::string>& opt,
                            const std::string& extra, const std::string& name);
  std::string other_key(const std::vector<std::string>& keys, const std::string& name);
  std::string trie_alts(const JsTrie& node);
  std::string array_body(const Json& n, const std::string& name, const std::string& path);
  std::string string_body(const Json& n, const std::string& path);
  std::string integer_body(const Json& n, const std::string& path);
  std::string merged(const std::vector<Json>& parts, const std::string& name, const std::string& path);
  std::string prim(const std::string& name);
  std::string add_rule(const std::string& base, const std::string& body);
  std::string unique_name(const std::string& base) const;
  bool taken(const std::string& name) const;

  const Json& root_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_names_;
  std::vector<std::pair<std::string, int>> resolving_;  // $ref being converted, depth_ when it started
  int depth_ = 0;                                       // objects and arrays entered: JSON text consumed
  int nesting_ = 0;                                     // body() calls in progress
};

std::string JsConverter::run() {
  order_.push_back("root");
  rules_["root"] = "";
  ref_names_["#"] = "root";
  resolving_.push_back({"#", 0});
  rules_["root"] = body(root_, "root", "");
  prim("space");
  std::string out;
  for (const std::string& name : order_) out += name + " ::= " + rules_[name] + "\n";
  return out;
}

bool JsConverter::taken(const std::string& name) const {
  if (rules_.count(name)) return true;
  const auto& b = js_builtins();
  return std::any_of(b.begin(), b.end(), [&name](const JsBuiltin& r) { return name == r.name; });
}

std::string JsConverter::unique_name(const std::string& base) const {
  std::string name = base;
  for (int k = 2; taken(name); ++k) name = fmt::format("{}-v{}", base, k);
  return name;
}

std::string JsConverter::add_rule(const std::string& base, const std::string& body) {
  std::string name = base;
  for (int k = 2; taken(name); ++k) {
    auto it = rules_.find(name);
    if (it != rules_.end() && it->second == body) return name;
    name = fmt::format("{}-v{}", base, k);
  }
  order_.push_back(name);
  rules_[name] = body;
  return name;
}

std::string JsConverter::prim(const std::string& name) {
  if (rules_.count(name)) return name;
  for (const JsBuiltin& b : js_builtins()) {
    if (name != b.name) continue;
    order_.push_back(name);
    rules_[name] = b.body;
    for (const char* dep : b.deps) prim(dep);
    return name;
  }
  throw std::logic_error("json_schema: no built-in rule " + name);
}

std::string JsConverter::visit(const Json& s, const std::string& name, const std::string& path) {
  std::string b = body(s, name, path);
  if (taken(b) && b.find(' ') == std::string::npos) return b;  // already a rule
  return add_rule(name, b);
}

const Json& JsConverter::resolve(const std::string& ref, const std::string& path) const {
  if (ref.empty() || ref[0] != '#')
    js_fail(path, fmt::format("'$ref' \"{}\" is not a local reference (\"#/...\")", ref));
  std::string frag;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      frag += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      frag += ref[i];
    }
  }
  if (frag.empty()) return root_;
  if (frag[0] != '/') js_fail(path, fmt::format("'$ref' \"{}\": anchors are not supported, only JSON pointers", ref));
  try {
    return root_.at(Json::json_pointer(frag));
  } catch (const nlohmann::json::exception&) {
    js_fail(path, fmt::format("'$ref' \"{}\" does not resolve", ref));
  }
}

std::string JsConverter::ref_rule(const std::string& ref, const std::string& path) {
  auto it = ref_names_.find(ref);
  if (it != ref_names_.end()) {
    for (const auto& [r, d] : resolving_) {
      if (r == ref && d == depth_) {
        js_fail(path, fmt::format("'$ref' \"{}\" reaches itself before any JSON text (left recursion)", ref));
      }
    }
    return it->second;
  }
  const Json& target = resolve(ref, path);
  std::string name = unique_name(js_child("", ref.substr(ref.find_last_of('/') + 1)));
  order_.push_back(name);
  rules_[name] = "";  // reserved while its body is built (recursion refers to it)
  ref_names_[ref] = name;
  resolving_.push_back({ref, depth_});
  std::string b = body(target, name, ref.substr(1));
  resolving_.pop_back();
  rules_[name] = b;
  return name;
}

std::string JsConverter::merged(const std::vector<Json>& parts, const std::string& name, const std::string& path) {
  const JsResolve resolve_fn = [this](const std::string& ref, const std::string& p) -> const Json& {
    return resolve(ref, p);
  };
  return body(js_merge_all(parts, path, resolve_fn), name, path);
}

// The expression for a schema (a rule name or a body ending in `space`).
std::string JsConverter::body(const Json& s, const std::string& name, const std::string& path) {
  struct Guard {
    int& n;
    ~Guard() { --n; }
  } guard{++nesting_};
  if (nesting_ > kJsMaxNesting) {
    js_fail(path, fmt::format("the schema nests more than {} deep through '$ref', 'allOf' and 'anyOf' (a cycle?)",
                              kJsMaxNesting));
  }
  if (s.is_boolean()) {
    if (!s.get<bool>()) js_fail(path, "schema false: no value is valid");
    return prim("value");
  }
  if (!s.is_object()) js_fail(path, fmt::format("a schema must be an object or a boolean, not {}", s.type_name()));
  Json n = s;
  js_normalize(n);
  js_check_keywords(n, path);
  Json constraints = Json::object();
  for (const auto& [k, v] : n.items()) {
    if (!js_is_annotation(k)) constraints[k] = v;
  }
  if (n.contains("$ref")) {
    if (constraints.size() == 1) return ref_rule(n["$ref"].get<std::string>(), path);
    return merged({constraints}, name, path);  // $ref with siblings: both apply
  }
  if (n.contains("allOf")) return merged({constraints}, name, path);
  if (n.contains("anyOf") && n.contains("oneOf")) return merged({constraints}, name, path);
  if (n.contains("anyOf") || n.contains("oneOf")) return alternatives(constraints, name, path);
  if (n.contains("enum") || n.contains("const")) return enum_body(constraints, path);
  std::vector<std::string> types;
  if (n.contains("type")) {
    types = js_types(n["type"], path);
  } else {
    // No type: the types its keywords constrain (JSON Schema would also accept values of
    // the other types, unconstrained; the grammar writes only these), else any value.
    static const std::pair<char, const char*> groups[] = {{'o', "object"},
                                                          {'a', "array"},
                                                          {'s', "string"},
                                                          {'n', "number"}};
    for (const auto& [g, t] : groups) {
      const bool used = std::any_of(constraints.items().begin(), constraints.items().end(),
                                    [g = g](const auto& kv) { return js_keyword_group(kv.key()) == g; });
      if (used) types.push_back(t);
    }
    if (types.empty()) return prim("value");
  }
  if (types.size() == 1) return typed_body(n, types[0], name, path);
  std::vector<std::string> alts;
  for (const std::string& t : types) {
    const std::string b = typed_body(n, t, js_child(name, t), path);
    alts.push_back(taken(b) && b.find(' ') == std::string::npos ? b : add_rule(js_child(name, t), b));
  }
  return js_join(alts, " | ");
}

std::string JsConverter::alternatives(const Json& n, const std::string& name, const std::string& path) {
  const std::string key = n.contains("anyOf") ? "anyOf" : "oneOf";
  Json siblings = n;
  siblings.erase(key);
  std::vector<std::string> alts;
  const Json& list = n[key];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string alt_path = js_path(js_path(path, key), std::to_string(i));
    const std::string alt_name = js_child(name, fmt::format("alt{}", i));
    std::string r;
    if (siblings.empty()) {
      r = visit(list[i], alt_name, alt_path);
    } else {
      r = add_rule(alt_name, merged({list[i], siblings}, alt_name, alt_path));
    }
    if (std::find(alts.begin(), alts.end(), r) == alts.end()) alts.push_back(r);
  }
  return js_join(alts, " | ");
}

std::string JsConverter::enum_body(const Json& n, const std::string& path) {
  for (const auto& [k, v] : n.items()) {
    if (k != "enum" && k != "const" && k != "type")
      js_fail(path, fmt::format("'{}' together with 'enum'/'const' is not supported", k));
  }
  Json values = n.contains("enum") ? n["enum"] : Json::array({n["const"]});
  if (n.contains("enum") && n.contains("const")) {
    values =
        std::find(values.begin(), values.end(), n["const"]) != values.end() ? Json::array({n["const"]}) : Json::array();
  }
  const std::vector<std::string> types = n.contains("type") ? js_types(n["type"], path) : std::vector<std::string>{};
  std::vector<std::string> alts;
  for (const Json& v : values) {
    const bool ok = types.empty() || std::any_of(types.begin(), types.end(),
                                                 [&v](const std::string& t) { return js_type_matches(v, t); });
    const std::string c = js_const(v);
    if (ok && std::find(alts.begin(), alts.end(), c) == alts.end()) alts.push_back(c);
  }
  if (alts.empty()) js_fail(path, "no value of 'enum'/'const' is valid under the schema's 'type'");
  prim("space");
  return (alts.size() == 1 ? alts[0] : "( " + js_join(alts, " | ") + " )") + " space";
}

std::string JsConverter::typed_body(const Json& n, const std::string& type, const std::string& name,
                                    const std::string& path) {
  if (type == "null" || type == "boolean") return prim(type);
  if (type == "string") return string_body(n, path);
  if (type == "integer") return integer_body(n, path);
  if (type == "number") {
    const std::string b = js_number_range(n, path);
    return b.empty() ? prim("number") : (prim("space"), b);
  }
  if (type == "object") return object_body(n, name, path);
  return array_body(n, name, path);
}

std::string JsConverter::string_body(const Json& n, const std::string& path) {
  const auto min = js_count(n, "minLength", path), max = js_count(n, "maxLength", path);
  if (n.contains("format")) {
    const std::string f = n["format"].get<std::string>();
    if (f != "date" && f != "time" && f != "date-time" && f != "uuid") {
      js_fail(path, fmt::format("'format' \"{}\" is not supported (date, time, date-time, uuid are)", f));
    }
    if (n.contains("pattern") || min || max)
      js_fail(path, "'format' together with 'pattern', 'minLength' or 'maxLength' is not supported");
    return prim(f);
  }
  prim("space");
  if (n.contains("pattern")) {
    if (min || max) js_fail(path, "'pattern' together with 'minLength' or 'maxLength' is not supported");
    const std::string content = js_pattern_to_gbnf(n["pattern"].get<std::string>(), path, prim("char"));
    return std::string(kJsQuote) + " " + (content.empty() ? "" : content + " ") + kJsQuote + " space";
  }
  if (!min && !max) return prim("string");
  const uint64_t lo = min.value_or(0);
  if (max && lo > *max) js_fail(path, fmt::format("'minLength' {} is above 'maxLength' {}", lo, *max));
  if (lo > kJsMaxRepeat) js_fail(path, fmt::format("'minLength' {} is above the limit {}", lo, kJsMaxRepeat));
  const int64_t hi = max ? static_cast<int64_t>(std::min(*max, kJsMaxRepeat)) : -1;
  const std::string chars = js_repeat(prim("char"), lo, hi);
  return std::string(kJsQuote) + " " + (chars.empty() ? "" : chars + " ") + kJsQuote + " space";
}

std::string JsConverter::integer_body(const Json& n, const std::string& path) {
  std::optional<int64_t> lo, hi;
  auto tighten = [](std::optional<int64_t>& b, int64_t v, bool lower) {
    if (!b || (lower ? v > *b : v < *b)) b = v;
  };
  if (n.contains("minimum")) tighten(lo, js_int_bound(n["minimum"], true), true);
  if (n.contains("exclusiveMinimum")) tighten(lo, js_int_bound(n["exclusiveMinimum"], false) + 1, true);
  if (n.contains("maximum")) tighten(hi, js_int_bound(n["maximum"], false), false);
  if (n.contains("exclusiveMaximum")) tighten(hi, js_int_bound(n["exclusiveMaximum"], true) - 1, false);
  if (!lo && !hi) return prim("integer");
  if (lo && *lo > kJsIntCap)
    js_fail(path, fmt::format("the minimum is above {}, the largest integer the grammar writes", kJsIntCap));
  if (hi && *hi < -kJsIntCap)
    js_fail(path, fmt::format("the maximum is below -{}, the smallest integer the grammar writes", kJsIntCap));
  // Beyond the cap: fewer integers, all valid. An open side gets llama.cpp's 16 digits.
  const int64_t from = lo ? std::max(*lo, -kJsIntCap) : (*hi >= -kJsIntDefault ? -kJsIntDefault : -kJsIntCap);
  const int64_t to = hi ? std::min(*hi, kJsIntCap) : (*lo <= kJsIntDefault ? kJsIntDefault : kJsIntCap);
  if (from > to) js_fail(path, "no integer is within 'minimum'/'exclusiveMinimum' and 'maximum'/'exclusiveMaximum'");
  prim("space");
  return "( " + js_int_range(from, to) + " ) space";
}

// "{" members "}": required properties in declared order, then the optional ones in
// declared order (each may be absent), then extra members when additionalProperties
// allows them (their keys are any string but the declared ones).
std::string JsConverter::object_body(const Json& n, const std::string& name, const std::string& path) {
  struct Depth {  // inside "{" / "[": JSON text was consumed (a $ref here is not left recursion)
    int& d;
    ~Depth() { --d; }
  } depth{++depth_};
  const bool has_props = n.contains("properties");
  const Json no_props = Json::object();
  const Json& props = has_props ? n["properties"] : no_props;
  std::vector<std::string> required;
  if (n.contains("required")) {
    for (const Json& r : n["required"]) {
      if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
        required.push_back(r.get<std::string>());
    }
  }
  const Json* extra = n.contains("additionalProperties") ? &n["additionalProperties"] : nullptr;
  // Absent: extra members only when no properties are declared (llama.cpp's choice).
  const bool allow_extra = extra ? !(extra->is_boolean() && !extra->get<bool>()) : !has_props;
  if (!has_props && required.empty() && allow_extra && (!extra || extra->is_boolean())) return prim("object");
  prim("space");
  auto member = [&](const std::string& key, const Json& schema, const std::string& sub) {
    const std::string v = visit(schema, js_child(name, key), sub);
    return add_rule(js_child(name, key) + "-kv", js_literal(Json(key).dump()) + R"( space ":" space )" + v);
  };
  std::vector<std::string> req, opt, keys;
  const std::string props_path = js_path(path, "properties");
  for (const std::string& r : required) {
    keys.push_back(r);
    if (props.contains(r)) {
      if (props[r] == false)
        js_fail(js_path(props_path, r), fmt::format("property '{}' is required but its schema is false", r));
      req.push_back(member(r, props[r], js_path(props_path, r)));
    } else {
      // Not declared: the value is an extra member's (additionalProperties).
      if (!allow_extra)
        js_fail(path,
                fmt::format("required property '{}' is not in 'properties' and additionalProperties is false", r));
      req.push_back(member(r, extra ? *extra : Json(true), js_path(path, "additionalProperties")));
    }
  }
  for (const auto& [k, v] : props.items()) {
    if (std::find(required.begin(), required.end(), k) != required.end()) continue;
    keys.push_back(k);         // never an extra key either
    if (v == false) continue;  // schema false: the property must be absent
    opt.push_back(member(k, v, js_path(props_path, k)));
  }
  std::string extra_kv;
  if (allow_extra) {
    const Json value = extra ? *extra : Json(true);
    const std::string v = visit(value, js_child(name, "extra"), js_path(path, "additionalProperties"));
    const std::string key = keys.empty() ? prim("string") : other_key(keys, name);
    extra_kv = add_rule(js_child(name, "extra-kv"), key + R"( ":" space )" + v);
  }
  return R"("{" space )" + object_layout(req, opt, extra_kv, name) + R"( "}" space)";
}

std::string JsConverter::object_layout(const std::vector<std::string>& req, const std::vector<std::string>& opt,
                                       const std::string& extra, const std::string& name) {
  const std::string comma = R"("," space )";
  const std::string extras = extra.empty() ? "" : "( " + comma + extra + " )*";
  auto tail_from = [&](size_t i) {  // optional members after opt[i - 1], then extras
    std::string t;
    for (size_t j = i; j < opt.size(); ++j) t += " ( " + comma + opt[j] + " )?";
    return t + (extras.empty() ? "" : " " + extras);
  };
  if (!req.empty()) {
    std::string b;
    for (size_t i = 0; i < req.size(); ++i) b += (i ? " " + comma : "") + req[i];
    return b + tail_from(0);
  }
  // Nothing required: whichever member comes first has no comma before it.
  std::vector<std::string> firsts;
  for (size_t i = 0; i < opt.size(); ++i) firsts.push_back(opt[i] + tail_from(i + 1));
  if (!extra.empty()) firsts.push_back(extra + " " + extras);
  if (firsts.empty()) return "";
  return "( " + add_rule(js_child(name, "members"), js_join(firsts, " | ")) + " )?";
}

// A JSON string key (with `space`) that is none of `keys`: a trie of the keys, where
// leaving the trie anywhere (or ending where no key ends) gives another key.
std::string JsConverter::other_key(const std::vector<std::string>& keys, const std::string& name) {
  JsTrie root;
  for (const std::string& k : keys) {
    const auto cps = js_decode_utf8(k);
    if (!cps) js_fail("", fmt::format("property name {} is not valid UTF-8", Json(k).dump()));
    JsTrie* t = &root;
    for (uint32_t cp : *cps) t = &t->children[cp];
    t->end = true;
  }
  prim("space");
  prim("char");
  return add_rule(js_child(name, "other-key"),
                  std::string(kJsQuote) + " " + trie_alts(root) + " " + kJsQuote + " space");
}

std::string JsConverter::trie_alts(const JsTrie& node) {
  std::vector<std::string> alts;
  JsSet seen;
  for (const auto& [cp, child] : node.children) {
    alts.push_back(js_string_char(cp) + " " + trie_alts(child));
    seen.push_back({cp, cp});
  }
  const std::string other = js_string_char_set(js_set_minus(js_set_complement({}), js_set_normalize(seen)));
  if (!other.empty()) alts.push_back("( " + other + " ) char*");
  if (!node.end) alts.push_back("");  // the key may end here: no declared key does
  return "( " + js_join(alts, " | ") + " )";
}

// "[" items "]": prefixItems in order, then `items` for the rest, minItems..maxItems.
std::string JsConverter::array_body(const Json& n, const std::string& name, const std::string& path) {
  struct Depth {  // inside "{" / "[": JSON text was consumed (a $ref here is not left recursion)
    int& d;
    ~Depth() { --d; }
  } depth{++depth_};
  if (n.contains("uniqueItems") && n["uniqueItems"].get<bool>()) {
    js_fail(path, "'uniqueItems' true is not supported (a grammar cannot compare items)");
  }
  const uint64_t min = js_count(n, "minItems", path).value_or(0);
  const std::optional<uint64_t> max = js_count(n, "maxItems", path);
  if (max && min > *max) js_fail(path, fmt::format("'minItems' {} is above 'maxItems' {}", min, *max));
  if (min > kJsMaxRepeat) js_fail(path, fmt::format("'minItems' {} is above the limit {}", min, kJsMaxRepeat));
  const bool no_prefix = !n.contains("prefixItems") && (!n.contains("items") || n["items"].is_boolean()) &&
                         !n.contains("minItems") && !n.contains("maxItems");
  if (no_prefix && !(n.contains("items") && !n["items"].get<bool>())) return prim("array");
  prim("space");
  std::vector<std::string> prefix;
  if (n.contains("prefixItems")) {
    const Json& p = n["prefixItems"];
    for (size_t i = 0; i < p.size() && (!max || i < *max); ++i) {
      prefix.push_back(visit(p[i], js_child(name, fmt::format("item{}", i)),
                             js_path(js_path(path, "prefixItems"), std::to_string(i))));
    }
  }
  const bool rest_allowed = !(n.contains("items") && n["items"].is_boolean() && !n["items"].get<bool>());
  const uint64_t k = prefix.size();
  if (!rest_allowed && min > k)
    js_fail(path, fmt::format("'minItems' {} needs more items than 'prefixItems' has and 'items' is false", min));
  const std::string comma = R"("," space )";
  // Items after the prefix: how many more, at least and at most (-1: no limit).
  const uint64_t lo_rest = min > k ? min - k : 0;
  const int64_t hi_rest = !rest_allowed ? 0
                          : max         ? static_cast<int64_t>(std::min(*max - std::min(*max, k), kJsMaxRepeat))
                                        : -1;
  std::string item;
  if (hi_rest != 0)
    item = visit(n.contains("items") ? n["items"] : Json(true), js_child(name, "item"), js_path(path, "items"));
  std::string content;
  if (k == 0) {
    if (hi_rest != 0) {
      const std::string more =
          js_repeat("( " + comma + item + " )", lo_rest > 0 ? lo_rest - 1 : 0, hi_rest < 0 ? -1 : hi_rest - 1);
      content = item + (more.empty() ? "" : " " + more);
      if (lo_rest == 0) content = "( " + content + " )?";
    }
  } else {
    const std::string rest = hi_rest == 0 ? "" : js_repeat("( " + comma + item + " )", lo_rest, hi_rest);
    content = prefix[k - 1] + (rest.empty() ? "" : " " + rest);
    for (uint64_t i = k - 1; i-- > 0;) {
      content = prefix[i] + " ( " + comma + content + " )" + (i + 1 >= min ? "?" : "");
    }
    if (min == 0) content = "( " + content + " )?";
  }
  return R"("[" space )" + (content.empty() ? "" : content + " ") + R"("]" space)";
}

}  // namespace
}  // namespace js_detail

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  try {
    return js_detail::JsConverter(schema).run();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("json_schema: {}", e.what()));
  }
}

std::string json_schema_to_gbnf(const nlohmann::json& schema) {
  return json_schema_to_gbnf(nlohmann::ordered_json(schema));
}

std::string json_object_grammar() { return json_schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}}); }

std::string json_value_grammar() { return json_schema_to_gbnf(nlohmann::ordered_json(true)); }

std::string escape_gbnf_literal(std::string_view text) { return js_detail::js_literal(text); }

}  // namespace treespec::grammar
