// A parsed Jinja2 template that renders like Python's Jinja2 under transformers'
// apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, transformers' tojson / raise_exception / strftime_now). docs/chat.md.
//
//   chat::Template t(source);                 // TemplateError (TemplateSyntaxError) on bad syntax
//   std::string s = t.render(vars);           // TemplateError on any runtime problem
//
// Every failure is a chat::TemplateError (kind() names the Python exception Jinja2
// would raise); resource limits (RenderOptions::limits) end a render with kind
// "LimitError" instead of hanging or exhausting memory.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

#include "chat/errors.h"
#include "chat/interpreter.h"
#include "chat/value.h"

namespace treespec::chat {

class Template {
 public:
  explicit Template(std::string_view source, RenderOptions opt = {});

  // `vars` must be a JSON object: its members become the template's variables.
  std::string render(const nlohmann::ordered_json& vars) const;
  // `vars` is a dict Value (or Undefined for none).
  std::string render_values(const Value& vars) const;

  const RenderOptions& options() const { return opt_; }
  void set_options(const RenderOptions& opt) { opt_ = opt; }

 private:
  std::shared_ptr<const Body> body_;
  RenderOptions opt_;
};

}  // namespace treespec::chat
