// Expression parsing: Jinja2's precedence climbing (parser.py's parse_or ... parse_primary,
// postfix subscripts and calls, filters and tests).
#include "chat/parser_impl.h"

namespace treespec::chat::detail {

// ---- expressions -----------------------------------------------------------------

bool Parser::tuple_end(const std::vector<std::string>& extra_end) const {
  const Token& c = cur();
  if (c.type == Tok::var_end || c.type == Tok::block_end || c.type == Tok::eof) return true;
  if (c.type == Tok::op && c.text == ")") return true;
  if (c.type == Tok::name)
    for (const auto& e : extra_end)
      if (c.text == e) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens) {
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

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard g(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
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

ExprPtr Parser::binary(const std::string& op, ExprPtr l, ExprPtr r, const Token& at) {
  auto e = make(ExprKind::binary, at);
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr l = parse_and();
  while (is_name("or")) {
    const Token at = cur();
    next();
    l = binary("or", std::move(l), parse_and(), at);
  }
  return l;
}

ExprPtr Parser::parse_and() {
  ExprPtr l = parse_not();
  while (is_name("and")) {
    const Token at = cur();
    next();
    l = binary("and", std::move(l), parse_not(), at);
  }
  return l;
}

ExprPtr Parser::parse_not() {
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

ExprPtr Parser::parse_compare() {
  const Token at = cur();
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == Tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                  cur().text == ">" || cur().text == ">=")) {
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

ExprPtr Parser::parse_math1() {
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token at = cur();
    next();
    l = binary(at.text, std::move(l), parse_concat(), at);
  }
  return l;
}

ExprPtr Parser::parse_concat() {
  const Token at = cur();
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make(ExprKind::concat, at);
  e->args.push_back(std::move(first));
  while (skip_op("~")) e->args.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token at = cur();
    next();
    l = binary(at.text, std::move(l), parse_pow(), at);
  }
  return l;
}

ExprPtr Parser::parse_pow() {
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    const Token at = cur();
    next();
    l = binary("**", std::move(l), parse_unary(true), at);
  }
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_list() {
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

ExprPtr Parser::parse_dict() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr node) {
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
ExprPtr Parser::parse_subscribed() {
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

void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr node) {
  DepthGuard g(*this);
  auto e = make(ExprKind::call, cur());
  e->args.push_back(std::move(node));
  parse_call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string n = expect_name();
  while (is_op(".") && peek().type == Tok::name) {
    next();
    n += "." + expect_name();
  }
  return n;
}

// node | f(args) | g ...; node null for filter blocks (and block sets).
ExprPtr Parser::parse_filter_chain(ExprPtr node, bool start_inline) {
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

ExprPtr Parser::parse_test(ExprPtr node) {
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

}  // namespace treespec::chat::detail
