// Recursive-descent parser with Jinja2's grammar and precedence (parser.py): or < and <
// not < comparisons < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and
// filters / tests. Throws TemplateError("TemplateSyntaxError") with line and column.
#pragma once

#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace treespec::chat {

// `max_depth` bounds expression and block nesting (a hostile template cannot overflow
// the stack).
Body parse_template(const std::vector<Token>& tokens, int max_depth = 256);

}  // namespace treespec::chat
