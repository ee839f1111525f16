// Expression evaluation: names, literals, attribute and item access (Jinja2's sandboxed
// getattr / getitem), slices, calls, operators and comparisons.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "chat/interpreter.h"
#include "chat/objects.h"
#include "chat/unicode.h"

namespace treespec::chat {

namespace {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attr(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value missing_item(const Value& obj, const Value& key) {
  if (key.is_string()) return missing_attr(obj, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
}

bool is_dunder(std::string_view n) { return n.size() > 4 && n.substr(0, 2) == "__" && n.substr(n.size() - 2) == "__"; }

// Python's slice.indices() for a sequence of length n.
void slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step, int64_t& b,
                   int64_t& e) {
  auto clamp = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
    if (!v) return step > 0 ? def_pos : def_neg;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step > 0 ? 0 : -1;
    } else if (x >= n) {
      x = step > 0 ? n : n - 1;
    }
    return x;
  };
  b = clamp(start, 0, n - 1);
  e = clamp(stop, n, -1);
}

}  // namespace

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (is_dunder(name)) {
    return Value(
        Undefined{fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)), true});
  }
  if (obj.is_object()) {
    if (auto v = obj.as_object().attr(name)) {
      if (v->is_object()) track(v->object_ptr());  // loop.changed, cycler.next hold their owner
      return *v;
    }
    return missing_attr(obj, name);
  }
  if (auto m = builtin_method(*this, obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return missing_attr(obj, name);
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      const auto n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      const std::vector<char32_t> cps = utf8_decode(obj.as_string());
      const auto n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string s;
        utf8_append(s, cps[static_cast<size_t>(i)]);
        return same_kind(obj, std::move(s));
      }
    }
  } else if (obj.is_object() && key.is_string()) {
    return getattr(obj, key.as_string());
  }
  if (key.is_string()) {  // item failed: try the attribute (d['items'] is the method when no such key)
    const std::string& n = key.as_string();
    if (is_dunder(n)) return getattr(obj, n);
    if (!obj.is_object())
      if (auto m = builtin_method(*this, obj, n)) return *m;
  }
  return missing_item(obj, key);
}

Value Interpreter::attr_path(const Value& v, std::string_view path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string_view part =
        path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    bool digits = !part.empty();
    for (char c : part) digits = digits && c >= '0' && c <= '9';
    cur = digits ? getitem(cur, Value(static_cast<int64_t>(std::stoll(std::string(part)))))
                 : getitem(cur, Value(std::string(part)));
    if (dot == std::string_view::npos) return cur;
    start = dot + 1;
  }
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  if (v.is_list()) return v.as_list().items;
  if (v.is_dict()) {
    std::vector<Value> keys;
    for (const auto& [k, val] : v.as_dict().items) keys.push_back(k);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> out;
    const std::string& s = v.as_string();
    for (size_t i = 0; i < s.size();) {
      std::string ch;
      utf8_append(ch, utf8_next(s, i));
      out.emplace_back(std::move(ch));
    }
    step(out.size() / 8);
    return out;
  }
  if (v.is_undefined()) {
    if (v.as_undefined().security) fail_undefined(v);
    return {};
  }
  if (v.is_object()) {
    if (auto items = v.as_object().iterate()) return *items;
  }
  type_error(fmt::format("'{}' object is not iterable", type_name(v)));
}

Value Interpreter::call(const Value& callee, Args& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!is_callable(callee)) type_error(fmt::format("'{}' object is not callable", type_name(callee)));
  return callee.as_object().call(*this, args);
}

void Interpreter::eval_args(const Expr& e, size_t first, const FramePtr& scope, Args& args) {
  for (size_t i = first; i < e.args.size(); ++i) args.pos.push_back(eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) args.kw.emplace_back(k, eval(*v, scope));
}

Value Interpreter::eval(const Expr& e, const FramePtr& scope) {
  step();
  try {
    switch (e.kind) {
      case ExprKind::constant: return e.value;
      case ExprKind::name: {
        auto v = lookup(e.name, scope);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::list:
      case ExprKind::tuple: {
        std::vector<Value> items;
        items.reserve(e.args.size());
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return e.kind == ExprKind::list ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case ExprKind::dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], scope);
          if (k.is_list() && !k.is_tuple()) type_error("unhashable type: 'list'");
          if (k.is_dict()) type_error("unhashable type: 'dict'");
          d.as_dict().set(k, eval(*e.args[i + 1], scope));
        }
        return d;
      }
      case ExprKind::getattr: return getattr(eval(*e.args[0], scope), e.name);
      case ExprKind::getitem: return getitem(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case ExprKind::slice: return eval_slice(e, scope);
      case ExprKind::call: return eval_call(e, scope);
      case ExprKind::filter: return eval_filter(e, scope, nullptr);
      case ExprKind::test: {
        const Value v = eval(*e.args[0], scope);
        Args args;
        eval_args(e, 1, scope, args);
        const bool r = apply_test(e.name, v, args, e.line);
        return Value(e.negated ? !r : r);
      }
      case ExprKind::neg:
      case ExprKind::pos: {
        const Value v = eval(*e.args[0], scope);
        if (v.is_undefined()) fail_undefined(v);
        if (v.is_float()) return Value(e.kind == ExprKind::neg ? -v.as_float() : v.as_float());
        if (v.is_int() || v.is_bool()) {
          if (e.kind == ExprKind::pos) return Value(v.as_int());
          if (v.as_int() == std::numeric_limits<int64_t>::min())
            throw TemplateError("OverflowError", "integer overflow");
          return Value(-v.as_int());
        }
        type_error(
            fmt::format("bad operand type for unary {}: '{}'", e.kind == ExprKind::neg ? '-' : '+', type_name(v)));
      }
      case ExprKind::not_: return Value(!truthy(eval(*e.args[0], scope)));
      case ExprKind::binary: return eval_binary(e, scope);
      case ExprKind::concat: {
        std::string s;
        for (const auto& a : e.args) {
          s += to_str(eval(*a, scope));
          check_string(s.size());
        }
        return Value(std::move(s));
      }
      case ExprKind::compare: return eval_compare(e, scope);
      case ExprKind::condexpr: {
        if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
        if (e.args[2]) return eval(*e.args[2], scope);
        return Value::undefined(
            fmt::format("the inline if-expression on line {} evaluated to false and no else section was defined.",
                        e.line));
      }
    }
  } catch (TemplateError& err) {
    err.set_location(e.line, e.column);
    throw;
  }
  return Value();
}

Value Interpreter::eval_slice(const Expr& e, const FramePtr& scope) {
  const Value obj = eval(*e.args[0], scope);
  auto part = [&](const ExprPtr& p) -> std::optional<int64_t> {
    if (!p) return std::nullopt;
    const Value v = eval(*p, scope);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) type_error("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  const auto start = part(e.args[1]), stop = part(e.args[2]), stepv = part(e.args[3]);
  if (obj.is_undefined()) fail_undefined(obj);
  const int64_t st = stepv.value_or(1);
  if (st == 0) value_error("slice step cannot be zero");
  auto take = [&](auto n, auto&& push) {
    int64_t b, en;
    slice_indices(static_cast<int64_t>(n), start, stop, st, b, en);
    if (st > 0) {
      for (int64_t i = b; i < en; i += st) push(static_cast<size_t>(i));
    } else {
      for (int64_t i = b; i > en; i += st) push(static_cast<size_t>(i));
    }
  };
  if (obj.is_list()) {
    std::vector<Value> out;
    const auto& items = obj.as_list().items;
    take(items.size(), [&](size_t i) { out.push_back(items[i]); });
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::vector<char32_t> cps = utf8_decode(obj.as_string());
    std::string out;
    take(cps.size(), [&](size_t i) { utf8_append(out, cps[i]); });
    return same_kind(obj, std::move(out));
  }
  return Value::undefined(fmt::format("{} has no element slice", object_type_repr(obj)));
}

Value Interpreter::eval_call(const Expr& e, const FramePtr& scope) {
  const Value callee = eval(*e.args[0], scope);
  Args args;
  eval_args(e, 1, scope, args);
  return call(callee, args);
}

Value Interpreter::eval_filter(const Expr& e, const FramePtr& scope, const Value* input) {
  Value v;
  if (e.args[0]) {
    v = e.args[0]->kind == ExprKind::filter && input ? eval_filter(*e.args[0], scope, input) : eval(*e.args[0], scope);
  } else if (input) {
    v = *input;
  }
  Args args;
  eval_args(e, 1, scope, args);
  return apply_filter(e.name, v, args, e.line);
}

Value apply_filter_chain(Interpreter& in, const Expr& chain, const FramePtr& scope, const Value& input) {
  return in.eval_filter(chain, scope, &input);
}

Value Interpreter::apply_filter(const std::string& name, const Value& v, Args& args, int line) {
  const auto& reg = filter_registry();
  auto it = reg.find(name);
  if (it == reg.end()) throw TemplateError("TemplateAssertionError", fmt::format("No filter named '{}'.", name), line);
  return it->second(*this, v, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& v, Args& args, int line) {
  const auto& reg = test_registry();
  auto it = reg.find(name);
  if (it == reg.end()) throw TemplateError("TemplateAssertionError", fmt::format("No test named '{}'.", name), line);
  return it->second(*this, v, args);
}

Value Interpreter::eval_binary(const Expr& e, const FramePtr& scope) {
  if (e.name == "and") {
    Value l = eval(*e.args[0], scope);
    return truthy(l) ? eval(*e.args[1], scope) : l;
  }
  if (e.name == "or") {
    Value l = eval(*e.args[0], scope);
    return truthy(l) ? l : eval(*e.args[1], scope);
  }
  const Value l = eval(*e.args[0], scope);
  const Value r = eval(*e.args[1], scope);
  return binary_op(*this, e.name, l, r);
}

bool contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (item.is_undefined()) fail_undefined(item);
    if (!item.is_string())
      type_error(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
    return c.as_string().find(item.as_string()) != std::string::npos;
  }
  if (c.is_list()) {
    for (const auto& x : c.as_list().items)
      if (equals(x, item)) return true;
    return false;
  }
  if (c.is_dict()) return c.as_dict().find(item) != nullptr;
  if (c.is_undefined()) {
    if (c.as_undefined().security) fail_undefined(c);
    return false;
  }
  if (c.is_object() && c.as_object().single_pass()) {  // consumes up to the match, as Python
    auto& it = static_cast<Iterator&>(c.as_object());
    while (auto x = it.next())
      if (equals(*x, item)) return true;
    return false;
  }
  if (c.is_object()) {
    if (auto items = c.as_object().iterate()) {
      for (const auto& x : *items)
        if (equals(x, item)) return true;
      return false;
    }
  }
  type_error(fmt::format("argument of type '{}' is not iterable", type_name(c)));
}

Value Interpreter::eval_compare(const Expr& e, const FramePtr& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], scope);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = equals(left, right);
    } else if (op == "!=") {
      r = !equals(left, right);
    } else if (op == "in") {
      r = contains(right, left);
    } else if (op == "notin") {
      r = !contains(right, left);
    } else {
      const int c = compare(left, right, op.c_str());
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace treespec::chat
