// The tree-walking interpreter: scopes, statements, expressions, and the registries of
// filters, tests, methods and globals (filters.cpp, tests.cpp, methods.cpp,
// globals.cpp). One Interpreter renders one template once; it owns the limits that
// keep a hostile template from hanging or eating memory.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace treespec::chat {

struct Limits {
  size_t max_output_bytes = 16u << 20;    // rendered text, and any one string or captured block
  size_t max_container_items = 1u << 20;  // any one list or dict
  int max_call_depth = 200;               // nested macro / caller calls
  uint64_t max_steps = 50'000'000;        // evaluated nodes + loop iterations + bytes/items built / 64
  int max_parse_depth = 256;              // expression and block nesting
};

struct RenderOptions {
  Limits limits;
  bool immutable_sandbox = true;  // transformers' ImmutableSandboxedEnvironment: list.append etc. unsafe
  std::optional<std::tm> now;     // strftime_now's clock; nullopt = the local time
};

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter;
using FilterFn = Value (*)(Interpreter&, const Value&, Args&);
using TestFn = bool (*)(Interpreter&, const Value&, Args&);

const std::unordered_map<std::string, FilterFn>& filter_registry();
const std::unordered_map<std::string, TestFn>& test_registry();
// Builtin global functions (range, dict, namespace, cycler, joiner, raise_exception,
// strftime_now); looked up after the context's variables.
std::optional<Value> builtin_global(Interpreter& in, std::string_view name);
// Python attribute of a str / list / dict value (a bound method), or nullopt.
std::optional<Value> builtin_method(Interpreter& in, const Value& obj, std::string_view name);

// Reads a Python-style argument list: positional index or keyword name.
class ArgReader {
 public:
  ArgReader(Args& args, std::string fn) : a_(args), fn_(std::move(fn)) {}
  // The argument at `index` / called `name`; nullopt when absent.
  std::optional<Value> get(size_t index, std::string_view name);
  Value get_or(size_t index, std::string_view name, const Value& def);
  // TypeError for arguments nobody read.
  void done();

 private:
  Args& a_;
  std::string fn_;
  size_t n_pos_read_ = 0;
  std::vector<bool> kw_read_;
};

class Interpreter {
 public:
  Interpreter(const RenderOptions& opt, const Value& context);

  std::string render(const Body& body);

  // Statements write to `out`; the flow result carries break / continue.
  enum class Flow { normal, break_, continue_ };
  Flow exec(const Body& body, const FramePtr& scope, std::string& out);
  Value eval(const Expr& e, const FramePtr& scope);

  // Python/Jinja2 operations the filters and tests share.
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, Args& args);
  std::vector<Value> iterate(const Value& v);
  Value apply_filter(const std::string& name, const Value& v, Args& args, int line = 0);
  bool apply_test(const std::string& name, const Value& v, Args& args, int line = 0);
  // Looks up a dotted attribute path ("a.b", "0") as Jinja2's make_attrgetter does.
  Value attr_path(const Value& v, std::string_view path);

  // Resource accounting: every check throws TemplateError("LimitError", ...).
  void step(uint64_t n = 1);
  void check_string(size_t bytes);
  void check_items(size_t n);
  void append_out(std::string& out, std::string_view s);
  struct CallGuard {
    Interpreter& in;
    explicit CallGuard(Interpreter& i);
    ~CallGuard() { --in.call_depth_; }
  };

  ~Interpreter();
  // Registers an object / container that may take part in a reference cycle; released
  // (its references dropped) when the interpreter ends. Returns the object as a Value.
  Value track(std::shared_ptr<Object> o);
  void track(const std::shared_ptr<ListObj>& l);
  void track(const std::shared_ptr<DictObj>& d);

  const RenderOptions& options() const { return opt_; }
  const Value& context() const { return context_; }
  std::optional<Value> lookup(const std::string& name, const FramePtr& scope);
  void assign(const Expr& target, const Value& v, const FramePtr& scope);

 private:
  RenderOptions opt_;
  Value context_;  // dict of the render variables
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<Object>> objects_;
  std::vector<std::weak_ptr<ListObj>> lists_;
  std::vector<std::weak_ptr<DictObj>> dicts_;
  size_t objects_pruned_at_ = 1024;

  Flow exec_for(const Stmt& s, const FramePtr& scope, std::string& out);
  void exec_macro(const Stmt& s, const FramePtr& scope);
  void exec_call_block(const Stmt& s, const FramePtr& scope, std::string& out);
  Value eval_binary(const Expr& e, const FramePtr& scope);
  Value eval_compare(const Expr& e, const FramePtr& scope);
  Value eval_call(const Expr& e, const FramePtr& scope);
  Value eval_filter(const Expr& e, const FramePtr& scope, const Value* input);
  Value eval_slice(const Expr& e, const FramePtr& scope);
  void eval_args(const Expr& e, size_t first, const FramePtr& scope, Args& args);

  friend Value apply_filter_chain(Interpreter& in, const Expr& chain, const FramePtr& scope, const Value& input);
};

// Evaluates a filter chain whose innermost argument is null (filter blocks, block set)
// with `input` in its place.
Value apply_filter_chain(Interpreter& in, const Expr& chain, const FramePtr& scope, const Value& input);

// Python binary operators (+ - * / // % **) and `in`, with Python's errors.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Python's printf-style `str % args` (%s %r %d %i %f %x %%, with flags, width, precision).
std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args);
// markupsafe's escape(): a Markup stays as it is, anything else becomes Markup of its
// HTML-escaped str(). `escape_args` applies it to the strings in a `%` argument (a
// tuple's items, a dict's values, or the value itself), as Markup's % operator does.
Value markup_escape(const Value& v);
Value markup_escape_args(const Value& args);
// `s` as Markup when `like` is Markup (the str methods and filters Markup keeps).
Value same_kind(const Value& like, std::string s);
// Python's str.format with positional and named fields ({}, {0}, {name}) and simple specs.
std::string str_format(Interpreter& in, const std::string& fmt, Args& args);

}  // namespace treespec::chat
