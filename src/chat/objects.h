// Objects the interpreter creates: Jinja2's Namespace, LoopContext, Macro, Cycler and
// Joiner. Their repr() matches Jinja2's where a template could print one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/interpreter.h"

namespace treespec::chat {

class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  std::optional<Value> attr(std::string_view name) override;
  bool set_attr(std::string_view name, const Value& v) override;
  std::string repr() const override;
  void release() override { attrs.items.clear(); }
  DictObj attrs;
};

class LoopContext : public Object {
 public:
  LoopContext(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "LoopContext"; }
  std::optional<Value> attr(std::string_view name) override;
  std::string repr() const override;
  void set_index(size_t i) { index_ = i; }
  void release() override {
    items_.clear();
    last_changed_.reset();
  }
  const std::vector<Value>& items() const { return items_; }

 private:
  std::vector<Value> items_;
  size_t index_ = 0;
  std::optional<Value> last_changed_;
};

class Macro : public Object {
 public:
  Macro(const Stmt& def, FramePtr closure, std::string name);
  std::string type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, Args& args) override;
  std::string repr() const override { return "<Macro '" + name_ + "'>"; }
  void release() override { closure_.reset(); }

 private:
  const Stmt& def_;  // a call block's caller uses its Stmt's params and body too
  FramePtr closure_;
  std::string name_;
  bool uses_varargs_ = false;
  bool uses_kwargs_ = false;
  bool uses_caller_ = false;
};

// A Python iterator over values computed up front: what Jinja2's generator filters (map,
// select, reject, selectattr, rejectattr, unique, batch, items) and reversed(list)
// return. One pass: iterating consumes it (a second loop sees nothing), `first` takes
// one item; it is always true, has no len(), subscripts give Undefined, tojson fails.
class Iterator : public Object {
 public:
  Iterator(std::vector<Value> items, std::string type) : items_(std::move(items)), type_(std::move(type)) {}
  std::string type_name() const override { return type_; }
  bool single_pass() const override { return true; }
  std::optional<std::vector<Value>> iterate() override;
  std::optional<Value> next();
  std::string repr() const override { return "<" + type_ + " object>"; }  // Python adds an address
  void release() override { items_.clear(); }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
  std::string type_;
};

// A tracked Iterator (type "generator" unless told).
Value make_iterator(Interpreter& in, std::vector<Value> items, std::string type = "generator");

// Does any expression in `body` read the variable `name`?
bool body_reads_name(const Body& body, const std::string& name);

}  // namespace treespec::chat
