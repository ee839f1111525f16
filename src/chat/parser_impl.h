// The template parser: the class with its statement rules (inline here) and the
// expression rules (parser_expr.cpp). Internal to src/chat.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/errors.h"
#include "chat/lexer.h"

namespace treespec::chat::detail {

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
    if (cur().type != Tok::block_end)
      fail_here(fmt::format("expected token 'end of statement block', got '{}'", describe(cur())));
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
        if (cur().type != Tok::var_end)
          fail_here(fmt::format("expected token 'end of print statement', got '{}'", describe(cur())));
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

  // ---- expressions (parser_expr.cpp) ----------------------------------------------
  bool tuple_end(const std::vector<std::string>& extra_end) const;
  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, const Token& at);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string dotted_name();
  ExprPtr parse_filter_chain(ExprPtr node, bool start_inline = false);
  ExprPtr parse_test(ExprPtr node);
};

}  // namespace treespec::chat::detail
