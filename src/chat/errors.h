// Template errors. Every problem a template can cause (syntax, undefined names, type
// errors, raise_exception, limits) is a TemplateError; nothing else escapes render().
#pragma once

#include <string>

#include "treespec/status.h"

namespace treespec::chat {

class TemplateError : public Error {
 public:
  // `kind` is the Python exception name Jinja2 would raise (TemplateError,
  // TemplateSyntaxError, UndefinedError, SecurityError, TypeError, ValueError,
  // ZeroDivisionError, OverflowError, LimitError for our resource limits).
  TemplateError(std::string kind, const std::string& message, int line = 0, int column = 0)
      : Error(message), kind_(std::move(kind)), line_(line), column_(column) {}
  const std::string& kind() const { return kind_; }
  int line() const { return line_; }
  int column() const { return column_; }
  void set_location(int line, int column) {
    if (line_ == 0) {
      line_ = line;
      column_ = column;
    }
  }
  // "kind: message (line L, column C)" for users.
  std::string describe() const;

 private:
  std::string kind_;
  int line_;
  int column_;
};

[[noreturn]] inline void type_error(const std::string& msg) { throw TemplateError("TypeError", msg); }
[[noreturn]] inline void value_error(const std::string& msg) { throw TemplateError("ValueError", msg); }

}  // namespace treespec::chat
