// Chat templates: turn OpenAI chat messages into the prompt text a model was trained on.
//
// GGUF files carry the Hugging Face Jinja template in `tokenizer.chat_template`; the
// server renders it with the Jinja2 interpreter in src/chat (docs/chat.md). The built-in
// C++ formatters below are the named fallback for a model without a template (or one
// our interpreter cannot parse), chosen by distinctive substrings of the template or by
// --chat-template NAME. Absent templates fall back to a plain transcript ("role: content"
// lines ending with "assistant:"), which also adds the stop string "\nuser:" so the
// model does not write the user's next turn.
//
// Detection order (first match wins; see docs/server.md):
//   "<|im_start|>"                      chatml   (Qwen, Yi, OpenHermes, ...)
//   "<|start_header_id|>"               llama3
//   "[SYSTEM_PROMPT]"                   mistral-v7
//   "[INST]" and "<<SYS>>"              llama2
//   "[INST]"                            mistral  (v0.1: system folded into the first user turn)
//   "<|user|>" and "<|end|>"            phi3
//   "<|user|>"                          zephyr
//   "<start_of_turn>"                   gemma
//   anything else / empty               plain (fallback)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace treespec::gguf {
class GgufFile;
}

namespace treespec::chat {

// The GGUF's Jinja chat template: `tokenizer.chat_template.tool_use` when `tools` and the
// file has one (transformers picks the "tool_use" template when tools are given), else
// `tokenizer.chat_template`; "" when there is none.
std::string gguf_chat_template(const gguf::GgufFile& file, bool tools);

struct ChatMessage {
  std::string role;  // system | user | assistant (others are passed through by name)
  std::string content;
};

enum class ChatFamily { plain, chatml, llama2, llama3, mistral, mistral_v7, phi3, zephyr, gemma };

const char* chat_family_name(ChatFamily f);
// Parses a family name (as printed by chat_family_name); InvalidArgument listing the names.
ChatFamily chat_family_from_name(std::string_view name);
std::vector<std::string> chat_family_names();

// Picks the family for a Jinja template text (empty -> plain).
ChatFamily detect_chat_family(std::string_view t);

struct RenderedChat {
  std::string prompt;              // text to tokenize (BOS is added by the tokenizer)
  std::vector<std::string> stops;  // extra stop strings the family needs (may be empty)
};

// Renders messages and the generation prompt for the assistant's next turn.
// `bos_text` / `eos_text` are the model's BOS / EOS tokens spelled out (families that
// delimit turns with them: llama2, mistral, zephyr); the prompt is tokenized with
// special-token parsing on, so they become the real tokens. The first BOS is not
// written: the tokenizer adds it. InvalidArgument for an empty message list.
RenderedChat render_builtin(ChatFamily family, const std::vector<ChatMessage>& messages, std::string_view bos_text,
                            std::string_view eos_text);

}  // namespace treespec::chat
