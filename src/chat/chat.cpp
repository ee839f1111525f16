#include "chat/chat.h"

#include <fmt/format.h>

namespace treespec::chat {

std::string render_chat(const Template& tmpl, const ChatInput& input) {
  if (!input.messages.is_array())
    throw InvalidArgument(fmt::format("chat messages must be a JSON list, got {}", input.messages.type_name()));
  for (size_t i = 0; i < input.messages.size(); ++i) {
    if (!input.messages[i].is_object())
      throw InvalidArgument(
          fmt::format("chat message {} must be a JSON object, got {}", i, input.messages[i].type_name()));
  }
  if (!input.tools.is_null() && !input.tools.is_array())
    throw InvalidArgument(fmt::format("chat tools must be a JSON list, got {}", input.tools.type_name()));
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = input.messages;
  vars["tools"] = input.tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = input.add_generation_prompt;
  vars["bos_token"] = input.bos_token;
  vars["eos_token"] = input.eos_token;
  if (input.extra.is_object())
    for (const auto& [k, v] : input.extra.items())
      if (!vars.contains(k)) vars[k] = v;
  return tmpl.render(vars);
}

}  // namespace treespec::chat
