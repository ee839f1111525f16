#include "chat/template.h"

#include <fmt/format.h>

#include <new>

#include "chat/json.h"
#include "chat/lexer.h"
#include "chat/parser.h"

namespace treespec::chat {

// Unknown filters and tests are errors only when evaluated (Jinja2 3.x checks names
// inside conditional blocks at run time), which the interpreter does.

Template::Template(std::string_view source, RenderOptions opt) : opt_(opt) {
  try {
    auto body = std::make_shared<Body>(parse_template(tokenize(source), opt_.limits.max_parse_depth));
    body_ = std::move(body);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError("LimitError", "out of memory while parsing the template");
  }
}

std::string Template::render(const nlohmann::ordered_json& vars) const {
  if (!vars.is_object() && !vars.is_null())
    throw TemplateError("TypeError", "template variables must be a JSON object");
  return render_values(vars.is_null() ? Value::dict() : from_json(vars));
}

std::string Template::render_values(const Value& vars) const {
  try {
    Interpreter in(opt_, vars.is_dict() ? vars : Value::dict());
    return in.render(*body_);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError("LimitError", "out of memory while rendering the template");
  } catch (const std::exception& e) {
    throw TemplateError("InternalError", fmt::format("template rendering failed: {}", e.what()));
  }
}

}  // namespace treespec::chat
