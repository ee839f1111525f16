// Formatter: a conversation (OpenAI-style messages, optional tools) to the prompt tokens
// a model was trained on. `treespec serve` (/v1/chat/completions) and `treespec chat`
// build their prompts through it, so both render a conversation identically.
//
// Which template renders (first that applies; docs/chat.md):
//   1. --chat-template-file F: that Jinja2 source;
//   2. --chat-template NAME:   a built-in format (builtin_formats.h);
//   3. the GGUF's Jinja2 `tokenizer.chat_template` (and `.tool_use` when tools are given);
//   4. the built-in format its text resembles, with a warning naming the model (plain for
//      a model without a template, or one our interpreter cannot parse).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chat/builtin_formats.h"
#include "chat/template.h"

namespace treespec::gguf {
class GgufFile;
}
namespace treespec::tokenizer {
class Tokenizer;
}

namespace treespec::chat {

struct FormatterConfig {
  std::string template_file;  // --chat-template-file: Jinja2 source overriding the GGUF's
  std::string family;         // --chat-template: a built-in format by name
  RenderOptions render;       // Jinja2 render options (strftime_now's date, limits)
};

struct ChatPrompt {
  std::vector<int32_t> tokens;     // BOS included exactly once (when the vocabulary has one)
  std::vector<std::string> stops;  // stop strings the built-in format needs (may be empty)
};

class Formatter {
 public:
  // IoError / InvalidArgument naming the file for an unreadable or unparsable template
  // file, InvalidArgument listing the names for an unknown family, both options given.
  Formatter(const gguf::GgufFile& file, const tokenizer::Tokenizer& tok, const FormatterConfig& cfg,
            const std::string& model_path);

  bool jinja() const { return jinja_ != nullptr; }
  ChatFamily family() const { return family_; }  // the built-in format (or the one the template resembles)
  const char* engine_name() const { return jinja() ? "jinja" : "builtin"; }
  const std::string& bos_text() const { return bos_text_; }
  const std::string& eos_text() const { return eos_text_; }
  const std::string& source() const { return source_; }  // the Jinja2 source in use ("" for built-in)

  // The prompt for the assistant's next turn. `messages`: a list of {role, content}
  // objects (content a string or a list of {text} parts; "developer" is read as "system";
  // other fields such as tool_calls go to Jinja templates as given); `tools`: null or a
  // list. InvalidArgument for an empty or malformed list; TemplateError from a template.
  // `kwargs`: extra template variables (llama-server's chat_template_kwargs, e.g.
  // {"enable_thinking": false}); an object or null. The built-in formats ignore them.
  ChatPrompt render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools = nullptr,
                    const nlohmann::ordered_json& kwargs = nullptr) const;

 private:
  const tokenizer::Tokenizer& tok_;
  ChatFamily family_ = ChatFamily::plain;
  std::shared_ptr<const Template> jinja_;
  std::shared_ptr<const Template> jinja_tool_use_;  // the GGUF's tool_use template, if any
  std::string source_;
  std::string bos_text_, eos_text_;
};

}  // namespace treespec::chat
