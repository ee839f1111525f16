// Interpreter behaviour that Python's Jinja2 cannot serve as the oracle for: error
// locations, resource limits, the sandbox switch, the injected clock, the chat API,
// and our documented deviations (64-bit integers).
#include <gtest/gtest.h>

#include <chrono>

#include "chat/chat.h"
#include "chat/template.h"

namespace treespec::chat {

namespace {

std::string render(const std::string& src, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object(),
                   RenderOptions opt = {}) {
  return Template(src, opt).render(vars);
}

TemplateError error_of(const std::string& src, RenderOptions opt = {}) {
  try {
    render(src, nlohmann::ordered_json::object(), opt);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no error from " << src;
  return TemplateError("none", "none");
}

TEST(ChatJinja, RendersBasics) {
  EXPECT_EQ(render("{{ a }}-{{ b|upper }}", {{"a", 1}, {"b", "x"}}), "1-X");
  EXPECT_EQ(render("{% for m in ms %}{{ m.role }}{% endfor %}", {{"ms", {{{"role", "u"}}, {{"role", "a"}}}}}), "ua");
}

TEST(ChatJinja, SyntaxErrorsNameLineAndColumn) {
  TemplateError e = error_of("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}");
  EXPECT_EQ(e.kind(), "TemplateSyntaxError");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 10);
  EXPECT_NE(e.describe().find("line 3, column 10"), std::string::npos) << e.describe();

  e = error_of("{% for x in y %}\n{% endif %}");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("endfor"), std::string::npos) << e.what();

  e = error_of("ab\n  {{ 'unclosed }}");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 6);

  e = error_of("{% if true %}open");
  EXPECT_NE(std::string(e.what()).find("Unexpected end of template"), std::string::npos);
}

TEST(ChatJinja, RuntimeErrorsCarryTheLine) {
  TemplateError e = error_of("a\nb\n{{ x.y }}");
  EXPECT_EQ(e.kind(), "UndefinedError");
  EXPECT_EQ(e.line(), 3);
  EXPECT_STREQ(e.what(), "'x' is undefined");
}

TEST(ChatJinja, RaiseExceptionKeepsTheMessage) {
  TemplateError e = error_of("{{ raise_exception('Roles must alternate!') }}");
  EXPECT_EQ(e.kind(), "TemplateError");
  EXPECT_STREQ(e.what(), "Roles must alternate!");
}

TEST(ChatJinja, StepLimitStopsEndlessWork) {
  RenderOptions opt;
  opt.limits.max_steps = 200000;
  const auto t0 = std::chrono::steady_clock::now();
  TemplateError e = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", opt);
  EXPECT_EQ(e.kind(), "LimitError");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(ChatJinja, OutputLimit) {
  RenderOptions opt;
  opt.limits.max_output_bytes = 1000;
  EXPECT_EQ(render("{% for i in range(10) %}x{% endfor %}", {}, opt), "xxxxxxxxxx");
  TemplateError e = error_of("{% for i in range(2000) %}x{% endfor %}", opt);
  EXPECT_EQ(e.kind(), "LimitError");
  EXPECT_NE(std::string(e.what()).find("output limit"), std::string::npos) << e.what();
}

TEST(ChatJinja, StringAndListGrowthLimits) {
  RenderOptions opt;
  opt.limits.max_output_bytes = 1 << 16;
  EXPECT_EQ(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                     opt)
                .kind(),
            "LimitError");
  EXPECT_EQ(error_of("{{ 'x' * 100000000 }}", opt).kind(), "LimitError");
  opt.limits.max_container_items = 1000;
  EXPECT_EQ(error_of("{{ [1] * 5000 }}", opt).kind(), "LimitError");
}

TEST(ChatJinja, RecursionLimit) {
  TemplateError e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(e.kind(), "LimitError");
  EXPECT_NE(std::string(e.what()).find("recursion"), std::string::npos) << e.what();
}

TEST(ChatJinja, NestingLimitInParser) {
  std::string deep(5000, '(');
  EXPECT_EQ(error_of("{{ " + deep + "1" + std::string(5000, ')') + " }}").kind(), "TemplateSyntaxError");
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  EXPECT_EQ(error_of(ifs).kind(), "TemplateSyntaxError");
}

TEST(ChatJinja, SliceInsideTupleIndexIsAnErrorNotACrash) {  // found by fuzz_jinja
  EXPECT_EQ(error_of("{{ 'hello'[::, 1] }}").kind(), "TemplateSyntaxError");
  EXPECT_EQ(error_of("{{ [1, 2][0, 1:] }}").kind(), "TemplateSyntaxError");
  EXPECT_EQ(render("{{ {(1, 2): 'p'}[1, 2] }}"), "p");
}

TEST(ChatJinja, ReferenceCyclesDoNotLeak) {  // found by fuzz_jinja (LeakSanitizer): released at the end
  EXPECT_EQ(render("{% macro m() %}x{% endmacro %}{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.m = m %}"
                   "{% for i in [ns] %}{% set ns.loop = loop %}{% set ns.f = loop.changed %}{% endfor %}{{ m() }}"),
            "x");
  RenderOptions opt;
  opt.immutable_sandbox = false;
  EXPECT_EQ(
      render("{% set l = [] %}{% set _ = l.append(l) %}{% set d = {} %}{% set _ = d.update({'d': d}) %}{{ l|length }}",
             {}, opt),
      "1");
}

TEST(ChatJinja, ImmutableSandboxBlocksMutationButMutableModeAllowsIt) {
  EXPECT_EQ(error_of("{% set l = [] %}{{ l.append(1) }}").kind(), "SecurityError");
  RenderOptions opt;
  opt.immutable_sandbox = false;
  EXPECT_EQ(render("{% set l = [1] %}{% set _ = l.append(2) %}{% set d = {} %}{% set _ = d.update({'k': 3}) %}{{ l "
                   "}}{{ d }}{{ l.pop() }}",
                   {}, opt),
            "[1, 2]{'k': 3}2");
}

TEST(ChatJinja, InjectedClock) {
  RenderOptions opt;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 5;
  tm.tm_wday = 0;
  opt.now = tm;
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %d %b %Y') }}", {}, opt), "2025-01-05 05 Jan 2025");
  // without an injected clock it is today
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

TEST(ChatJinja, IntegersAre64Bit) {
  EXPECT_EQ(render("{{ 9223372036854775807 }}"), "9223372036854775807");
  EXPECT_EQ(error_of("{{ 9223372036854775807 + 1 }}").kind(), "OverflowError");
  EXPECT_EQ(error_of("{{ 2 ** 64 }}").kind(), "OverflowError");
  EXPECT_EQ(error_of("{{ 99999999999999999999 }}").kind(), "TemplateSyntaxError");
}

TEST(ChatJinja, ValuesFromJsonKeepKeyOrder) {
  const auto vars = nlohmann::ordered_json::parse(R"({"d": {"z": 1, "a": [1.0, 2, "x", null, true]}})");
  EXPECT_EQ(render("{{ d }}|{{ d|tojson }}", vars),
            R"({'z': 1, 'a': [1.0, 2, 'x', None, True]}|{"z": 1, "a": [1.0, 2, "x", null, true]})");
}

TEST(ChatJinja, TojsonEnsureAsciiUsesSurrogatePairs) {
  EXPECT_EQ(render("{{ '😀é'|tojson(ensure_ascii=true) }}"), R"("\ud83d\ude00\u00e9")");
}

TEST(ChatJinja, InvalidUtf8DoesNotCrash) {
  const std::string bad =
      "a\xff\xfe"
      "b\xc3";
  Template t("{{ s|length }} {{ s|reverse|reverse == s }}");
  Value vars = Value::dict();
  vars.as_dict().set(Value("s"), Value(bad));
  EXPECT_EQ(t.render_values(vars), "5 True");
}

TEST(ChatJinja, RenderChatPassesTransformersVariables) {
  Template t(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token }}{{ eos_token }} {{ "
      "messages|length }} {{ extra_var }}");
  ChatInput in;
  in.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra["extra_var"] = "x";
  in.extra["messages"] = "ignored";
  EXPECT_EQ(render_chat(t, in), "True True True <s></s> 1 x");
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(render_chat(t, in).substr(0, 5), "False");
}

TEST(ChatJinja, RenderChatRejectsBadInput) {
  Template t("x");
  ChatInput in;
  in.messages = nlohmann::ordered_json::parse(R"({"role": "user"})");
  EXPECT_THROW(render_chat(t, in), InvalidArgument);
  in.messages = nlohmann::ordered_json::parse(R"(["not an object"])");
  EXPECT_THROW(render_chat(t, in), InvalidArgument);
  in.messages = nlohmann::ordered_json::array();
  in.tools = "nope";
  EXPECT_THROW(render_chat(t, in), InvalidArgument);
  EXPECT_THROW(t.render(nlohmann::ordered_json::array()), TemplateError);
}

TEST(ChatJinja, TemplateIsReusable) {
  Template t("{% set ns = namespace(n=0) %}{% for i in l %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}");
  EXPECT_EQ(t.render({{"l", {1, 2}}}), "3");
  EXPECT_EQ(t.render({{"l", {5}}}), "5");
}

}  // namespace

}  // namespace treespec::chat
