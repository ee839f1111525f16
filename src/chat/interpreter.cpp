#include "chat/interpreter.h"

#include <fmt/format.h>

#include "chat/objects.h"
#include "chat/unicode.h"

namespace treespec::chat {

// ---- arguments ------------------------------------------------------------------------

std::optional<Value> ArgReader::get(size_t index, std::string_view name) {
  if (kw_read_.size() != a_.kw.size()) kw_read_.assign(a_.kw.size(), false);
  if (index < a_.pos.size()) {
    n_pos_read_ = std::max(n_pos_read_, index + 1);
    for (const auto& kw : a_.kw)
      if (kw.first == name) type_error(fmt::format("{}() got multiple values for argument '{}'", fn_, name));
    return a_.pos[index];
  }
  for (size_t k = 0; k < a_.kw.size(); ++k) {
    if (a_.kw[k].first == name) {
      kw_read_[k] = true;
      return a_.kw[k].second;
    }
  }
  return std::nullopt;
}

Value ArgReader::get_or(size_t index, std::string_view name, const Value& def) {
  auto v = get(index, name);
  return v ? *v : def;
}

void ArgReader::done() {
  if (kw_read_.size() != a_.kw.size()) kw_read_.assign(a_.kw.size(), false);
  if (a_.pos.size() > n_pos_read_)
    type_error(fmt::format("{}() takes {} positional argument(s) but {} were given", fn_, n_pos_read_, a_.pos.size()));
  for (size_t k = 0; k < a_.kw.size(); ++k)
    if (!kw_read_[k]) type_error(fmt::format("{}() got an unexpected keyword argument '{}'", fn_, a_.kw[k].first));
}

// ---- limits ---------------------------------------------------------------------------

Interpreter::Interpreter(const RenderOptions& opt, const Value& context) : opt_(opt), context_(context) {}

Interpreter::~Interpreter() {
  for (auto& w : objects_)
    if (auto o = w.lock()) o->release();
  for (auto& w : lists_)
    if (auto l = w.lock()) l->items.clear();
  for (auto& w : dicts_)
    if (auto d = w.lock()) d->items.clear();
}

Value Interpreter::track(std::shared_ptr<Object> o) {
  if (objects_.size() >= objects_pruned_at_) {  // amortised: forget the objects already gone
    std::erase_if(objects_, [](const auto& w) { return w.expired(); });
    objects_pruned_at_ = std::max<size_t>(1024, objects_.size() * 2);
  }
  objects_.push_back(o);
  return Value(std::move(o));
}

void Interpreter::track(const std::shared_ptr<ListObj>& l) { lists_.push_back(l); }
void Interpreter::track(const std::shared_ptr<DictObj>& d) { dicts_.push_back(d); }

void Interpreter::step(uint64_t n) {
  steps_ += n;
  if (steps_ > opt_.limits.max_steps)
    throw TemplateError("LimitError", fmt::format("template exceeded its step limit ({} evaluation steps): an endless "
                                                  "or too large loop?",
                                                  opt_.limits.max_steps));
}

void Interpreter::check_string(size_t bytes) {
  if (bytes > opt_.limits.max_output_bytes)
    throw TemplateError("LimitError", fmt::format("a string of {} bytes exceeds the limit of {} bytes", bytes,
                                                  opt_.limits.max_output_bytes));
  step(bytes / 64);
}

void Interpreter::check_items(size_t n) {
  if (n > opt_.limits.max_container_items)
    throw TemplateError("LimitError", fmt::format("a container of {} items exceeds the limit of {} items", n,
                                                  opt_.limits.max_container_items));
  step(n / 8);
}

void Interpreter::append_out(std::string& out, std::string_view s) {
  if (out.size() + s.size() > opt_.limits.max_output_bytes)
    throw TemplateError("LimitError", fmt::format("the rendered text exceeds the output limit of {} bytes",
                                                  opt_.limits.max_output_bytes));
  step(s.size() / 64);
  out += s;
}

Interpreter::CallGuard::CallGuard(Interpreter& i) : in(i) {
  if (++in.call_depth_ > in.opt_.limits.max_call_depth) {
    --in.call_depth_;
    throw TemplateError("LimitError", fmt::format("maximum recursion depth exceeded ({} nested calls)",
                                                  in.opt_.limits.max_call_depth));
  }
}

// ---- scopes ---------------------------------------------------------------------------

std::optional<Value> Interpreter::lookup(const std::string& name, const FramePtr& scope) {
  for (const Frame* f = scope.get(); f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  if (context_.is_dict()) {
    if (const Value* v = context_.as_dict().find(std::string_view(name))) return *v;
  }
  return builtin_global(*this, name);
}

void Interpreter::assign(const Expr& target, const Value& v, const FramePtr& scope) {
  if (target.kind == ExprKind::name) {
    scope->vars[target.name] = v;
    return;
  }
  if (target.kind == ExprKind::getattr) {  // {% set ns.attr = v %}
    auto ns = lookup(target.args[0]->name, scope);
    if (!ns || ns->is_undefined()) fail_undefined(Value::undefined("'" + target.args[0]->name + "' is undefined"));
    if (!ns->is_object() || !ns->as_object().set_attr(target.name, v))
      throw TemplateError("TemplateRuntimeError", "cannot assign attribute on non-namespace object", target.line,
                          target.column);
    return;
  }
  // tuple unpacking
  std::vector<Value> items = iterate(v);
  if (items.size() != target.args.size()) {
    value_error(
        items.size() > target.args.size()
            ? fmt::format("too many values to unpack (expected {})", target.args.size())
            : fmt::format("not enough values to unpack (expected {}, got {})", target.args.size(), items.size()));
  }
  for (size_t i = 0; i < items.size(); ++i) assign(*target.args[i], items[i], scope);
}

// ---- statements -----------------------------------------------------------------------

std::string Interpreter::render(const Body& body) {
  auto top = std::make_shared<Frame>();
  std::string out;
  exec(body, top, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const FramePtr& scope, std::string& out) {
  for (const StmtPtr& sp : body) {
    const Stmt& s = *sp;
    step();
    try {
      switch (s.kind) {
        case StmtKind::output: append_out(out, s.text); break;
        case StmtKind::print: {
          const Value v = eval(*s.expr, scope);
          append_out(out, to_str(v));
          break;
        }
        case StmtKind::if_: {
          bool taken = false;
          for (size_t i = 0; i < s.conds.size(); ++i) {
            if (truthy(eval(*s.conds[i], scope))) {
              taken = true;
              const Flow f = exec(s.bodies[i], scope, out);
              if (f != Flow::normal) return f;
              break;
            }
          }
          if (!taken && s.has_else) {
            const Flow f = exec(s.else_body, scope, out);
            if (f != Flow::normal) return f;
          }
          break;
        }
        case StmtKind::for_: {
          const Flow f = exec_for(s, scope, out);
          if (f != Flow::normal) return f;
          break;
        }
        case StmtKind::set: assign(*s.target, eval(*s.expr, scope), scope); break;
        case StmtKind::set_block: {
          std::string captured;
          auto inner = std::make_shared<Frame>();
          inner->parent = scope;
          exec(s.body, inner, captured);
          Value v(std::move(captured));
          if (s.expr) v = apply_filter_chain(*this, *s.expr, scope, v);
          assign(*s.target, v, scope);
          break;
        }
        case StmtKind::macro: exec_macro(s, scope); break;
        case StmtKind::call_block: exec_call_block(s, scope, out); break;
        case StmtKind::filter_block: {
          std::string captured;
          auto inner = std::make_shared<Frame>();
          inner->parent = scope;
          exec(s.body, inner, captured);
          append_out(out, to_str(apply_filter_chain(*this, *s.expr, scope, Value(std::move(captured)))));
          break;
        }
        case StmtKind::break_: return Flow::break_;
        case StmtKind::continue_: return Flow::continue_;
        case StmtKind::with: {
          auto inner = std::make_shared<Frame>();
          inner->parent = scope;
          for (size_t i = 0; i < s.targets.size(); ++i) assign(*s.targets[i], eval(*s.values[i], scope), inner);
          const Flow f = exec(s.body, inner, out);
          if (f != Flow::normal) return f;
          break;
        }
        case StmtKind::generation: {
          const Flow f = exec(s.body, scope, out);
          if (f != Flow::normal) return f;
          break;
        }
      }
    } catch (TemplateError& e) {
      e.set_location(s.line, s.column);
      throw;
    }
  }
  return Flow::normal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const FramePtr& scope, std::string& out) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  if (s.cond) {  // `for x in xs if cond`: filtered before the loop, so loop.* count only kept items
    std::vector<Value> kept;
    for (const Value& it : items) {
      step();
      auto probe = std::make_shared<Frame>();
      probe->parent = scope;
      assign(*s.target, it, probe);
      if (truthy(eval(*s.cond, probe))) kept.push_back(it);
    }
    items = std::move(kept);
  }
  if (items.empty()) {  // the else block runs when nothing was iterated; break/continue there are the outer loop's
    if (!s.has_else) return Flow::normal;
    auto frame = std::make_shared<Frame>();
    frame->parent = scope;
    return exec(s.else_body, frame, out);
  }
  auto loop = std::make_shared<LoopContext>(items);
  const Value loop_value = track(loop);
  for (size_t i = 0; i < loop->items().size(); ++i) {
    step();
    loop->set_index(i);
    auto frame = std::make_shared<Frame>();  // fresh per iteration: sets do not leak out
    frame->parent = scope;
    frame->vars["loop"] = loop_value;
    assign(*s.target, loop->items()[i], frame);
    const Flow f = exec(s.body, frame, out);
    if (f == Flow::break_) break;
  }
  return Flow::normal;
}

void Interpreter::exec_macro(const Stmt& s, const FramePtr& scope) {
  scope->vars[s.name] = track(std::make_shared<Macro>(s, scope, s.name));
}

void Interpreter::exec_call_block(const Stmt& s, const FramePtr& scope, std::string& out) {
  const Expr& call_expr = *s.expr;
  const Value callee = eval(*call_expr.args[0], scope);
  Args args;
  eval_args(call_expr, 1, scope, args);
  args.kw.emplace_back("caller", track(std::make_shared<Macro>(s, scope, "caller")));
  append_out(out, to_str(call(callee, args)));
}

// ---- objects --------------------------------------------------------------------------

std::optional<Value> Namespace::attr(std::string_view name) {
  if (const Value* v = attrs.find(name)) return *v;
  return std::nullopt;
}

bool Namespace::set_attr(std::string_view name, const Value& v) {
  attrs.set(Value(std::string(name)), v);
  return true;
}

std::string Namespace::repr() const {
  auto d = std::make_shared<DictObj>(attrs);
  return "<Namespace " + chat::repr(Value(d)) + ">";
}

std::optional<std::vector<Value>> Iterator::iterate() {
  std::vector<Value> rest(items_.begin() + static_cast<std::ptrdiff_t>(pos_), items_.end());
  items_.clear();
  pos_ = 0;
  return rest;
}

std::optional<Value> Iterator::next() {
  if (pos_ >= items_.size()) return std::nullopt;
  return items_[pos_++];
}

Value make_iterator(Interpreter& in, std::vector<Value> items, std::string type) {
  return in.track(std::make_shared<Iterator>(std::move(items), std::move(type)));
}

std::optional<Value> LoopContext::attr(std::string_view name) {
  const auto n = static_cast<int64_t>(items_.size());
  const auto i = static_cast<int64_t>(index_);
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(1);
  if (name == "depth0") return Value(0);
  if (name == "previtem") return i > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? items_[index_ + 1] : Value::undefined("there is no next item");
  if (name == "cycle") {
    const size_t idx = index_;
    return Value(std::shared_ptr<Object>(std::make_shared<Function>(
        "cycle",
        [idx](Interpreter&, Args& a) -> Value {
          if (a.pos.empty()) type_error("no items for cycling given");
          return a.pos[idx % a.pos.size()];
        },
        "method")));
  }
  if (name == "changed") {
    auto self = std::static_pointer_cast<LoopContext>(shared_from_this());
    return Value(std::shared_ptr<Object>(std::make_shared<Function>(
        "changed",
        [self](Interpreter&, Args& a) -> Value {
          Value v = Value::tuple(a.pos);
          if (!self->last_changed_ || !equals(*self->last_changed_, v)) {
            self->last_changed_ = v;
            return Value(true);
          }
          return Value(false);
        },
        "method")));
  }
  return std::nullopt;
}

std::string LoopContext::repr() const { return fmt::format("<LoopContext {}/{}>", index_ + 1, items_.size()); }

Macro::Macro(const Stmt& def, FramePtr closure, std::string name)
    : def_(def), closure_(std::move(closure)), name_(std::move(name)) {
  uses_varargs_ = body_reads_name(def.body, "varargs");
  uses_kwargs_ = body_reads_name(def.body, "kwargs");
  uses_caller_ = body_reads_name(def.body, "caller");
}

Value Macro::call(Interpreter& in, Args& args) {
  Interpreter::CallGuard guard(in);
  auto frame = std::make_shared<Frame>();
  frame->parent = closure_;
  const size_t n = def_.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> extra;
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i < n) {
      frame->vars[def_.params[i]] = args.pos[i];
      bound[i] = true;
    } else {
      extra.push_back(args.pos[i]);
    }
  }
  if (!extra.empty() && !uses_varargs_)
    type_error(fmt::format("macro '{}' takes not more than {} argument(s)", name_, n));
  Value kwargs = Value::dict();
  bool caller_given = false;
  for (auto& [k, v] : args.kw) {
    bool matched = false;
    for (size_t i = 0; i < n; ++i) {
      if (def_.params[i] == k) {
        if (bound[i]) type_error(fmt::format("macro '{}' got multiple values for argument '{}'", name_, k));
        frame->vars[k] = v;
        bound[i] = true;
        matched = true;
      }
    }
    if (matched) continue;
    if (k == "caller" && def_.kind == StmtKind::macro) {
      caller_given = true;
      frame->vars["caller"] = v;
      continue;
    }
    kwargs.as_dict().set(Value(k), v);
  }
  if (caller_given && !uses_caller_)
    type_error(fmt::format("macro '{}' was invoked with two values for the special caller argument", name_));
  if (!kwargs.as_dict().items.empty() && !uses_kwargs_)
    type_error(
        fmt::format("macro '{}' takes no keyword argument '{}'", name_, to_str(kwargs.as_dict().items[0].first)));
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (def_.defaults[i]) {
      frame->vars[def_.params[i]] = in.eval(*def_.defaults[i], frame);
    } else {
      frame->vars[def_.params[i]] = Value::undefined(fmt::format("parameter '{}' was not provided", def_.params[i]));
    }
  }
  frame->vars["varargs"] = Value::tuple(std::move(extra));
  frame->vars["kwargs"] = kwargs;
  if (!caller_given && def_.kind == StmtKind::macro && frame->vars.find("caller") == frame->vars.end() && uses_caller_)
    frame->vars["caller"] = Value::undefined("No caller defined");
  std::string out;
  in.exec(def_.body, frame, out);
  return Value(std::move(out));
}

namespace {

bool expr_reads(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == ExprKind::name && e->name == name) return true;
  for (const auto& a : e->args)
    if (expr_reads(a.get(), name)) return true;
  for (const auto& [k, v] : e->kwargs)
    if (expr_reads(v.get(), name)) return true;
  return false;
}

bool stmt_reads(const Stmt& s, const std::string& name) {
  if (expr_reads(s.expr.get(), name) || expr_reads(s.cond.get(), name)) return true;
  for (const auto& c : s.conds)
    if (expr_reads(c.get(), name)) return true;
  for (const auto& c : s.values)
    if (expr_reads(c.get(), name)) return true;
  for (const auto& c : s.defaults)
    if (expr_reads(c.get(), name)) return true;
  for (const auto& b : s.bodies)
    if (body_reads_name(b, name)) return true;
  if (s.kind == StmtKind::macro) return false;  // a nested macro has its own varargs/kwargs/caller
  return body_reads_name(s.body, name) || body_reads_name(s.else_body, name);
}

}  // namespace

bool body_reads_name(const Body& body, const std::string& name) {
  for (const auto& s : body)
    if (stmt_reads(*s, name)) return true;
  return false;
}

}  // namespace treespec::chat
