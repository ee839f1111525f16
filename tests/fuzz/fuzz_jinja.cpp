// Jinja2 chat templates: any bytes as a template (and, after a NUL byte, as JSON render
// variables) must parse or throw chat::TemplateError, and render or throw
// chat::TemplateError, within the limits: nothing else escapes, no crash, no hang, the
// output never exceeds the output limit, and rendering twice gives the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat/chat.h"
#include "chat/template.h"

namespace {

using namespace treespec;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (nul != std::string::npos) {
    vars = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
    if (vars.is_discarded() || !vars.is_object()) vars = nlohmann::ordered_json::object();
  }
  if (!vars.contains("messages"))
    vars["messages"] = nlohmann::ordered_json::parse(R"([{"role": "system", "content": "s"},
        {"role": "user", "content": "hi \u4f60\u597d"}, {"role": "assistant", "content": "yo",
        "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}])");

  chat::RenderOptions opt;
  opt.limits.max_steps = 200000;
  opt.limits.max_output_bytes = 1 << 20;
  opt.limits.max_container_items = 1 << 16;
  opt.limits.max_call_depth = 64;
  opt.now = std::tm{};
  for (bool immutable : {true, false}) {
    opt.immutable_sandbox = immutable;
    try {
      chat::Template t(source, opt);
      std::string first;
      bool ok = true;
      try {
        first = t.render(vars);
      } catch (const chat::TemplateError& e) {
        check(!e.kind().empty() && e.kind() != "InternalError");
        ok = false;
      }
      if (ok) {
        check(first.size() <= opt.limits.max_output_bytes);
        check(t.render(vars) == first);
      }
    } catch (const chat::TemplateError& e) {
      check(e.kind() == "TemplateSyntaxError" || e.kind() == "LimitError");
    }
  }
  return 0;
}
