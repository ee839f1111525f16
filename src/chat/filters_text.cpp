// String and number filters, and transformers' tojson.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "chat/filters.h"
#include "chat/json.h"
#include "chat/strings.h"
#include "chat/unicode.h"

namespace treespec::chat::filters {

std::string soft_str(const Value& v) { return to_str(v); }

namespace {

int64_t int_param(const Value& v, const char* what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) type_error(fmt::format("{}: an integer is required, not {}", what, type_name(v)));
  return v.as_int();
}

// Python's float(str): surrounding whitespace, underscores between digits, inf / nan.
std::optional<double> parse_py_float(const std::string& raw) {
  std::string s = py_strip(raw, true, true, nullptr);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    t += c;
  }
  if (t.empty()) return std::nullopt;
  std::string low = py_lower(t);
  const size_t sign = (low[0] == '+' || low[0] == '-') ? 1 : 0;
  const std::string word = low.substr(sign);
  if (word == "inf" || word == "infinity") return low[0] == '-' ? -INFINITY : INFINITY;
  if (word == "nan") return NAN;
  for (char c : word)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-'))
      return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// Python's int(str, base).
std::optional<int64_t> parse_py_int(const std::string& raw, int base) {
  std::string s = py_strip(raw, true, true, nullptr);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (base == 16 || base == 8 || base == 2 || base == 0) {
    if (i + 1 < s.size() && s[i] == '0') {
      const char p = static_cast<char>(s[i + 1] | 0x20);
      const int b = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
      if (b && (base == 0 || base == b)) {
        base = b;
        i += 2;
        if (i < s.size() && s[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  if (i >= s.size()) return std::nullopt;
  unsigned __int128 v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 >= s.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return std::nullopt;
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (v > static_cast<unsigned __int128>(INT64_MAX) + 1)
      throw TemplateError("OverflowError", "integer too large (64-bit)");
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  if (!neg && v > static_cast<unsigned __int128>(INT64_MAX))
    throw TemplateError("OverflowError", "integer too large (64-bit)");
  return neg ? -static_cast<int64_t>(v - 1) - 1 : static_cast<int64_t>(v);
}

double round_half_even_digits(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits >= 0) {
    if (ndigits > 300) return x;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits),
                  x);  // correctly rounded, half-even on exact value
    return std::strtod(buf, nullptr);
  }
  const double p = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / p) * p;
}

}  // namespace

Value f_abs(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "abs").done();
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw TemplateError("OverflowError", "integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  type_error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

Value f_attr(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "attr");
  auto name = r.get(0, "name");
  r.done();
  if (!name || !name->is_string()) type_error("attr(): the attribute name must be a string");
  return in.getattr(v, name->as_string());
}

Value f_capitalize(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "capitalize").done();
  return same_kind(v, py_capitalize(soft_str(v)));
}

Value f_center(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "center");
  const int64_t w = int_param(r.get_or(0, "width", Value(80)), "center");
  r.done();
  in.check_string(static_cast<size_t>(std::max<int64_t>(w, 0)));
  return same_kind(v, py_center(soft_str(v), w));
}

Value f_default(Interpreter&, const Value& v, Args& a) {
  ArgReader r(a, "default");
  Value def = r.get_or(0, "default_value", Value(""));
  const bool boolean = truthy(r.get_or(1, "boolean", Value(false)));
  r.done();
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}

Value f_escape(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "escape").done();
  return markup_escape(v);
}

Value f_float(Interpreter&, const Value& v, Args& a) {
  ArgReader r(a, "float");
  Value def = r.get_or(0, "default", Value(0.0));
  r.done();
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    if (auto d = parse_py_float(v.as_string())) return Value(*d);
  }
  return def;
}

Value f_format(Interpreter& in, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty())
    throw TemplateError("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kw.empty()) {
    args = Value::dict();
    for (auto& [k, x] : a.kw) args.as_dict().set(Value(k), x);
  } else {
    args = Value::tuple(a.pos);
  }
  if (v.is_markup()) return Value::markup(percent_format(in, v.as_string(), markup_escape_args(args)));
  return Value(percent_format(in, soft_str(v), args));
}

Value f_indent(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "indent");
  const Value w = r.get_or(0, "width", Value(4));
  const bool first = truthy(r.get_or(1, "first", Value(false)));
  const bool blank = truthy(r.get_or(2, "blank", Value(false)));
  r.done();
  std::string ind;
  if (w.is_string()) {
    ind = w.as_string();
  } else {
    const int64_t n = int_param(w, "indent");
    in.check_string(static_cast<size_t>(std::max<int64_t>(n, 0)));
    ind = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) type_error(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
  const std::vector<std::string> lines = py_splitlines(v.as_string() + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
      in.check_string(rv.size());
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
      in.check_string(rv.size());
    }
  }
  if (first) rv = ind + rv;
  return Value(std::move(rv));
}

Value f_int(Interpreter&, const Value& v, Args& a) {
  ArgReader r(a, "int");
  Value def = r.get_or(0, "default", Value(0));
  const int64_t base = int_param(r.get_or(1, "base", Value(10)), "int");
  r.done();
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (std::isnan(d)) return def;
    if (std::isinf(d) || std::fabs(d) >= 9.2e18)
      throw TemplateError("OverflowError", "cannot convert float to a 64-bit integer");
    return Value(static_cast<int64_t>(std::trunc(d)));
  }
  if (v.is_string()) {
    if (base != 0 && (base < 2 || base > 36)) value_error("int() base must be >= 2 and <= 36, or 0");
    if (auto i = parse_py_int(v.as_string(), static_cast<int>(base))) return Value(*i);
    if (auto d = parse_py_float(v.as_string())) {
      if (std::isnan(*d)) return def;
      if (std::isinf(*d) || std::fabs(*d) >= 9.2e18)
        throw TemplateError("OverflowError", "cannot convert float to a 64-bit integer");
      return Value(static_cast<int64_t>(std::trunc(*d)));
    }
  }
  return def;
}

Value f_lower(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "lower").done();
  return same_kind(v, py_lower(soft_str(v)));
}

Value f_upper(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "upper").done();
  return same_kind(v, py_upper(soft_str(v)));
}

Value f_replace(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "replace");
  auto o = r.get(0, "old"), n = r.get(1, "new");
  const Value c = r.get_or(2, "count", Value(None{}));
  r.done();
  if (!o || !n) type_error("replace() missing required argument 'old' or 'new'");
  const int64_t count = c.is_none() ? -1 : int_param(c, "replace");
  std::string out = py_replace(soft_str(v), soft_str(*o), soft_str(*n), count);
  in.check_string(out.size());
  return Value(std::move(out));
}

Value f_round(Interpreter&, const Value& v, Args& a) {
  ArgReader r(a, "round");
  const int64_t prec = int_param(r.get_or(0, "precision", Value(0)), "round");
  const Value method = r.get_or(1, "method", Value("common"));
  r.done();
  const std::string m = to_str(method);
  if (m != "common" && m != "ceil" && m != "floor")
    throw TemplateError("FilterArgumentError", "method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) type_error(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  if (m == "common") {
    if (!v.is_float()) {
      if (prec >= 0) return Value(v.as_int());
      return Value(static_cast<int64_t>(round_half_even_digits(static_cast<double>(v.as_int()), prec)));
    }
    return Value(round_half_even_digits(v.as_float(), prec));
  }
  const double p = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_float() * p;
  return Value((m == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_safe(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "safe").done();
  return v.is_markup() ? v : Value::markup(to_str(v));
}

Value f_string(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "string").done();
  return v.is_markup() ? v : Value(soft_str(v));
}

Value f_title(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "title").done();
  // Jinja2: words begin after runs of [-\s({\[<]; each piece's first character is
  // upper-cased and the rest lower-cased.
  const std::string s = soft_str(v);
  std::string out;
  bool piece_start = true;
  bool in_sep = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    if (sep != in_sep) piece_start = true;
    in_sep = sep;
    if (piece_start) {
      if (c == 0xDF) {
        out += "SS";
      } else {
        utf8_append(out, py_upper(c));
      }
      piece_start = false;
    } else {
      utf8_append(out, py_lower(c));
    }
  }
  return Value(std::move(out));
}

Value f_tojson(Interpreter& in, const Value& v, Args& a) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  ArgReader r(a, "tojson");
  DumpOptions opt;
  opt.ensure_ascii = truthy(r.get_or(0, "ensure_ascii", Value(false)));
  const Value indent = r.get_or(1, "indent", Value(None{}));
  const Value seps = r.get_or(2, "separators", Value(None{}));
  opt.sort_keys = truthy(r.get_or(3, "sort_keys", Value(false)));
  r.done();
  if (indent.is_string()) {
    opt.indent = indent.as_string();
  } else if (!indent.is_none()) {
    const int64_t n = int_param(indent, "tojson indent");
    in.check_string(static_cast<size_t>(std::max<int64_t>(n, 0)));
    opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  if (!seps.is_none()) {
    auto parts = in.iterate(seps);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      value_error("tojson separators must be a pair of strings (item_separator, key_separator)");
    opt.item_separator = parts[0].as_string();
    opt.key_separator = parts[1].as_string();
  }
  std::string out = dump_json(v, opt);
  in.check_string(out.size());
  return Value(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, Args& a) {
  ArgReader r(a, "trim");
  const Value chars = r.get_or(0, "chars", Value(None{}));
  r.done();
  if (chars.is_none()) return same_kind(v, py_strip(soft_str(v), true, true, nullptr));
  if (!chars.is_string()) type_error("strip arg must be None or str");
  // Markup.strip escapes its argument (markupsafe wraps str methods that way)
  const std::string cs = v.is_markup() ? markup_escape(chars).as_string() : chars.as_string();
  return same_kind(v, py_strip(soft_str(v), true, true, &cs));
}

Value f_truncate(Interpreter&, const Value& v, Args& a) {
  ArgReader r(a, "truncate");
  const int64_t length = int_param(r.get_or(0, "length", Value(255)), "truncate");
  const bool killwords = truthy(r.get_or(1, "killwords", Value(false)));
  const std::string end = to_str(r.get_or(2, "end", Value("...")));
  const Value lw = r.get_or(3, "leeway", Value(None{}));
  r.done();
  const int64_t leeway = lw.is_none() ? 5 : int_param(lw, "truncate");
  const auto end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len)
    throw TemplateError("AssertionError", fmt::format("expected length >= {}, got {}", end_len, length));
  if (leeway < 0) throw TemplateError("AssertionError", fmt::format("expected leeway >= 0, got {}", leeway));
  const std::string s = soft_str(v);
  const std::vector<char32_t> cps = utf8_decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(s);
  std::string head = utf8_encode(std::vector<char32_t>(cps.begin(), cps.begin() + (length - end_len)));
  if (killwords) return Value(head + end);
  const size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head.resize(sp);
  return Value(head + end);
}

Value f_wordcount(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "wordcount").done();
  const std::string s = soft_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    const bool w = py_isalnum(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

}  // namespace treespec::chat::filters
