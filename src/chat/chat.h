// Rendering a conversation with a chat template, with the variables transformers'
// apply_chat_template passes: messages, tools (None when absent), documents (None),
// add_generation_prompt, bos_token, eos_token, plus any extra ones.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "chat/template.h"

namespace treespec::chat {

struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // a list of message objects
  nlohmann::ordered_json tools;                                       // null or a list of tool schemas
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables (override nothing above)
};

// InvalidArgument when `messages` is not a list of objects; TemplateError from the template.
std::string render_chat(const Template& tmpl, const ChatInput& input);

}  // namespace treespec::chat
