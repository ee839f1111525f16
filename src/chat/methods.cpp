// Python methods of str, list and dict values that templates call (`s.strip()`,
// `d.items()`, ...). In the immutable sandbox (transformers' environment) the methods
// that modify a list or dict are unsafe: the attribute is a SecurityError placeholder,
// as in Jinja2's ImmutableSandboxedEnvironment.
#include <fmt/format.h>

#include <algorithm>

#include "chat/interpreter.h"
#include "chat/strings.h"
#include "chat/unicode.h"

namespace treespec::chat {

namespace {

using Method = Value (*)(Interpreter&, const Value& self, Args&);

Value bind(Interpreter& in, const Value& self, const std::string& name, Method m) {
  return in.track(std::make_shared<Function>(
      name, [self, m](Interpreter& i, Args& a) { return m(i, self, a); }, "method"));
}

const std::string& str_arg(const Value& v, const char* fn) {
  if (!v.is_string()) type_error(fmt::format("{}() argument must be str, not {}", fn, type_name(v)));
  return v.as_string();
}

std::optional<std::string> opt_str(ArgReader& r, size_t i, const char* name, const char* fn) {
  auto v = r.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  return str_arg(*v, fn);
}

int64_t int_arg(const Value& v, const char* fn) {
  if (!v.is_int() && !v.is_bool()) type_error(fmt::format("{}(): an integer is required, not {}", fn, type_name(v)));
  return v.as_int();
}

Value strings_to_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

template <bool L, bool R>
Value m_strip(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, L && R ? "strip" : (L ? "lstrip" : "rstrip"));
  auto chars = opt_str(r, 0, "chars", "strip");
  r.done();
  return Value(py_strip(self.as_string(), L, R, chars ? &*chars : nullptr));
}

template <bool Reverse>
Value m_split(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, Reverse ? "rsplit" : "split");
  auto sep = opt_str(r, 0, "sep", "split");
  const int64_t maxsplit = int_arg(r.get_or(1, "maxsplit", Value(-1)), "split");
  r.done();
  auto parts = Reverse ? py_rsplit(self.as_string(), sep ? &*sep : nullptr, maxsplit)
                       : py_split(self.as_string(), sep ? &*sep : nullptr, maxsplit);
  in.check_items(parts.size());
  return strings_to_list(parts);
}

Value m_splitlines(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "splitlines");
  const bool keep = truthy(r.get_or(0, "keepends", Value(false)));
  r.done();
  return strings_to_list(py_splitlines(self.as_string(), keep));
}

template <bool End>
Value m_startswith(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, End ? "endswith" : "startswith");
  auto p = r.get(0, "prefix");
  r.done();
  if (!p) type_error("startswith() takes at least 1 argument (0 given)");
  std::vector<Value> options = p->is_tuple() ? p->as_list().items : std::vector<Value>{*p};
  const std::string& s = self.as_string();
  for (const Value& o : options) {
    if (!o.is_string())
      type_error(fmt::format("{} first arg must be str or a tuple of str, not {}", End ? "endswith" : "startswith",
                             type_name(o)));
    const std::string& x = o.as_string();
    if (x.size() <= s.size() &&
        (End ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0))
      return Value(true);
  }
  return Value(false);
}

Value m_upper(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "upper").done();
  return Value(py_upper(self.as_string()));
}
Value m_lower(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "lower").done();
  return Value(py_lower(self.as_string()));
}
Value m_title(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "title").done();
  return Value(py_title(self.as_string()));
}
Value m_capitalize(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "capitalize").done();
  return Value(py_capitalize(self.as_string()));
}

Value m_replace(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, "replace");
  auto o = r.get(0, "old"), n = r.get(1, "new");
  const int64_t count = int_arg(r.get_or(2, "count", Value(-1)), "replace");
  r.done();
  if (!o || !n) type_error("replace() takes at least 2 arguments");
  std::string out = py_replace(self.as_string(), str_arg(*o, "replace"), str_arg(*n, "replace"), count);
  in.check_string(out.size());
  return Value(std::move(out));
}

Value m_format(Interpreter& in, const Value& self, Args& a) { return Value(str_format(in, self.as_string(), a)); }

Value m_join(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, "join");
  auto it = r.get(0, "iterable");
  r.done();
  if (!it) type_error("join() takes exactly one argument (0 given)");
  std::string out;
  bool first = true;
  size_t idx = 0;
  for (const Value& v : in.iterate(*it)) {
    if (!v.is_string()) type_error(fmt::format("sequence item {}: expected str instance, {} found", idx, type_name(v)));
    if (!first) out += self.as_string();
    first = false;
    out += v.as_string();
    in.check_string(out.size());
    ++idx;
  }
  return Value(std::move(out));
}

template <bool Reverse>
Value m_find(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, Reverse ? "rfind" : "find");
  auto sub = r.get(0, "sub");
  r.done();
  if (!sub) type_error("find() takes at least 1 argument (0 given)");
  return Value(py_find(self.as_string(), str_arg(*sub, "find"), Reverse));
}

Value m_index_str(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "index");
  auto sub = r.get(0, "sub");
  r.done();
  if (!sub) type_error("index() takes at least 1 argument (0 given)");
  const int64_t i = py_find(self.as_string(), str_arg(*sub, "index"));
  if (i < 0) value_error("substring not found");
  return Value(i);
}

Value m_count_str(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "count");
  auto sub = r.get(0, "sub");
  r.done();
  if (!sub) type_error("count() takes at least 1 argument (0 given)");
  return Value(py_count(self.as_string(), str_arg(*sub, "count")));
}

template <int Kind>
Value m_is(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "is").done();
  const std::string& s = self.as_string();
  if (Kind == 4) return Value(py_islower(s));
  if (Kind == 5) return Value(py_isupper(s));
  if (s.empty()) return Value(false);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    const bool digit = c >= '0' && c <= '9';
    bool ok = false;
    switch (Kind) {
      case 0: ok = digit; break;                    // isdigit (ASCII digits)
      case 1: ok = py_isalnum(c) && !digit; break;  // isalpha
      case 2: ok = py_isalnum(c); break;            // isalnum
      default: ok = py_isspace(c); break;           // isspace
    }
    if (!ok) return Value(false);
  }
  return Value(true);
}

template <bool Prefix>
Value m_remove(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, Prefix ? "removeprefix" : "removesuffix");
  auto x = r.get(0, "prefix");
  r.done();
  if (!x) type_error("removeprefix() takes exactly one argument (0 given)");
  const std::string& p = str_arg(*x, "removeprefix");
  const std::string& s = self.as_string();
  if (Prefix && s.compare(0, p.size(), p) == 0) return Value(s.substr(p.size()));
  if (!Prefix && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
    return Value(s.substr(0, s.size() - p.size()));
  return self;
}

template <int Align>  // 0 center, 1 ljust, 2 rjust
Value m_justify(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, Align == 0 ? "center" : (Align == 1 ? "ljust" : "rjust"));
  const int64_t w = int_arg(r.get_or(0, "width", Value(0)), "center");
  const Value f = r.get_or(1, "fillchar", Value(" "));
  r.done();
  const std::string& fs = str_arg(f, "center");
  if (utf8_length(fs) != 1) type_error("The fill character must be exactly one character long");
  size_t k = 0;
  const char32_t fill = utf8_next(fs, k);
  in.check_string(static_cast<size_t>(std::max<int64_t>(w, 0)));
  if (Align == 0) return Value(py_center(self.as_string(), w, fill));
  const auto len = static_cast<int64_t>(utf8_length(self.as_string()));
  std::string pad;
  for (int64_t i = len; i < w; ++i) pad += fs;
  return Value(Align == 1 ? self.as_string() + pad : pad + self.as_string());
}

// ---- list -----------------------------------------------------------------------------

Value m_list_index(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "index");
  auto x = r.get(0, "value");
  r.done();
  if (!x) type_error("index expected at least 1 argument, got 0");
  const auto& items = self.as_list().items;
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], *x)) return Value(static_cast<int64_t>(i));
  value_error(fmt::format("{} is not in list", repr(*x)));
}

Value m_list_count(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "count");
  auto x = r.get(0, "value");
  r.done();
  if (!x) type_error("count() takes exactly one argument (0 given)");
  int64_t n = 0;
  for (const auto& v : self.as_list().items) n += equals(v, *x) ? 1 : 0;
  return Value(n);
}

Value m_list_copy(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "copy").done();
  return self.is_tuple() ? Value::tuple(self.as_list().items) : Value::list(self.as_list().items);
}

Value m_list_append(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, "append");
  auto x = r.get(0, "object");
  r.done();
  if (!x) type_error("list.append() takes exactly one argument (0 given)");
  in.check_items(self.as_list().items.size() + 1);
  in.track(self.list_ptr());  // a list may now contain itself
  self.as_list().items.push_back(*x);
  return Value(None{});
}

Value m_list_extend(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, "extend");
  auto x = r.get(0, "iterable");
  r.done();
  if (!x) type_error("list.extend() takes exactly one argument (0 given)");
  auto more = in.iterate(*x);
  in.check_items(self.as_list().items.size() + more.size());
  in.track(self.list_ptr());
  self.as_list().items.insert(self.as_list().items.end(), more.begin(), more.end());
  return Value(None{});
}

Value m_list_pop(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "pop");
  int64_t i = int_arg(r.get_or(0, "index", Value(-1)), "pop");
  r.done();
  auto& items = self.as_list().items;
  if (items.empty()) throw TemplateError("IndexError", "pop from empty list");
  if (i < 0) i += static_cast<int64_t>(items.size());
  if (i < 0 || i >= static_cast<int64_t>(items.size())) throw TemplateError("IndexError", "pop index out of range");
  Value v = items[static_cast<size_t>(i)];
  items.erase(items.begin() + i);
  return v;
}

Value m_list_insert(Interpreter& in, const Value& self, Args& a) {
  ArgReader r(a, "insert");
  int64_t i = int_arg(r.get_or(0, "index", Value(0)), "insert");
  auto x = r.get(1, "object");
  r.done();
  if (!x) type_error("insert expected 2 arguments");
  auto& items = self.as_list().items;
  in.check_items(items.size() + 1);
  in.track(self.list_ptr());
  const auto n = static_cast<int64_t>(items.size());
  if (i < 0) i = std::max<int64_t>(0, i + n);
  i = std::min(i, n);
  items.insert(items.begin() + i, *x);
  return Value(None{});
}

// ---- dict -----------------------------------------------------------------------------

Value m_items(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "items").done();
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}
Value m_keys(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "keys").done();
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(k);
  return Value::list(std::move(out));
}
Value m_values(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "values").done();
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().items) out.push_back(v);
  return Value::list(std::move(out));
}
Value m_get(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "get");
  auto k = r.get(0, "key");
  Value def = r.get_or(1, "default", Value(None{}));
  r.done();
  if (!k) type_error("get expected at least 1 argument, got 0");
  const Value* v = self.as_dict().find(*k);
  return v ? *v : def;
}
Value m_dict_copy(Interpreter&, const Value& self, Args& a) {
  ArgReader(a, "copy").done();
  Value d = Value::dict();
  d.as_dict() = self.as_dict();
  return d;
}
Value m_update(Interpreter& in, const Value& self, Args& a) {
  if (a.pos.size() > 1) type_error("update expected at most 1 argument");
  in.track(self.dict_ptr());  // a dict may now contain itself
  if (!a.pos.empty()) {
    const Value& o = a.pos[0];
    if (o.is_dict()) {
      for (const auto& [k, v] : o.as_dict().items) self.as_dict().set(k, v);
    } else {
      for (const Value& pair : in.iterate(o)) {
        auto kv = in.iterate(pair);
        if (kv.size() != 2) value_error("dictionary update sequence element has wrong length");
        self.as_dict().set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) self.as_dict().set(Value(k), v);
  in.check_items(self.as_dict().items.size());
  return Value(None{});
}
Value m_dict_pop(Interpreter&, const Value& self, Args& a) {
  ArgReader r(a, "pop");
  auto k = r.get(0, "key");
  auto def = r.get(1, "default");
  r.done();
  if (!k) type_error("pop expected at least 1 argument, got 0");
  auto& items = self.as_dict().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (equals(items[i].first, *k)) {
      Value v = items[i].second;
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
      return v;
    }
  }
  if (def) return *def;
  throw TemplateError("KeyError", repr(*k));
}
Value m_setdefault(Interpreter& in, const Value& self, Args& a) {
  in.track(self.dict_ptr());
  ArgReader r(a, "setdefault");
  auto k = r.get(0, "key");
  Value def = r.get_or(1, "default", Value(None{}));
  r.done();
  if (!k) type_error("setdefault expected at least 1 argument, got 0");
  if (const Value* v = self.as_dict().find(*k)) return *v;
  self.as_dict().set(*k, def);
  return def;
}

struct MethodEntry {
  const char* name;
  Method fn;
  bool mutates;
};

const MethodEntry kStrMethods[] = {
    {"strip", m_strip<true, true>, false},
    {"lstrip", m_strip<true, false>, false},
    {"rstrip", m_strip<false, true>, false},
    {"split", m_split<false>, false},
    {"rsplit", m_split<true>, false},
    {"splitlines", m_splitlines, false},
    {"startswith", m_startswith<false>, false},
    {"endswith", m_startswith<true>, false},
    {"upper", m_upper, false},
    {"lower", m_lower, false},
    {"title", m_title, false},
    {"capitalize", m_capitalize, false},
    {"replace", m_replace, false},
    {"format", m_format, false},
    {"join", m_join, false},
    {"find", m_find<false>, false},
    {"rfind", m_find<true>, false},
    {"index", m_index_str, false},
    {"count", m_count_str, false},
    {"isdigit", m_is<0>, false},
    {"isalpha", m_is<1>, false},
    {"isalnum", m_is<2>, false},
    {"isspace", m_is<3>, false},
    {"islower", m_is<4>, false},
    {"isupper", m_is<5>, false},
    {"removeprefix", m_remove<true>, false},
    {"removesuffix", m_remove<false>, false},
    {"center", m_justify<0>, false},
    {"ljust", m_justify<1>, false},
    {"rjust", m_justify<2>, false},
};

const MethodEntry kListMethods[] = {
    {"index", m_list_index, false},  {"count", m_list_count, false},  {"copy", m_list_copy, false},
    {"append", m_list_append, true}, {"extend", m_list_extend, true}, {"pop", m_list_pop, true},
    {"insert", m_list_insert, true}, {"remove", nullptr, true},       {"clear", nullptr, true},
    {"reverse", nullptr, true},      {"sort", nullptr, true},
};

const MethodEntry kTupleMethods[] = {{"index", m_list_index, false}, {"count", m_list_count, false}};

const MethodEntry kDictMethods[] = {
    {"items", m_items, false},    {"keys", m_keys, false},
    {"values", m_values, false},  {"get", m_get, false},
    {"copy", m_dict_copy, false}, {"update", m_update, true},
    {"pop", m_dict_pop, true},    {"setdefault", m_setdefault, true},
    {"clear", nullptr, true},     {"popitem", nullptr, true},
};

// markupsafe's Markup keeps being Markup through str methods: those that build a string
// escape their str arguments (join escapes the items) and return Markup; split, rsplit
// and splitlines return lists of Markup. The others (find, startswith, ...) are str's.
enum class MarkupKind { plain, escape_args, list_of_markup };

MarkupKind markup_kind(std::string_view name) {
  static const char* const kEscaping[] = {"strip",  "lstrip",     "rstrip",  "upper",        "lower",
                                          "title",  "capitalize", "replace", "format",       "join",
                                          "center", "ljust",      "rjust",   "removeprefix", "removesuffix"};
  for (const char* n : kEscaping)
    if (name == n) return MarkupKind::escape_args;
  if (name == "split" || name == "rsplit" || name == "splitlines") return MarkupKind::list_of_markup;
  return MarkupKind::plain;
}

Value call_markup_method(Interpreter& in, const Value& self, Method m, std::string_view name, Args a) {
  const MarkupKind kind = markup_kind(name);
  if (kind == MarkupKind::escape_args) {
    if (name == "join" && !a.pos.empty()) {
      std::vector<Value> items;
      for (const Value& x : in.iterate(a.pos[0])) items.push_back(markup_escape(x));
      a.pos[0] = Value::list(std::move(items));
    } else {
      for (Value& x : a.pos)
        if (x.is_string()) x = markup_escape(x);
      for (auto& [k, x] : a.kw)
        if (x.is_string()) x = markup_escape(x);
    }
    Value r = m(in, self, a);
    return r.is_string() ? Value::markup(r.as_string()) : r;
  }
  Value r = m(in, self, a);
  if (kind == MarkupKind::list_of_markup && r.is_list())
    for (Value& x : r.as_list().items) x = Value::markup(x.as_string());
  return r;
}

template <size_t N>
std::optional<Value> find_method(Interpreter& in, const Value& obj, std::string_view name,
                                 const MethodEntry (&table)[N]) {
  for (const auto& m : table) {
    if (name != m.name) continue;
    if (m.mutates && (in.options().immutable_sandbox || !m.fn)) {
      return Value(
          Undefined{fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)), true});
    }
    if (obj.is_markup()) {
      Method fn = m.fn;
      const char* method_name = m.name;
      return in.track(std::make_shared<Function>(
          m.name,
          [obj, fn, method_name](Interpreter& i, Args& a) { return call_markup_method(i, obj, fn, method_name, a); },
          "method"));
    }
    return bind(in, obj, m.name, m.fn);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> builtin_method(Interpreter& in, const Value& obj, std::string_view name) {
  if (obj.is_string()) return find_method(in, obj, name, kStrMethods);
  if (obj.is_tuple()) return find_method(in, obj, name, kTupleMethods);
  if (obj.is_list()) return find_method(in, obj, name, kListMethods);
  if (obj.is_dict()) return find_method(in, obj, name, kDictMethods);
  return std::nullopt;
}

}  // namespace treespec::chat
