#include "chat/formatter.h"

#include <fmt/format.h>

#include "chat/chat.h"
#include "core/files.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "treespec/status.h"

namespace treespec::chat {

namespace {

// A message's content as text: a string, a list of {text} parts (concatenated), or
// absent / null ("").
std::string content_text(const nlohmann::ordered_json& msg, size_t i) {
  const auto c = msg.find("content");
  if (c == msg.end() || c->is_null()) return "";
  if (c->is_string()) return c->get<std::string>();
  if (c->is_array()) {
    std::string text;
    for (const auto& part : *c) {
      const auto t = part.is_object() ? part.find("text") : part.end();
      if (t == part.end() || !t->is_string())
        throw InvalidArgument(fmt::format("messages[{}].content: every part needs a string 'text'", i));
      text += t->get<std::string>();
    }
    return text;
  }
  throw InvalidArgument(fmt::format("messages[{}].content must be a string or a list of text parts", i));
}

}  // namespace

Formatter::Formatter(const gguf::GgufFile& file, const tokenizer::Tokenizer& tok, const FormatterConfig& cfg,
                     const std::string& model_path)
    : tok_(tok) {
  if (!cfg.template_file.empty() && !cfg.family.empty())
    throw InvalidArgument("--chat-template and --chat-template-file exclude each other");
  bos_text_ = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), true) : "";
  eos_text_ = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id(), true) : "";
  const std::string gguf_source = gguf_chat_template(file, false);
  family_ = detect_chat_family(gguf_source);
  if (!cfg.template_file.empty()) {
    source_ = core::read_text_file(cfg.template_file, "chat template file");
    try {
      jinja_ = std::make_shared<const Template>(source_, cfg.render);
    } catch (const TemplateError& e) {
      throw InvalidArgument(fmt::format("chat template file '{}': {}", cfg.template_file, e.describe()));
    }
    family_ = detect_chat_family(source_);
    return;
  }
  if (!cfg.family.empty()) {
    family_ = chat_family_from_name(cfg.family);
    return;
  }
  if (gguf_source.empty()) {
    TS_LOG_WARN("{} has no tokenizer.chat_template: using the built-in '{}' chat format", model_path,
                chat_family_name(family_));
    return;
  }
  try {
    jinja_ = std::make_shared<const Template>(gguf_source, cfg.render);
    const std::string tool_use = gguf_chat_template(file, true);
    if (tool_use != gguf_source) jinja_tool_use_ = std::make_shared<const Template>(tool_use, cfg.render);
    source_ = gguf_source;
  } catch (const TemplateError& e) {
    jinja_.reset();
    jinja_tool_use_.reset();
    TS_LOG_WARN("cannot use the chat template of {} ({}): using the built-in '{}' chat format", model_path,
                e.describe(), chat_family_name(family_));
  }
}

ChatPrompt Formatter::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                             const nlohmann::ordered_json& kwargs) const {
  if (!messages.is_array() || messages.empty()) throw InvalidArgument("messages must be a non-empty list");
  ChatPrompt out;
  if (!jinja()) {
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < messages.size(); ++i) {
      const auto& m = messages[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw InvalidArgument(fmt::format("messages[{}] must be an object with a string 'role'", i));
      std::string role = m["role"].get<std::string>();
      msgs.push_back({role == "developer" ? "system" : role, content_text(m, i)});
    }
    RenderedChat rc = render_builtin(family_, msgs, bos_text_, eos_text_);
    out.tokens = tok_.encode(rc.prompt, true, true);
    out.stops = std::move(rc.stops);
    return out;
  }
  ChatInput in;
  for (size_t i = 0; i < messages.size(); ++i) {
    nlohmann::ordered_json msg = messages[i];
    if (!msg.is_object()) throw InvalidArgument(fmt::format("messages[{}] must be an object", i));
    if (msg.value("role", "") == "developer") msg["role"] = "system";
    if (auto c = msg.find("content"); c != msg.end() && c->is_array()) *c = content_text(msg, i);
    in.messages.push_back(std::move(msg));
  }
  if (tools.is_array() && !tools.empty()) in.tools = tools;
  in.add_generation_prompt = true;
  in.bos_token = bos_text_;
  in.eos_token = eos_text_;
  if (kwargs.is_object()) in.extra = kwargs;
  const Template& tmpl = !in.tools.is_null() && jinja_tool_use_ ? *jinja_tool_use_ : *jinja_;
  std::string text = render_chat(tmpl, in);
  // A template that writes the BOS text gets exactly one BOS: the vocabulary's automatic
  // one in its place (so the text after it tokenizes as after any BOS), or the written
  // one when the vocabulary adds none.
  const bool has_bos = !bos_text_.empty() && text.compare(0, bos_text_.size(), bos_text_) == 0;
  if (has_bos && tok_.vocab().add_bos) text.erase(0, bos_text_.size());
  out.tokens = tok_.encode(text, !has_bos || tok_.vocab().add_bos, true);
  return out;
}

}  // namespace treespec::chat
