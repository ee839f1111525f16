// Entry point of the parser; the Parser class (statements) is in parser_impl.h and its
// expression methods in parser_expr.cpp.
#include "chat/parser.h"

#include "chat/parser_impl.h"

namespace treespec::chat {

Body parse_template(const std::vector<Token>& tokens, int max_depth) {
  return detail::Parser(tokens, max_depth).parse_all();
}

}  // namespace treespec::chat
