#include "chat/builtin_formats.h"

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "treespec/status.h"

namespace treespec::chat {

std::string gguf_chat_template(const gguf::GgufFile& file, bool tools) {
  if (tools && file.has("tokenizer.chat_template.tool_use")) return file.get_string("tokenizer.chat_template.tool_use");
  return file.get_string("tokenizer.chat_template", "");
}

namespace {

struct FamilyName {
  ChatFamily family;
  const char* name;
};
constexpr FamilyName kNames[] = {
    {ChatFamily::plain, "plain"},   {ChatFamily::chatml, "chatml"},   {ChatFamily::llama2, "llama2"},
    {ChatFamily::llama3, "llama3"}, {ChatFamily::mistral, "mistral"}, {ChatFamily::mistral_v7, "mistral-v7"},
    {ChatFamily::phi3, "phi3"},     {ChatFamily::zephyr, "zephyr"},   {ChatFamily::gemma, "gemma"},
};

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\n' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\n' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// Families without a system role fold the system text into the first user message.
std::vector<ChatMessage> fold_system(const std::vector<ChatMessage>& msgs) {
  std::vector<ChatMessage> out;
  std::string system;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      system += system.empty() ? m.content : "\n\n" + m.content;
      continue;
    }
    if (m.role == "user" && !system.empty()) {
      out.push_back({m.role, system + "\n\n" + m.content});
      system.clear();
      continue;
    }
    out.push_back(m);
  }
  if (!system.empty()) out.push_back({"user", system});  // system text only: still say it
  return out;
}

}  // namespace

const char* chat_family_name(ChatFamily f) {
  for (const auto& n : kNames) {
    if (n.family == f) return n.name;
  }
  return "?";
}

std::vector<std::string> chat_family_names() {
  std::vector<std::string> out;
  for (const auto& n : kNames) out.emplace_back(n.name);
  return out;
}

ChatFamily chat_family_from_name(std::string_view name) {
  for (const auto& n : kNames) {
    if (name == n.name) return n.family;
  }
  throw InvalidArgument(
      fmt::format("unknown chat template '{}' (known: {})", name, fmt::join(chat_family_names(), ", ")));
}

ChatFamily detect_chat_family(std::string_view t) {
  if (t.empty()) return ChatFamily::plain;
  if (contains(t, "<|im_start|>")) return ChatFamily::chatml;
  if (contains(t, "<|start_header_id|>")) return ChatFamily::llama3;
  if (contains(t, "[SYSTEM_PROMPT]")) return ChatFamily::mistral_v7;
  if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? ChatFamily::llama2 : ChatFamily::mistral;
  if (contains(t, "<|user|>")) return contains(t, "<|end|>") ? ChatFamily::phi3 : ChatFamily::zephyr;
  if (contains(t, "<start_of_turn>")) return ChatFamily::gemma;
  return ChatFamily::plain;
}

RenderedChat render_builtin(ChatFamily family, const std::vector<ChatMessage>& messages, std::string_view bos_text,
                            std::string_view eos_text) {
  if (messages.empty()) throw InvalidArgument("'messages' is empty: a chat needs at least one message");
  RenderedChat r;
  std::string& p = r.prompt;
  switch (family) {
    case ChatFamily::chatml:
      for (const auto& m : messages) p += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
      p += "<|im_start|>assistant\n";
      break;
    case ChatFamily::llama3:
      for (const auto& m : messages) {
        p += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", m.role, trim(m.content));
      }
      p += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFamily::llama2: {
      // [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
      // The first BOS comes from the tokenizer; later turns spell it out.
      std::string system;
      bool first_turn = true;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system += system.empty() ? trim(m.content) : "\n\n" + trim(m.content);
        } else if (m.role == "assistant") {
          p += fmt::format(" {} {}", trim(m.content), eos_text);
        } else {
          if (!first_turn) p += bos_text;
          first_turn = false;
          std::string content = trim(m.content);
          if (!system.empty()) {
            content = fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", system, content);
            system.clear();
          }
          p += fmt::format("[INST] {} [/INST]", content);
        }
      }
      if (!system.empty()) p += fmt::format("[INST] <<SYS>>\n{}\n<</SYS>>\n\n [/INST]", system);
      break;
    }
    case ChatFamily::mistral:
      // [INST] {user} [/INST]{assistant}</s>[INST] ...  (Mistral 7B v0.1 template)
      for (const auto& m : fold_system(messages)) {
        if (m.role == "assistant") {
          p += fmt::format("{}{}", m.content, eos_text);
        } else {
          p += fmt::format("[INST] {} [/INST]", m.content);
        }
      }
      break;
    case ChatFamily::mistral_v7:
      for (const auto& m : messages) {
        if (m.role == "system") {
          p += fmt::format("[SYSTEM_PROMPT] {}[/SYSTEM_PROMPT]", m.content);
        } else if (m.role == "assistant") {
          p += fmt::format(" {}{}", m.content, eos_text);
        } else {
          p += fmt::format("[INST] {}[/INST]", m.content);
        }
      }
      break;
    case ChatFamily::phi3:
      for (const auto& m : messages) p += fmt::format("<|{}|>\n{}<|end|>\n", m.role, m.content);
      p += "<|assistant|>\n";
      break;
    case ChatFamily::zephyr:
      for (const auto& m : messages) p += fmt::format("<|{}|>\n{}{}\n", m.role, m.content, eos_text);
      p += "<|assistant|>\n";
      break;
    case ChatFamily::gemma:
      for (const auto& m : fold_system(messages)) {
        const std::string role = m.role == "assistant" ? "model" : m.role;
        p += fmt::format("<start_of_turn>{}\n{}<end_of_turn>\n", role, trim(m.content));
      }
      p += "<start_of_turn>model\n";
      break;
    case ChatFamily::plain:
      // "role: content" lines; an answer that starts with a space or newline (what the
      // model wrote after "assistant:") follows the colon directly, so the rendered turn
      // is the text the model produced and its KV is reused (treespec chat, docs/chat.md).
      for (const auto& m : messages) {
        const bool spaced = !m.content.empty() && (m.content[0] == ' ' || m.content[0] == '\n');
        p += fmt::format("{}:{}{}\n", m.role, spaced && m.role == "assistant" ? "" : " ", m.content);
      }
      p += "assistant:";
      r.stops.push_back("\nuser:");
      break;
  }
  return r;
}

}  // namespace treespec::chat
