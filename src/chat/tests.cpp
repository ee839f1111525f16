// Jinja2's builtin tests (`x is defined`, `x is string`, ...).
#include <fmt/format.h>

#include "chat/interpreter.h"
#include "chat/strings.h"

namespace treespec::chat {

namespace {

Value arg1(Args& a, const char* test) {
  if (a.pos.size() + a.kw.size() != 1) type_error(fmt::format("test '{}' takes exactly one argument", test));
  return a.pos.empty() ? a.kw[0].second : a.pos[0];
}

void no_args(Args& a, const char* test) {
  if (!a.pos.empty() || !a.kw.empty()) type_error(fmt::format("test '{}' takes no arguments", test));
}

#define SIMPLE_TEST(fname, expr)                      \
  bool fname(Interpreter&, const Value& v, Args& a) { \
    no_args(a, #fname);                               \
    return (expr);                                    \
  }

SIMPLE_TEST(t_defined, !v.is_undefined())
SIMPLE_TEST(t_undefined, v.is_undefined())
SIMPLE_TEST(t_none, v.is_none())
SIMPLE_TEST(t_string, v.is_string())
SIMPLE_TEST(t_number, v.is_number())
SIMPLE_TEST(t_integer, v.is_int())
SIMPLE_TEST(t_float, v.is_float())
SIMPLE_TEST(t_boolean, v.is_bool())
SIMPLE_TEST(t_true, v.is_bool() && v.as_bool())
SIMPLE_TEST(t_false, v.is_bool() && !v.as_bool())
SIMPLE_TEST(t_mapping, v.is_dict())
SIMPLE_TEST(t_sequence, v.is_string() || v.is_list() || v.is_dict())
SIMPLE_TEST(t_callable, is_callable(v))
SIMPLE_TEST(t_escaped, v.is_markup())

bool t_iterable(Interpreter&, const Value& v, Args& a) {
  no_args(a, "iterable");
  if (v.is_string() || v.is_list() || v.is_dict() || v.is_undefined()) return true;
  return v.is_object() && (v.as_object().single_pass() || v.as_object().iterate().has_value());
}

bool t_odd(Interpreter& in, const Value& v, Args& a) {
  no_args(a, "odd");
  return equals(binary_op(in, "%", v, Value(2)), Value(1));
}
bool t_even(Interpreter& in, const Value& v, Args& a) {
  no_args(a, "even");
  return equals(binary_op(in, "%", v, Value(2)), Value(0));
}
bool t_divisibleby(Interpreter& in, const Value& v, Args& a) {
  return equals(binary_op(in, "%", v, arg1(a, "divisibleby")), Value(0));
}

bool t_eq(Interpreter&, const Value& v, Args& a) { return equals(v, arg1(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equals(v, arg1(a, "ne")); }
bool t_lt(Interpreter&, const Value& v, Args& a) { return compare(v, arg1(a, "lt"), "<") < 0; }
bool t_le(Interpreter&, const Value& v, Args& a) { return compare(v, arg1(a, "le"), "<=") <= 0; }
bool t_gt(Interpreter&, const Value& v, Args& a) { return compare(v, arg1(a, "gt"), ">") > 0; }
bool t_ge(Interpreter&, const Value& v, Args& a) { return compare(v, arg1(a, "ge"), ">=") >= 0; }
bool t_in(Interpreter&, const Value& v, Args& a) { return contains(arg1(a, "in"), v); }

bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value o = arg1(a, "sameas");
  if (v.storage().index() != o.storage().index()) return false;
  if (v.is_list()) return v.list_ptr() == o.list_ptr();
  if (v.is_dict()) return v.dict_ptr() == o.dict_ptr();
  if (v.is_object()) return v.object_ptr() == o.object_ptr();
  if (v.is_undefined()) return false;
  return equals(v, o);  // None, bools, small ints and strings: Python's singletons / interning
}

bool t_lower(Interpreter&, const Value& v, Args& a) {
  no_args(a, "lower");
  return py_islower(to_str(v));
}
bool t_upper(Interpreter&, const Value& v, Args& a) {
  no_args(a, "upper");
  return py_isupper(to_str(v));
}
bool t_filter(Interpreter&, const Value& v, Args& a) {
  no_args(a, "filter");
  return v.is_string() && filter_registry().count(v.as_string()) > 0;
}
bool t_test(Interpreter&, const Value& v, Args& a) {
  no_args(a, "test");
  return v.is_string() && test_registry().count(v.as_string()) > 0;
}

}  // namespace

const std::unordered_map<std::string, TestFn>& test_registry() {
  static const std::unordered_map<std::string, TestFn> reg = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
      {"escaped", t_escaped},
      {"filter", t_filter},
      {"test", t_test},
  };
  return reg;
}

}  // namespace treespec::chat
