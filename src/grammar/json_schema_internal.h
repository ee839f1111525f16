// Pieces of the JSON Schema converter (json_schema.h) shared by its files:
// json_schema.cpp (the converter), json_schema_merge.cpp (allOf), json_schema_text.cpp
// (literals, character sets, integer ranges, string formats) and json_schema_regex.cpp
// (`pattern`). Not a public interface.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::grammar::js_detail {

using Json = nlohmann::ordered_json;

// Throws InvalidArgument "json_schema: <path>: <what>" (path "" is the root).
[[noreturn]] void js_fail(const std::string& path, const std::string& what);
// path + "/" + key with JSON pointer escapes (~0, ~1).
std::string js_path(const std::string& path, std::string_view key);

// Repetition counts above this are clamped (max) or refused (min): the GBNF parser
// expands {m,n} into n rules.
inline constexpr uint64_t kJsMaxRepeat = 10000;

// --- text (json_schema_text.cpp) ---

// `text` (UTF-8) as a GBNF literal with quotes.
std::string js_literal(std::string_view text);
// UTF-8 of one code point.
std::string js_utf8(uint32_t cp);
// Decodes UTF-8; invalid bytes -> nullopt.
std::optional<std::vector<uint32_t>> js_decode_utf8(std::string_view s);

// A set of code points as sorted, disjoint, non-adjacent closed ranges.
struct JsRange {
  uint32_t lo, hi;
};
using JsSet = std::vector<JsRange>;
JsSet js_set_normalize(JsSet s);
JsSet js_set_complement(const JsSet& s);  // within U+0000..U+10FFFF
JsSet js_set_minus(const JsSet& a, const JsSet& b);
JsSet js_set_intersect(const JsSet& a, const JsSet& b);
bool js_set_contains(const JsSet& s, uint32_t cp);

// The JSON spelling of one string character: raw unless JSON requires an escape
// (\" \\ \b \f \n \r \t, other control characters as \u00xx).
std::string js_json_spelling(uint32_t cp);
// GBNF for one character of a JSON string's content whose decoded value is in `s`, in
// one spelling per character: raw where JSON allows it, else \" \\ \b \f \n \r \t or
// \u00XX. "" if `s` has no character (surrogates are never produced).
std::string js_string_char_set(const JsSet& s);
// The same for one character.
std::string js_string_char(uint32_t cp);

// Decimal integers n with lo <= n <= hi, without leading zeros ("-" for negatives, never
// "-0"), as a GBNF alternation (no trailing space). Requires lo <= hi.
std::string js_int_range(int64_t lo, int64_t hi);

// The built-in rules, name -> body (no rule refers to a name outside this table).
struct JsBuiltin {
  const char* name;
  const char* body;
  std::vector<const char*> deps;
};
const std::vector<JsBuiltin>& js_builtins();

// --- pattern (json_schema_regex.cpp) ---

// An ECMAScript `pattern` as the GBNF for the content of a JSON string (between the
// quotes) whose value it matches (search semantics: unanchored ends match anything).
// `char_rule` names the rule for any string character. Throws via js_fail(path, ...)
// for syntax outside the supported subset.
std::string js_pattern_to_gbnf(std::string_view pattern, const std::string& path, const std::string& char_rule);

// --- allOf (json_schema_merge.cpp) ---

// Resolves a local "$ref" ("#", "#/..."); js_fail when it does not resolve.
using JsResolve = std::function<const Json&(const std::string& ref, const std::string& path)>;
// One schema with the constraints of all `parts` (each part a schema; $ref and nested
// allOf inlined), or js_fail naming the keyword it cannot merge.
Json js_merge_all(const std::vector<Json>& parts, const std::string& path, const JsResolve& resolve);

// Rewrites older spellings in place: draft-4..2019 array `items` (+ `additionalItems`)
// as prefixItems (+ items), draft-4 boolean exclusiveMinimum/Maximum as numbers.
void js_normalize(Json& s);

// Keywords that never constrain a value (ignored everywhere).
bool js_is_annotation(const std::string& key);

}  // namespace treespec::grammar::js_detail
