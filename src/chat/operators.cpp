// Python's arithmetic operators and string formatting (`%` and str.format).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "chat/interpreter.h"
#include "chat/strings.h"
#include "chat/unicode.h"

namespace treespec::chat {

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  type_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

[[noreturn]] void overflow() {
  throw TemplateError("OverflowError", "integer overflow (this interpreter's integers are 64-bit)");
}

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  if (m == 0) m = std::copysign(0.0, b);
  return m;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0)
    return seq.is_string() ? same_kind(seq, std::string()) : (seq.is_tuple() ? Value::tuple({}) : Value::list());
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    in.check_string(s.size() * static_cast<size_t>(std::min<int64_t>(n, 1 << 30)));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return same_kind(seq, std::move(out));
  }
  const auto& items = seq.as_list().items;
  in.check_items(items.size() * static_cast<size_t>(std::min<int64_t>(n, 1 << 30)));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = is_intlike(a) && is_intlike(b);
  if (op == "+") {
    if (ints) {
      return Value(add_checked(a.as_int(), b.as_int()));
    }
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {  // Markup.__add__ / __radd__ escape the plain str
        const std::string l = markup_escape(a).as_string(), r = markup_escape(b).as_string();
        in.check_string(l.size() + r.size());
        return Value::markup(l + r);
      }
      in.check_string(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      in.check_items(a.as_list().items.size() + b.as_list().items.size());
      std::vector<Value> out = a.as_list().items;
      out.insert(out.end(), b.as_list().items.begin(), b.as_list().items.end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() || a.is_list())
      type_error(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a)));
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      return Value(sub_checked(a.as_int(), b.as_int()));
    }
    if (nums) return Value(a.as_float() - b.as_float());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      return Value(mul_checked(a.as_int(), b.as_int()));
    }
    if (nums) return Value(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(in, b, a.as_int());
    if (a.is_string() || b.is_string() || a.is_list() || b.is_list())
      type_error(fmt::format("can't multiply sequence by non-int of type '{}'",
                             type_name(a.is_string() || a.is_list() ? b : a)));
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.as_float() == 0) throw TemplateError("ZeroDivisionError", "division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_markup()) return Value::markup(percent_format(in, a.as_string(), markup_escape_args(b)));
    if (op == "%" && a.is_string()) return Value(percent_format(in, a.as_string(), b));
    if (!nums) unsupported(op, a, b);
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw TemplateError("ZeroDivisionError", "integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        if (op == "//") overflow();
        return Value(int64_t{0});
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    const double x = a.as_float(), y = b.as_float();
    if (y == 0) throw TemplateError("ZeroDivisionError", op == "//" ? "float floor division by zero" : "float modulo");
    if (op == "%") return Value(py_fmod(x, y));
    const double m = py_fmod(x, y);
    return Value(std::round((x - m) / y));
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1) r = mul_checked(r, base);
        e >>= 1;
        if (e > 0) base = mul_checked(base, base);
      }
      return Value(r);
    }
    if (a.as_float() == 0 && b.as_float() < 0)
      throw TemplateError("ZeroDivisionError", "0.0 cannot be raised to a negative power");
    const double r = std::pow(a.as_float(), b.as_float());
    if (std::isnan(r) && !std::isnan(a.as_float()))
      value_error("math domain error (negative number to a fractional power)");
    return Value(r);
  }
  type_error("unknown operator " + op);
}

// ---- printf-style formatting --------------------------------------------------------------

Value markup_escape(const Value& v) {
  if (v.is_markup()) return v;
  return Value::markup(html_escape(to_str(v)));
}

Value markup_escape_args(const Value& args) {
  auto esc = [](const Value& x) { return x.is_string() ? markup_escape(x) : x; };
  if (args.is_tuple()) {
    std::vector<Value> items;
    for (const Value& x : args.as_list().items) items.push_back(esc(x));
    return Value::tuple(std::move(items));
  }
  if (args.is_dict()) {
    Value d = Value::dict();
    for (const auto& [k, x] : args.as_dict().items) d.as_dict().set(k, esc(x));
    return d;
  }
  return esc(args);
}

Value same_kind(const Value& like, std::string s) {
  return like.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

std::string percent_format(Interpreter& in, const std::string& f, const Value& args) {
  std::vector<Value> items;
  const DictObj* mapping = nullptr;
  if (args.is_tuple()) {
    items = args.as_list().items;
  } else if (args.is_dict()) {
    mapping = &args.as_dict();
  } else {
    items.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) value_error("incomplete format");
    const Value* named = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) value_error("incomplete format key");
      if (!mapping) type_error("format requires a mapping");
      named = mapping->find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!named) throw TemplateError("KeyError", repr(Value(f.substr(i + 1, close - i - 1))));
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags += f[i++];
    std::string width, prec;
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') width += f[i++];
    if (i < f.size() && f[i] == '.') {
      ++i;
      prec = "";
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') prec += f[i++];
      if (prec.empty()) prec = "0";
    } else {
      prec = "-";
    }
    if (i >= f.size()) value_error("incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    Value v;
    if (named) {
      v = *named;
    } else {
      if (next >= items.size()) type_error("not enough arguments for format string");
      v = items[next++];
    }
    std::string spec = "%" + flags + width + (prec == "-" ? "" : "." + prec);
    std::string piece;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? to_str(v) : repr(v);
        if (prec != "-") {
          const auto cps = utf8_decode(s);
          const size_t p = std::stoul(prec);
          if (cps.size() > p)
            s = utf8_encode(std::vector<char32_t>(cps.begin(), cps.begin() + static_cast<std::ptrdiff_t>(p)));
        }
        const size_t w = width.empty() ? 0 : std::stoul(width);
        const size_t len = utf8_length(s);
        if (len < w)
          s = flags.find('-') != std::string::npos ? s + std::string(w - len, ' ') : std::string(w - len, ' ') + s;
        piece = s;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number())
          type_error(fmt::format("%{} format: a real number is required, not {}", conv, type_name(v)));
        const long long x = v.is_float() ? static_cast<long long>(std::trunc(v.as_float())) : v.as_int();
        const char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        piece.resize(128);
        piece.resize(static_cast<size_t>(std::snprintf(piece.data(), piece.size(), (spec + "ll" + c).c_str(), x)));
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) type_error(fmt::format("must be real number, not {}", type_name(v)));
        piece.resize(512);
        piece.resize(
            static_cast<size_t>(std::snprintf(piece.data(), piece.size(), (spec + conv).c_str(), v.as_float())));
        break;
      }
      case 'c': {
        if (v.is_string()) {
          piece = v.as_string();
        } else if (v.is_int()) {
          utf8_append(piece, static_cast<char32_t>(v.as_int()));
        } else {
          type_error("%c requires int or char");
        }
        break;
      }
      default: value_error(fmt::format("unsupported format character '{}'", conv));
    }
    out += piece;
    in.check_string(out.size());
  }
  if (!mapping && next < items.size()) type_error("not all arguments converted during string formatting");
  return out;
}

std::string str_format(Interpreter& in, const std::string& f, Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      value_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) value_error("Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    std::string spec;
    const size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    bool repr_conv = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      repr_conv = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.pos.size())
        throw TemplateError("IndexError", "Replacement index out of range for positional args tuple");
      v = args.pos[auto_index++];
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      const size_t k = std::stoul(field);
      if (k >= args.pos.size())
        throw TemplateError("IndexError", "Replacement index out of range for positional args tuple");
      v = args.pos[k];
    } else {
      bool found = false;
      for (auto& [name, val] : args.kw) {
        if (name == field) {
          v = val;
          found = true;
        }
      }
      if (!found) throw TemplateError("KeyError", repr(Value(field)));
    }
    std::string s = repr_conv ? repr(v) : to_str(v);
    if (!spec.empty()) {
      // [[fill]align][width] only
      char fill = ' ', align = v.is_number() ? '>' : '<';
      size_t p = 0;
      if (spec.size() >= 2 && std::string_view("<>^").find(spec[1]) != std::string_view::npos) {
        fill = spec[0];
        align = spec[1];
        p = 2;
      } else if (std::string_view("<>^").find(spec[0]) != std::string_view::npos) {
        align = spec[0];
        p = 1;
      }
      const std::string w = spec.substr(p);
      if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos)
        value_error("format spec '" + spec + "' is not supported");
      const size_t width = std::stoul(w), len = utf8_length(s);
      if (len < width) {
        const size_t pad = width - len;
        if (align == '<') {
          s += std::string(pad, fill);
        } else if (align == '>') {
          s = std::string(pad, fill) + s;
        } else {
          s = std::string(pad / 2, fill) + s + std::string(pad - pad / 2, fill);
        }
      }
    }
    out += s;
    in.check_string(out.size());
    i = close;
  }
  return out;
}

}  // namespace treespec::chat
