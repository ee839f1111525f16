// The JSON Schema converter's text pieces: GBNF literals and classes, the spelling of
// string characters in JSON, code point sets, exact integer ranges and the built-in
// rules (primitives and string formats).
#include <fmt/format.h>

#include <algorithm>

#include "grammar/json_schema_internal.h"
#include "treespec/status.h"

namespace treespec::grammar::js_detail {

void js_fail(const std::string& path, const std::string& what) {
  throw InvalidArgument(fmt::format("json_schema: {}: {}", path.empty() ? std::string("(root)") : path, what));
}

std::string js_path(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string js_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::optional<std::vector<uint32_t>> js_decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      cp = b & 0x1F;
      n = 1;
    } else if ((b & 0xF0) == 0xE0) {
      cp = b & 0x0F;
      n = 2;
    } else if ((b & 0xF8) == 0xF0) {
      cp = b & 0x07;
      n = 3;
    } else {
      return std::nullopt;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + static_cast<size_t>(k) >= s.size()) return std::nullopt;
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((c & 0xC0) != 0x80) return std::nullopt;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp > 0x10FFFF) return std::nullopt;
    out.push_back(cp);
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

std::string js_literal(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {

// One code point inside a GBNF character class.
std::string js_class_char(uint32_t cp) {
  switch (cp) {
    case '\\': return "\\\\";
    case ']': return "\\]";
    case '[': return "\\[";
    case '-': return "\\-";
    case '^': return "\\^";
    case '"': return "\\\"";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

std::string js_class(const JsSet& s) {
  std::string out = "[";
  for (const JsRange& r : s) {
    out += js_class_char(r.lo);
    if (r.hi > r.lo) out += (r.hi == r.lo + 1 ? "" : "-") + js_class_char(r.hi);
  }
  return out + "]";
}

}  // namespace

std::string js_json_spelling(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
  return js_utf8(cp);
}

JsSet js_set_normalize(JsSet s) {
  std::sort(s.begin(), s.end(), [](const JsRange& a, const JsRange& b) { return a.lo < b.lo; });
  JsSet out;
  for (const JsRange& r : s) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

JsSet js_set_complement(const JsSet& s) {
  JsSet out;
  uint32_t next = 0;
  for (const JsRange& r : s) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

JsSet js_set_intersect(const JsSet& a, const JsSet& b) {
  JsSet out;
  for (const JsRange& x : a) {
    for (const JsRange& y : b) {
      const uint32_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return js_set_normalize(out);
}

JsSet js_set_minus(const JsSet& a, const JsSet& b) { return js_set_intersect(a, js_set_complement(b)); }

bool js_set_contains(const JsSet& s, uint32_t cp) {
  return std::any_of(s.begin(), s.end(), [cp](const JsRange& r) { return r.lo <= cp && cp <= r.hi; });
}

std::string js_string_char(uint32_t cp) { return js_literal(js_json_spelling(cp)); }

std::string js_string_char_set(const JsSet& set) {
  const JsSet s = js_set_minus(js_set_normalize(set), {{0xD800, 0xDFFF}});
  // Characters JSON allows raw: everything from U+0020 except '"' and '\'.
  const JsSet raw = js_set_minus(s, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  std::vector<std::string> parts;
  if (!raw.empty()) parts.push_back(js_class(raw));
  for (const JsRange& r : js_set_minus(s, raw)) {
    for (uint32_t cp = r.lo; cp <= r.hi; ++cp) parts.push_back(js_string_char(cp));
  }
  if (parts.empty()) return "";
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : " ") + parts[i];
  return out + " )";
}

namespace {

// One alternative of a same-length range: a digit prefix, then optionally one digit
// from [cls_lo, cls_hi], then `free` arbitrary digits.
std::string js_digit_piece(const std::string& prefix, char cls_lo, char cls_hi, size_t free) {
  std::string lit = prefix;
  std::string cls;
  if (cls_lo != 0) {
    if (cls_lo == cls_hi) {
      lit += cls_lo;
    } else {
      cls = fmt::format("[{}-{}]", cls_lo, cls_hi);
    }
  }
  std::string out;
  auto add = [&out](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  if (!lit.empty()) add(js_literal(lit));
  if (!cls.empty()) add(cls);
  if (free == 1) add("[0-9]");
  if (free > 1) add(fmt::format("[0-9]{{{}}}", free));
  return out;
}

// All digit strings d with lo <= d <= hi (same length, compared as numbers).
void js_same_length_range(std::string lo, std::string hi, std::string prefix, std::vector<std::string>& out) {
  size_t i = 0;
  while (i < lo.size() && lo[i] == hi[i]) ++i;
  prefix += lo.substr(0, i);
  lo.erase(0, i);
  hi.erase(0, i);
  if (lo.empty()) {
    out.push_back(js_digit_piece(prefix, 0, 0, 0));
    return;
  }
  const size_t rest = lo.size() - 1;
  const bool lo_zeros = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_nines = hi.find_first_not_of('9', 1) == std::string::npos;
  char start = lo[0], end = hi[0];
  if (!lo_zeros) {
    js_same_length_range(lo.substr(1), std::string(rest, '9'), prefix + lo[0], out);
    ++start;
  }
  if (!hi_nines) --end;
  if (start <= end) out.push_back(js_digit_piece(prefix, start, end, rest));
  if (!hi_nines) js_same_length_range(std::string(rest, '0'), hi.substr(1), prefix + hi[0], out);
}

void js_uint_range(uint64_t lo, uint64_t hi, std::vector<std::string>& out) {
  const std::string a = std::to_string(lo), b = std::to_string(hi);
  for (size_t len = a.size(); len <= b.size(); ++len) {
    std::string from = a;
    if (len != a.size()) {  // 10^(len-1)
      from.assign(len, '0');
      from[0] = '1';
    }
    const std::string to = len == b.size() ? b : std::string(len, '9');
    js_same_length_range(from, to, "", out);
  }
}

std::string js_join_alts(const std::vector<std::string>& alts) {
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out;
}

}  // namespace

std::string js_int_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) {
    // Magnitudes of the negatives: [max(1, -hi), -lo]; -lo computed without overflow.
    const uint64_t mag_hi = static_cast<uint64_t>(-(lo + 1)) + 1;
    const uint64_t mag_lo = hi < 0 ? static_cast<uint64_t>(-(hi + 1)) + 1 : 1;
    std::vector<std::string> neg;
    js_uint_range(mag_lo, mag_hi, neg);
    alts.push_back(neg.size() == 1 ? "\"-\" " + neg[0] : "\"-\" ( " + js_join_alts(neg) + " )");
  }
  if (hi >= 0) js_uint_range(static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(hi), alts);
  return js_join_alts(alts);
}

const std::vector<JsBuiltin>& js_builtins() {
  // Whitespace is bounded: a newline and at most 20 spaces or tabs of indentation.
  static const std::vector<JsBuiltin> rules = {
      {"space", R"(| " " | "\n" [ \t]{0,20})", {}},
      {"hex", R"([0-9a-fA-F])", {}},
      // One string character: raw (not '"', '\' or a control character) or an escape;
      // \u escapes of surrogates only as a high-low pair (one character).
      {"char",
       R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} "\\u" [dD] [c-fC-F] hex{2} ) ))",
       {"hex"}},
      {"string", R"("\"" char* "\"" space)", {"char", "space"}},
      {"int-part", R"("0" | [1-9] [0-9]{0,15})", {}},
      {"integer", R"("-"? int-part space)", {"int-part", "space"}},
      {"number", R"("-"? int-part ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,16} )? space)", {"int-part", "space"}},
      {"boolean", R"(( "true" | "false" ) space)", {"space"}},
      {"null", R"("null" space)", {"space"}},
      {"value",
       R"(object | array | string | number | boolean | null)",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"member", R"(string ":" space value)", {"string", "space", "value"}},
      {"object", R"("{" space ( member ( "," space member )* )? "}" space)", {"member", "space"}},
      {"array", R"("[" space ( value ( "," space value )* )? "]" space)", {"value", "space"}},
      // A property name written without escapes (extra keys that must differ from the
      // declared ones: with one spelling per name, differing text = differing name).
      {"key-char", R"([^"\\\x00-\x1F])", {}},
      // RFC 3339 full-date with the real month lengths and leap years.
      {"leap-year",
       R"([0-9]{2} ( [02468] [48] | [13579] [26] | [2468] "0" ) | ( [02468] [048] | [13579] [26] ) "00")",
       {}},
      {"date-body",
       R"([0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | leap-year "-02-29")",
       {"leap-year"}},
      // RFC 3339 full-time (an offset is required; no leap second).
      {"time-body",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"date", R"("\"" date-body "\"" space)", {"date-body", "space"}},
      {"time", R"("\"" time-body "\"" space)", {"time-body", "space"}},
      {"date-time", R"("\"" date-body "T" time-body "\"" space)", {"date-body", "time-body", "space"}},
      {"uuid", R"("\"" hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12} "\"" space)", {"hex", "space"}},
  };
  return rules;
}

}  // namespace treespec::grammar::js_detail
