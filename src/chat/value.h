// Values of the Jinja2 interpreter, with Python's semantics: None, bool, int (64-bit),
// float, str (UTF-8, indexed by code point), list and tuple, dict (insertion ordered,
// any hashable key), Jinja2's Undefined, and objects (namespace, loop, macros, bound
// methods, builtins). Lists, dicts and objects are shared by reference, as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "chat/errors.h"

namespace treespec::chat {

class Value;
class Interpreter;
struct ListObj;
struct DictObj;
class Object;

// Jinja2's default Undefined: prints as "", iterates as empty, is falsy; any other use
// raises UndefinedError with `message` ("'x' is undefined", "'dict object' has no
// attribute 'y'"). `security` marks the sandbox's unsafe-attribute placeholder, which
// raises SecurityError instead.
struct Undefined {
  std::string message;
  bool security = false;
};
struct None {};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ListObj>,
                               std::shared_ptr<DictObj>, std::shared_ptr<Object>>;
  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<ListObj> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<DictObj> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Object> o) : v_(std::move(o)) {}

  static Value undefined(std::string message = {}) { return Value(Undefined{std::move(message), false}); }
  // markupsafe's Markup: a str that `|safe` and `|escape` return. Adding a plain str to
  // it (either side) HTML-escapes the plain one; printing it prints the text as is.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();

  bool is_undefined() const { return v_.index() == 0; }
  bool is_none() const { return v_.index() == 1; }
  bool is_bool() const { return v_.index() == 2; }
  bool is_int() const { return v_.index() == 3; }  // not bool
  bool is_float() const { return v_.index() == 4; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return v_.index() == 5; }
  bool is_markup() const { return markup_ && is_string(); }
  bool is_list() const;  // list or tuple
  bool is_tuple() const;
  bool is_dict() const { return v_.index() == 7; }
  bool is_object() const { return v_.index() == 8; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_float() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  ListObj& as_list() const { return *std::get<std::shared_ptr<ListObj>>(v_); }
  DictObj& as_dict() const { return *std::get<std::shared_ptr<DictObj>>(v_); }
  const std::shared_ptr<ListObj>& list_ptr() const { return std::get<std::shared_ptr<ListObj>>(v_); }
  const std::shared_ptr<DictObj>& dict_ptr() const { return std::get<std::shared_ptr<DictObj>>(v_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<std::shared_ptr<Object>>(v_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(v_); }
  const Storage& storage() const { return v_; }

 private:
  Storage v_;
  bool markup_ = false;  // only meaningful for a str
};

struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;
};

// Insertion-ordered dict; lookups are linear (chat-template dicts hold a handful of keys).
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);
};

// Anything else: namespace, loop, macro, builtin function, bound method, cycler, joiner.
// Objects can form reference cycles (a macro's scope holds the macro, a namespace can
// hold itself); the interpreter tracks those that hold values and calls release() on
// them when the render ends, so nothing leaks.
class Object : public std::enable_shared_from_this<Object> {
 public:
  virtual ~Object() = default;
  virtual void release() {}
  virtual std::string type_name() const = 0;
  // Attribute lookup (Python getattr); nullopt when there is none.
  virtual std::optional<Value> attr(std::string_view name) { return std::nullopt; }
  // Assignment through `{% set ns.x = ... %}`: only namespaces accept it.
  virtual bool set_attr(std::string_view name, const Value& v) { return false; }
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& in, Args& args);
  virtual std::string repr() const;
  // The object's items when iterated (a namespace is not iterable: nullopt).
  virtual std::optional<std::vector<Value>> iterate() { return std::nullopt; }
  // A Python iterator (generator, list_reverseiterator): iterate() consumes it, it is
  // always true, has no len() and is not a sequence.
  virtual bool single_pass() const { return false; }
};

// A builtin callable (global function, bound method, filter used as a function).
class Function : public Object {
 public:
  using Fn = std::function<Value(Interpreter&, Args&)>;
  Function(std::string name, Fn fn, std::string type = "builtin_function_or_method")
      : name_(std::move(name)), fn_(std::move(fn)), type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, Args& args) override {
    if (!fn_) type_error("'" + name_ + "' is no longer callable");
    return fn_(in, args);
  }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  void release() override { fn_ = nullptr; }

 private:
  std::string name_;
  Fn fn_;
  std::string type_;
};

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(); raises for a security Undefined? no: prints ""
std::string repr(const Value& v);
std::string repr_string(std::string_view s);
std::string format_float(double d);     // float.__repr__
std::string type_name(const Value& v);  // 'str', 'int', 'dict', 'NoneType', ...
bool equals(const Value& a, const Value& b);
// <0, 0, >0; TypeError for unorderable types ('<' not supported between ...).
int compare(const Value& a, const Value& b, const char* op = "<");
bool is_callable(const Value& v);

// Raises the error an Undefined carries (UndefinedError or SecurityError).
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace treespec::chat
