// Jinja2's lexer with the environment transformers uses: `{{ }}`, `{% %}`, `{# #}`,
// trim_blocks and lstrip_blocks on, `-`/`+` whitespace control, raw blocks, newlines
// normalised to "\n" and one trailing newline dropped (keep_trailing_newline=False).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace treespec::chat {

enum class Tok { data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok type;
  std::string text;  // data text, name, unescaped string, operator, number spelling
  int line = 1;
  int column = 1;
  int64_t ival = 0;
  double fval = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws TemplateError("TemplateSyntaxError") with line and column.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& opt = {});

}  // namespace treespec::chat
