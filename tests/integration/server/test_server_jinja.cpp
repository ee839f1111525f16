// `serve` renders chats with the GGUF's Jinja template (src/chat): tools, tool messages
// and tool calls reach the template, raise_exception is a 400 with the template's
// message, a template that writes BOS gets one BOS, --chat-template-file overrides.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "common/golden.h"
#include "common/server_process.h"
#include "common/test_util.h"
#include "gguf/gguf.h"

using namespace treespec;
using namespace treespec::test;
using nlohmann::json;

namespace {

// Renders what the prompt was by asking /tokenize for the same text: the chat's
// prompt_tokens must equal the tokens of `expected` (BOS added by the vocab).
void expect_prompt(httplib::Client& c, const json& request, const std::string& expected) {
  const HttpReply chat = post_json(c, "/v1/chat/completions", request.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  const HttpReply tk = post_json(c, "/tokenize", json{{"content", expected}, {"add_special", true}}.dump());
  ASSERT_EQ(tk.status, 200) << tk.body;
  EXPECT_EQ(chat.json()["usage"]["prompt_tokens"], tk.json()["tokens"].size()) << expected;
  const HttpReply same =
      post_json(c, "/v1/completions",
                json{{"prompt", expected}, {"max_tokens", request["max_tokens"]}, {"temperature", 0}}.dump());
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(chat.json()["choices"][0]["message"]["content"], same.json()["choices"][0]["text"]);
}

const char* kToolTemplate =
    "{{ bos_token }}{% if tools %}Tools: {% for t in tools %}{{ t.function.name }}{{ t.function.parameters|tojson }} "
    "{% endfor %}\n{% endif %}{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('role ' ~ m.role ~ ' is not allowed') }}{% endif %}"
    "{{ m.role }}: {% if m.tool_calls %}{% for tc in m.tool_calls %}call {{ tc.function.name }}"
    "{{ tc.function.arguments|tojson }}{% endfor %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

}  // namespace

TEST(ServerJinja, ToolsToolCallsAndToolMessagesReachTheTemplate) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_with_chat_template(kToolTemplate, "tools.gguf"), {"-t", "1", "-c", "512"});
  auto c = srv.client();
  EXPECT_EQ(get(c, "/v1/models").json()["data"][0]["meta"]["chat_template_engine"], "jinja");
  const json request = json::parse(R"({
    "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Oslo?"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "weather", "arguments": {"city": "Oslo", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "cold"}],
    "tools": [{"type": "function", "function": {"name": "weather",
      "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}}],
    "tool_choice": "auto", "max_tokens": 8, "temperature": 0})");
  // key order of the request survives into tojson (zeta before alpha, city before days);
  // trim_blocks eats the newlines after the block tags (as Jinja2 renders it)
  expect_prompt(c, request,
                "Tools: weather{\"type\": \"object\", \"properties\": {\"zeta\": {\"type\": \"string\"}, "
                "\"alpha\": {\"type\": \"integer\"}}} system: Be brief.user: Weather in Oslo?"
                "assistant: call weather{\"city\": \"Oslo\", \"days\": 2}tool: coldassistant:");
}

// llama-server's chat_template_kwargs: extra template variables per request (Qwen3's
// enable_thinking); they cannot replace the standard ones; anything but an object is a 400.
TEST(ServerJinja, ChatTemplateKwargsReachTheTemplate) {
  TREESPEC_REQUIRE_SHARED();
  const char* tmpl =
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}[no think]{% endif %}{{ mood | default('calm') }}";
  ServerProcess srv(stories_with_chat_template(tmpl, "kwargs.gguf"), {"-t", "1", "-c", "256"});
  auto c = srv.client();
  json request = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}, {"temperature", 0}};
  expect_prompt(c, request, "user: Hi\ncalm");
  request["chat_template_kwargs"] = {{"enable_thinking", false}, {"mood", "glad"}, {"messages", "ignored"}};
  expect_prompt(c, request, "user: Hi\n[no think]glad");
  request["chat_template_kwargs"] = "enable_thinking";
  const HttpReply r = post_json(c, "/v1/chat/completions", request.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "chat_template_kwargs") << r.body;
}

TEST(ServerJinja, RaiseExceptionIsA400WithTheTemplatesMessage) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_with_chat_template("{{ raise_exception('Conversation roles must alternate!') }}",
                                               "raise.gguf"),
                    {"-t", "1", "-c", "256"});
  auto c = srv.client();
  const HttpReply r = post_json(c, "/v1/chat/completions",
                                json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("Conversation roles must alternate!"),
            std::string::npos)
      << r.body;
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
}

TEST(ServerJinja, TemplateWritingBosGetsOneBosAndFileOverrides) {
  TREESPEC_REQUIRE_SHARED();
  const std::string model = stories_with_chat_template(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }} {% endfor %}{% if add_generation_prompt "
      "%}>{% endif %}",
      "bos.gguf");
  ServerProcess srv(model, {"-t", "1", "-c", "256"});
  auto c = srv.client();
  const json request = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                        {"max_tokens", 6},
                        {"temperature", 0}};
  expect_prompt(c, request, "[user] Once upon a time >");  // the template's BOS text + no second BOS

  const std::string file = temp_dir() + "/override.jinja";
  std::ofstream(file) << "{% for m in messages %}{{ m.content|upper }}{% endfor %}\n";
  ServerProcess over(model, {"-t", "1", "-c", "256", "--chat-template-file", file});
  auto c2 = over.client();
  EXPECT_EQ(get(c2, "/v1/models").json()["data"][0]["meta"]["chat_template_engine"], "jinja");
  expect_prompt(c2, request, "ONCE UPON A TIME");
}

TEST(ServerJinja, ModelWithoutTemplateUsesTheNamedFallbackAndRejectsTools) {
  TREESPEC_REQUIRE_SHARED();
  ServerProcess srv(stories_gguf(), {"-t", "1", "-c", "256"});
  auto c = srv.client();
  const json meta = get(c, "/v1/models").json()["data"][0]["meta"];
  EXPECT_EQ(meta["chat_template_engine"], "builtin");
  EXPECT_EQ(meta["chat_template"], "plain");
  const HttpReply r = post_json(c, "/v1/chat/completions",
                                json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  const HttpReply t = post_json(c, "/v1/chat/completions",
                                json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                     {"tools", {{{"type", "function"}}}},
                                     {"max_tokens", 2}}
                                    .dump());
  EXPECT_GE(t.status, 400) << t.body;
}

TEST(ServerJinja, BadTemplateFileFailsFast) {
  TREESPEC_REQUIRE_SHARED();
  std::string out;
  EXPECT_NE(run_command(treespec_binary() + " serve -m " + stories_gguf() +
                            " --chat-template-file /nonexistent.jinja 2>&1",
                        &out),
            0);
  EXPECT_NE(out.find("/nonexistent.jinja"), std::string::npos) << out;
}
