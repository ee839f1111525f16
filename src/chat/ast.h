// Syntax tree of a parsed template. Expressions and statements are plain structs with
// a kind tag; the interpreter (interpreter.cpp, eval_expr.cpp) walks them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace treespec::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  constant,  // value
  name,      // name
  list,      // args
  tuple,     // args
  dict,      // args: key0, value0, key1, value1, ...
  getattr,   // args[0] . name
  getitem,   // args[0] [ args[1] ]
  slice,     // args[0] [ args[1] : args[2] : args[3] ] (missing parts are null)
  call,      // args[0] ( args[1..], kwargs )
  filter,    // args[0] | name ( args[1..], kwargs ); args[0] null inside {% filter %}
  test,      // args[0] is [not] name ( args[1..], kwargs ); negated
  neg,       // - args[0]
  pos,       // + args[0]
  not_,      // not args[0]
  binary,    // args[0] op args[1]: + - * / // % ** and or
  concat,    // args joined with ~
  compare,   // args[0] ops[0] args[1] ops[1] args[2] ...
  condexpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value value;       // constant
  std::string name;  // name, attribute, filter / test name, binary operator
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // compare operators: == != < <= > >= in notin
  bool negated = false;          // test
};

enum class StmtKind {
  output,        // text
  print,         // expr
  if_,           // conds[i] -> bodies[i]; else_body
  for_,          // target in expr [if cond] : body / else_body; recursive unsupported
  set,           // target = expr
  set_block,     // target = captured body (|filter chain in expr, innermost arg null)
  macro,         // name(params = defaults) body
  call_block,    // expr (a call) with caller(params) = body
  filter_block,  // expr (filter chain with null innermost arg) applied to body
  break_,
  continue_,
  with,        // targets = values; body
  generation,  // transformers' {% generation %}: renders its body
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  bool has_else = false;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null = required
  std::vector<ExprPtr> targets;   // with
  std::vector<ExprPtr> values;    // with
};

}  // namespace treespec::chat
