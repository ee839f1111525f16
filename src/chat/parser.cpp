#include "chat/parser.h"

#include <fmt/format.h>

#include <initializer_list>

#include "chat/errors.h"

namespace treespec::chat {

namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& toks, int max_depth) : t_(toks), max_depth_(max_depth) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::eof) fail_here("unexpected tokens after the template");
    return body;
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int max_depth_;
  std::vector<std::string> open_blocks_;  // for "Jinja was looking for" messages
  int loop_depth_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.max_depth_) p.fail_here(fmt::format("template nested too deeply (limit {})", p.max_depth_));
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail_at(const Token& tok, const std::string& msg) const {
    throw TemplateError("TemplateSyntaxError", msg, tok.line, tok.column);
  }
  [[noreturn]] void fail_here(const std::string& msg) const { fail_at(cur(), msg); }

  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case Tok::eof: return "end of template";
      case Tok::block_end: return "end of statement block";
      case Tok::var_end: return "end of print statement";
      case Tok::block_begin: return "begin of statement block";
      case Tok::var_begin: return "begin of print statement";
      case Tok::data: return "template data";
      case Tok::string: return "string";
      default: return tok.text;
    }
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().type != Tok::name) fail_here(fmt::format("expected token 'name', got '{}'", describe(cur())));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::block_end) fail_here(fmt::format("expected token 'end of statement block', got '{}'", describe(cur())));
    next();
  }

  ExprPtr make(ExprKind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // ---- statements ------------------------------------------------------------------

  std::string looking_for(const std::vector<std::string>& ends) const {
    if (ends.empty()) return {};
    std::string s = " Jinja was looking for the following tags: ";
    for (size_t k = 0; k < ends.size(); ++k) {
      if (k) s += k + 1 == ends.size() ? " or " : ", ";
      s += "'" + ends[k] + "'";
    }
    s += ".";
    if (!open_blocks_.empty()) s += " The innermost block that needs to be closed is '" + open_blocks_.back() + "'.";
    return s;
  }

  // Parses until `{% <one of ends>`; leaves the end name as the current token.
  Body subparse(const std::vector<std::string>& ends) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::eof) {
        if (!ends.empty()) fail_here("Unexpected end of template." + looking_for(ends));
        return body;
      }
      if (tok.type == Tok::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::output;
        s->text = tok.text;
        s->line = tok.line;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == Tok::var_begin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::print;
        s->line = tok.line;
        s->column = tok.column;
        s->expr = parse_tuple(true, {}, false);
        if (cur().type != Tok::var_end) fail_here(fmt::format("expected token 'end of print statement', got '{}'", describe(cur())));
        next();
        body.push_back(std::move(s));
      } else if (tok.type == Tok::block_begin) {
        next();
        if (cur().type != Tok::name) fail_here("tag name expected");
        for (const auto& e : ends)
          if (cur().text == e) return body;
        body.push_back(parse_statement(ends));
      } else {
        fail_here(fmt::format("unexpected '{}'", describe(tok)));
      }
    }
  }

  Body parse_block_body(const std::string& tag, const std::vector<std::string>& ends) {
    open_blocks_.push_back(tag);
    Body b = subparse(ends);
    open_blocks_.pop_back();
    return b;
  }

  StmtPtr new_stmt(StmtKind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  StmtPtr parse_statement(const std::vector<std::string>& outer_ends) {
    const Token tag = cur();
    const std::string& n = tag.text;
    if (n == "for") return parse_for();
    if (n == "if") return parse_if();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "generation") {
      next();
      expect_block_end();
      auto s = new_stmt(StmtKind::generation, tag);
      s->body = parse_block_body("generation", {"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (n == "print") {
      next();
      auto s = new_stmt(StmtKind::print, tag);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_here(fmt::format("'{}' outside of a loop", n));
      next();
      expect_block_end();
      return new_stmt(n == "break" ? StmtKind::break_ : StmtKind::continue_, tag);
    }
    if (n == "block" || n == "extends" || n == "include" || n == "import" || n == "from" || n == "autoescape")
      fail_here(fmt::format("the '{}' tag is not supported (chat templates are single files)", n));
    fail_here(fmt::format("Encountered unknown tag '{}'.", n) + looking_for(outer_ends));
  }

  // `end` is the current token (a name); consume it and the block end.
  void finish_block() {
    next();
    expect_block_end();
  }

  StmtPtr parse_for() {
    const Token tag = cur();
    next();
    auto s = new_stmt(StmtKind::for_, tag);
    s->target = parse_assign_target({"in"}, false);
    if (!skip_name("in")) fail_here(fmt::format("expected token 'in', got '{}'", describe(cur())));
    s->expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail_here("recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_block_body("for", {"endfor", "else"});
    --loop_depth_;
    if (is_name("else")) {
      next();
      expect_block_end();
      s->has_else = true;
      s->else_body = parse_block_body("for", {"endfor"});
    }
    finish_block();
    return s;
  }

  StmtPtr parse_if() {
    const Token tag = cur();
    next();
    auto s = new_stmt(StmtKind::if_, tag);
    s->conds.push_back(parse_tuple(false, {}, false));
    expect_block_end();
    s->bodies.push_back(parse_block_body("if", {"elif", "else", "endif"}));
    while (true) {
      if (is_name("elif")) {
        next();
        s->conds.push_back(parse_tuple(false, {}, false));
        expect_block_end();
        s->bodies.push_back(parse_block_body("if", {"elif", "else", "endif"}));
      } else if (is_name("else")) {
        next();
        expect_block_end();
        s->has_else = true;
        s->else_body = parse_block_body("if", {"endif"});
        finish_block();
        return s;
      } else {
        finish_block();
        return s;
      }
    }
  }

  StmtPtr parse_set() {
    const Token tag = cur();
    next();
    ExprPtr target = parse_assign_target({}, true);
    if (skip_op("=")) {
      auto s = new_stmt(StmtKind::set, tag);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = new_stmt(StmtKind::set_block, tag);
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_block_body("set", {"endset"});
    finish_block();
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      const Token at = cur();
      std::string p = expect_name();
      ExprPtr def;
      if (skip_op("=")) {
        def = parse_expression(true);
      } else if (!s.defaults.empty() && s.defaults.back()) {
        fail_at(at, "non-default argument follows default argument");
      }
      s.params.push_back(std::move(p));
      s.defaults.push_back(std::move(def));
    }
    next();
  }

  StmtPtr parse_macro() {
    const Token tag = cur();
    next();
    auto s = new_stmt(StmtKind::macro, tag);
    s->name = expect_name();
    parse_signature(*s);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_block_body("macro", {"endmacro"});
    loop_depth_ = saved;
    finish_block();
    return s;
  }

  StmtPtr parse_call_block() {
    const Token tag = cur();
    next();
    auto s = new_stmt(StmtKind::call_block, tag);
    if (is_op("(")) parse_signature(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::call) fail_at(tag, "expected call");
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_block_body("call", {"endcall"});
    loop_depth_ = saved;
    finish_block();
    return s;
  }

  StmtPtr parse_filter_block() {
    const Token tag = cur();
    next();
    auto s = new_stmt(StmtKind::filter_block, tag);
    s->expr = parse_filter_chain(nullptr, true);
    expect_block_end();
    s->body = parse_block_body("filter", {"endfilter"});
    finish_block();
    return s;
  }

  StmtPtr parse_with() {
    const Token tag = cur();
    next();
    auto s = new_stmt(StmtKind::with, tag);
    while (cur().type != Tok::block_end) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target({}, false));
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    next();
    s->body = parse_block_body("with", {"endwith"});
    finish_block();
    return s;
  }

  // name | name.attr (namespace, with_namespace) | tuple of names
  ExprPtr parse_assign_target(const std::vector<std::string>& extra_end, bool with_namespace) {
    const Token at = cur();
    if (with_namespace && cur().type == Tok::name && peek().type == Tok::op && peek().text == ".") {
      auto e = make(ExprKind::getattr, at);
      auto base = make(ExprKind::name, at);
      base->name = expect_name();
      next();
      e->name = expect_name();
      e->args.push_back(std::move(base));
      return e;
    }
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      if (cur().type != Tok::name) fail_here(fmt::format("can't assign to '{}'", describe(cur())));
      auto n = make(ExprKind::name, cur());
      n->name = cur().text;
      if (n->name == "true" || n->name == "false" || n->name == "none" || n->name == "True" || n->name == "False" ||
          n->name == "None")
        fail_here(fmt::format("can't assign to '{}'", n->name));
      next();
      items.push_back(std::move(n));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (items.empty()) fail_at(at, "expected an assignment target");
    if (!is_tuple) return std::move(items[0]);
    auto t = make(ExprKind::tuple, at);
    t->args = std::move(items);
    return t;
  }

  // ---- expressions -----------------------------------------------------------------

  bool tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& c = cur();
    if (c.type == Tok::var_end || c.type == Tok::block_end || c.type == Tok::eof) return true;
    if (c.type == Tok::op && c.text == ")") return true;
    if (c.type == Tok::name)
      for (const auto& e : extra_end)
        if (c.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens) {
    const Token at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_at(at, fmt::format("Expected an expression, got '{}'", describe(cur())));
    }
    auto t = make(ExprKind::tuple, at);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token at = cur();
      next();
      auto c = make(ExprKind::condexpr, at);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Token& at) {
    auto e = make(ExprKind::binary, at);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token at = cur();
      next();
      l = binary("or", std::move(l), parse_and(), at);
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token at = cur();
      next();
      l = binary("and", std::move(l), parse_not(), at);
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      const Token at = cur();
      next();
      auto e = make(ExprKind::not_, at);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token at = cur();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::compare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token at = cur();
      next();
      l = binary(at.text, std::move(l), parse_concat(), at);
    }
    return l;
  }

  ExprPtr parse_concat() {
    const Token at = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::concat, at);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token at = cur();
      next();
      l = binary(at.text, std::move(l), parse_pow(), at);
    }
    return l;
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Token at = cur();
      next();
      l = binary("**", std::move(l), parse_unary(true), at);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    const Token at = cur();
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      next();
      node = make(at.text == "-" ? ExprKind::neg : ExprKind::pos, at);
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token at = cur();
    switch (at.type) {
      case Tok::name: {
        next();
        auto e = make(ExprKind::constant, at);
        if (at.text == "true" || at.text == "True") {
          e->value = Value(true);
        } else if (at.text == "false" || at.text == "False") {
          e->value = Value(false);
        } else if (at.text == "none" || at.text == "None") {
          e->value = Value(None{});
        } else {
          e->kind = ExprKind::name;
          e->name = at.text;
        }
        return e;
      }
      case Tok::string: {
        std::string s;
        while (cur().type == Tok::string) {
          s += cur().text;
          next();
        }
        auto e = make(ExprKind::constant, at);
        e->value = Value(std::move(s));
        return e;
      }
      case Tok::integer:
      case Tok::floating: {
        next();
        auto e = make(ExprKind::constant, at);
        e->value = at.type == Tok::integer ? Value(at.ival) : Value(at.fval);
        return e;
      }
      case Tok::op:
        if (at.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (at.text == "[") return parse_list();
        if (at.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail_here(fmt::format("unexpected '{}'", describe(at)));
  }

  ExprPtr parse_list() {
    auto e = make(ExprKind::list, cur());
    expect_op("[");
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(ExprKind::dict, cur());
    expect_op("{");
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard g(*this);
    const Token at = cur();
    if (skip_op(".")) {
      if (cur().type == Tok::name) {
        auto e = make(ExprKind::getattr, at);
        e->name = cur().text;
        next();
        e->args.push_back(std::move(node));
        return e;
      }
      if (cur().type == Tok::integer) {
        auto e = make(ExprKind::getitem, at);
        auto k = make(ExprKind::constant, cur());
        k->value = Value(cur().ival);
        next();
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(k));
        return e;
      }
      fail_here("expected name or number");
    }
    expect_op("[");
    std::vector<ExprPtr> subs;
    while (!is_op("]")) {
      if (!subs.empty()) expect_op(",");
      if (is_op("]")) break;
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.empty()) fail_at(at, "expected a subscript");
    ExprPtr index;
    if (subs.size() == 1) {
      index = std::move(subs[0]);
    } else {
      for (const auto& sub : subs)  // x[a:b, c]: Jinja2 makes a tuple of slice objects, which no chat value takes
        if (sub->kind == ExprKind::slice) fail_at(at, "a slice inside a tuple index is not supported");
      index = make(ExprKind::tuple, at);
      index->args = std::move(subs);
    }
    if (index->kind == ExprKind::slice) {
      index->args.insert(index->args.begin(), std::move(node));
      return index;
    }
    auto e = make(ExprKind::getitem, at);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(index));
    return e;
  }

  // expr | [expr] : [expr] [: [expr]]  (a slice keeps args [start, stop, step])
  ExprPtr parse_subscribed() {
    const Token at = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();
    auto s = make(ExprKind::slice, at);
    s->args.push_back(std::move(start));
    s->args.push_back(!is_op("]") && !is_op(",") && !is_op(":") ? parse_expression(true) : nullptr);
    if (skip_op(":")) {
      s->args.push_back(!is_op("]") && !is_op(",") ? parse_expression(true) : nullptr);
    } else {
      s->args.push_back(nullptr);
    }
    return s;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_here("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::name && peek().type == Tok::op && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail_here("positional argument follows keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard g(*this);
    auto e = make(ExprKind::call, cur());
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == Tok::name) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  // node | f(args) | g ...; node null for filter blocks (and block sets).
  ExprPtr parse_filter_chain(ExprPtr node, bool start_inline = false) {
    DepthGuard g(*this);
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto e = make(ExprKind::filter, cur());
      e->name = dotted_name();
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard g(*this);
    const Token at = cur();
    next();  // is
    auto e = make(ExprKind::test, at);
    e->negated = skip_name("not");
    e->name = dotted_name();
    e->args.push_back(std::move(node));
    const Token& c = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((c.type == Tok::name || c.type == Tok::string || c.type == Tok::integer || c.type == Tok::floating ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, int max_depth) { return Parser(tokens, max_depth).parse_all(); }

}  // namespace treespec::chat
