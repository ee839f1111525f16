#include "chat/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "chat/unicode.h"

namespace treespec::chat {

std::string TemplateError::describe() const {
  std::string s = kind_ + ": " + what();
  if (line_ > 0)
    s += column_ > 0 ? fmt::format(" (line {}, column {})", line_, column_) : fmt::format(" (line {})", line_);
  return s;
}

Value Value::list(std::vector<Value> items) {
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  return Value(std::move(l));
}

Value Value::tuple(std::vector<Value> items) {
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  l->is_tuple = true;
  return Value(std::move(l));
}

Value Value::dict() { return Value(std::make_shared<DictObj>()); }

bool Value::is_list() const { return v_.index() == 6; }
bool Value::is_tuple() const { return is_list() && as_list().is_tuple; }

const Value* DictObj::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictObj::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictObj::set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Object::call(Interpreter&, Args&) { type_error("'" + type_name() + "' object is not callable"); }

std::string Object::repr() const { return "<" + type_name() + " object>"; }

bool is_callable(const Value& v) { return v.is_object() && v.as_object().callable(); }

void fail_undefined(const Value& v) {
  const Undefined& u = v.as_undefined();
  if (u.security) throw TemplateError("SecurityError", u.message);
  throw TemplateError("UndefinedError", u.message.empty() ? "undefined value" : u.message);
}

bool truthy(const Value& v) {
  struct Visitor {
    bool operator()(const Undefined&) const { return false; }
    bool operator()(const None&) const { return false; }
    bool operator()(bool b) const { return b; }
    bool operator()(int64_t i) const { return i != 0; }
    bool operator()(double d) const { return d != 0.0; }
    bool operator()(const std::string& s) const { return !s.empty(); }
    bool operator()(const std::shared_ptr<ListObj>& l) const { return !l->items.empty(); }
    bool operator()(const std::shared_ptr<DictObj>& d) const { return !d->items.empty(); }
    bool operator()(const std::shared_ptr<Object>& o) const {
      if (o->single_pass()) return true;  // Python iterators have no __bool__ / __len__
      auto items = o->iterate();
      return !items || !items->empty();
    }
  };
  return std::visit(Visitor{}, v.storage());
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]D[.DDD]e[+-]XX -> digits and decimal exponent
  bool neg = sci[0] == '-';
  size_t p = neg ? 1 : 0;
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = p; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (ip.size() < static_cast<size_t>(exp + 1)) ip += '0';
      std::string fp = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

std::string repr_string(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      out += fmt::format("\\udc{:02x}", static_cast<unsigned>(c - 0xDC00));
    } else if (!py_isprintable(c)) {
      if (c < 0x100) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
      }
    } else {
      utf8_append(out, c);
    }
  }
  out += q;
  return out;
}

namespace {

void repr_into(std::string& out, const Value& v, int depth) {
  if (depth > 200) throw TemplateError("LimitError", "value nested too deeply to print");
  if (v.is_markup()) {
    out += "Markup(" + repr_string(v.as_string()) + ")";
  } else if (v.is_string()) {
    out += repr_string(v.as_string());
  } else if (v.is_list()) {
    const ListObj& l = v.as_list();
    out += l.is_tuple ? '(' : '[';
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      repr_into(out, l.items[i], depth + 1);
    }
    if (l.is_tuple && l.items.size() == 1) out += ',';
    out += l.is_tuple ? ')' : ']';
  } else if (v.is_dict()) {
    out += '{';
    bool first = true;
    for (const auto& [k, val] : v.as_dict().items) {
      if (!first) out += ", ";
      first = false;
      repr_into(out, k, depth + 1);
      out += ": ";
      repr_into(out, val, depth + 1);
    }
    out += '}';
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    out += to_str(v);
  }
}

}  // namespace

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  struct Visitor {
    const Value& v;
    std::string operator()(const Undefined&) const { return {}; }
    std::string operator()(const None&) const { return "None"; }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_float(d); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::shared_ptr<ListObj>&) const { return repr(v); }
    std::string operator()(const std::shared_ptr<DictObj>&) const { return repr(v); }
    std::string operator()(const std::shared_ptr<Object>& o) const { return o->repr(); }
  };
  return std::visit(Visitor{v}, v.storage());
}

std::string type_name(const Value& v) {
  switch (v.storage().index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return v.is_markup() ? "Markup" : "str";
    case 6: return v.is_tuple() ? "tuple" : "list";
    case 7: return "dict";
    default: return v.as_object().type_name();
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.storage().index() != b.storage().index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const ListObj& x = a.as_list();
    const ListObj& y = b.as_list();
    if (&x == &y) return true;
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!equals(x.items[i], y.items[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    const DictObj& x = a.as_dict();
    const DictObj& y = b.as_dict();
    if (&x == &y) return true;
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* o = y.find(k);
      if (!o || !equals(v, *o)) return false;
    }
    return true;
  }
  return a.object_ptr() == b.object_ptr();
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_undefined() || b.is_undefined()) fail_undefined(a.is_undefined() ? a : b);
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  type_error(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b)));
}

}  // namespace treespec::chat
