// Constrained output over HTTP (docs/grammar.md): llama-server's `grammar` and
// `json_schema`, OpenAI's `response_format`; the text equals `treespec run` under the
// same grammar and is the same for every method; bad grammars and schemas are a 400
// naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/server_process.h"
#include "common/test_util.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

using namespace treespec::test;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {
const std::string kPrompt = "And it came to pass, when the king";
const std::string kRecord = R"(root ::= " {\"who\": \"" [A-Za-z ]{1,24} "\", \"n\": " [1-9] [0-9]? "}")";

// A person record: properties in the order written, an enum, a bounded integer, an
// array of strings, no other keys.
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 16},
    "tribe": {"enum": ["Judah", "Levi", "Benjamin"]},
    "age": {"type": "integer", "minimum": 1, "maximum": 999},
    "sons": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}
  },
  "required": ["name", "tribe", "age", "sons"],
  "additionalProperties": false
})";
}  // namespace

TEST(ServerGrammar, GbnfTextEqualsRunAndEveryMethodAndHolds) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookup"});
  auto c = srv.client();
  const json base = {{"prompt", kPrompt}, {"n_predict", 80}, {"temperature", 0}, {"grammar", kRecord}};
  const HttpReply r = post_json(c, "/completion", base.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string text = r.json()["content"];
  EXPECT_EQ(r.json()["stop_type"], "eos") << text;  // the grammar ends, then only EOS is allowed
  EXPECT_TRUE(treespec::grammar::matches(treespec::grammar::Grammar::parse(kRecord), text)) << text;
  const CliResult cli = run_treespec("run -m " + kKjvModel + " -p " + shell_quote(kPrompt) +
                                     " -n 80 --temp 0 --json --grammar " + shell_quote(kRecord));
  ASSERT_EQ(cli.status, 0) << cli.err;
  EXPECT_EQ(json::parse(cli.out)["text"], text);
  for (const std::string m : {"none", "lookahead", "ptd"}) {
    json b = base;
    b["spec"] = m;
    EXPECT_EQ(post_json(c, "/completion", b.dump()).json()["content"], text) << m;
  }
  // The same through OpenAI's route, streamed and not.
  json o = {{"prompt", kPrompt}, {"max_tokens", 80}, {"temperature", 0}, {"grammar", kRecord}};
  EXPECT_EQ(post_json(c, "/v1/completions", o.dump()).json()["choices"][0]["text"], text);
  o["stream"] = true;
  const HttpReply s = post_json(c, "/v1/completions", o.dump());
  ASSERT_EQ(s.status, 200);
  std::string streamed;
  for (const std::string& data : sse_events(s.body)) {
    if (data == "[DONE]") continue;
    const json ev = json::parse(data);
    if (ev.contains("choices") && !ev["choices"].empty()) streamed += ev["choices"][0].value("text", "");
  }
  EXPECT_EQ(streamed, text);
  // Without the grammar the text is different.
  json free = base;
  free.erase("grammar");
  EXPECT_NE(post_json(c, "/completion", free.dump()).json()["content"], text);
}

TEST(ServerGrammar, JsonSchemaThroughEachFieldGivesValidJsonInItsKeyOrder) {
  ServerProcess srv(kKjvModel, {"-t", "1", "--spec", "lookup"});
  auto c = srv.client();
  const ojson schema = ojson::parse(kSchema);
  auto check = [&](const std::string& text, const std::string& how) {
    ojson v;
    ASSERT_NO_THROW(v = ojson::parse(text)) << how << ": " << text;
    ASSERT_TRUE(v.is_object()) << how;
    std::vector<std::string> keys;
    for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"name", "tribe", "age", "sons"})) << how << ": " << text;
    EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 16) << text;
    const std::string tribe = v["tribe"];
    EXPECT_TRUE(tribe == "Judah" || tribe == "Levi" || tribe == "Benjamin") << text;
    EXPECT_TRUE(v["age"].is_number_integer() && v["age"] >= 1 && v["age"] <= 999) << text;
    EXPECT_TRUE(v["sons"].is_array() && v["sons"].size() <= 3) << text;
  };
  const HttpReply ra =
      post_json(c, "/completion",
                ojson{{"prompt", kPrompt}, {"temperature", 0}, {"n_predict", 200}, {"json_schema", schema}}.dump());
  ASSERT_EQ(ra.status, 200) << ra.body;
  const std::string text = ra.json()["content"];
  check(text, "json_schema");
  const ojson rf = {{"type", "json_schema"},
                    {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", schema}}}};
  const HttpReply rb =
      post_json(c, "/v1/completions",
                ojson{{"prompt", kPrompt}, {"temperature", 0}, {"max_tokens", 200}, {"response_format", rf}}.dump());
  ASSERT_EQ(rb.status, 200) << rb.body;
  EXPECT_EQ(rb.json()["choices"][0]["text"], text);
  EXPECT_EQ(rb.json()["choices"][0]["finish_reason"], "stop");
  // The same grammar as the converter gives, through `grammar`; and with sampling.
  const std::string gbnf = treespec::grammar::json_schema_to_gbnf(schema);
  EXPECT_EQ(post_json(c, "/completion",
                      json{{"prompt", kPrompt}, {"temperature", 0}, {"n_predict", 200}, {"grammar", gbnf}}.dump())
                .json()["content"],
            text);
  for (int seed = 1; seed <= 3; ++seed) {
    const HttpReply rs = post_json(
        c, "/v1/completions",
        ojson{{"prompt", kPrompt}, {"temperature", 1.0}, {"seed", seed}, {"max_tokens", 300}, {"response_format", rf}}
            .dump());
    ASSERT_EQ(rs.status, 200) << rs.body;
    if (rs.json()["choices"][0]["finish_reason"] == "stop") check(rs.json()["choices"][0]["text"], "sampled");
  }
  // json_object: any JSON object.
  const HttpReply ro = post_json(
      c, "/v1/completions",
      json{{"prompt", kPrompt}, {"temperature", 0}, {"max_tokens", 60}, {"response_format", {{"type", "json_object"}}}}
          .dump());
  ASSERT_EQ(ro.status, 200) << ro.body;
  const std::string obj = ro.json()["choices"][0]["text"];
  EXPECT_EQ(obj.substr(0, 1), "{") << obj;
  if (ro.json()["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(obj).is_object()) << obj;
  }
}

TEST(ServerGrammar, BadGrammarsAndSchemasAreA400NamingTheField) {
  ServerProcess srv(kKjvModel, {"-t", "1"});
  auto c = srv.client();
  struct Case {
    json field;
    std::string param;
    std::string says;
  };
  for (const Case& k : std::vector<Case>{
           {{{"grammar", "root ::= \"a"}}, "grammar", "line 1, column 10: unterminated literal"},
           {{{"grammar", "root ::= foo"}}, "grammar", "never defined"},
           {{{"grammar", 5}}, "grammar", "must be a GBNF string"},
           {{{"json_schema", {{"type", "bogus"}}}}, "json_schema", "bogus"},
           {{{"json_schema", "x"}}, "json_schema", "must be a JSON Schema object"},
           {{{"response_format", {{"type", "xml"}}}}, "response_format", "\"xml\""},
           {{{"response_format", {{"type", "json_schema"}}}}, "response_format", "json_schema"},
           {{{"response_format", "json"}}, "response_format", "must be an object"},
           {{{"grammar", "root ::= \"a\""}, {"json_schema", {{"type", "string"}}}}, "json_schema", "not both"},
       }) {
    for (const std::string route : {"/completion", "/v1/completions"}) {
      json body = {{"prompt", "x"}, {"max_tokens", 2}};
      body.update(k.field);
      const HttpReply r = post_json(c, route, body.dump());
      EXPECT_EQ(r.status, 400) << route << " " << body.dump();
      EXPECT_EQ(r.json()["error"]["param"], k.param) << r.body;
      EXPECT_NE(r.json()["error"]["message"].get<std::string>().find(k.says), std::string::npos) << r.body;
    }
  }
  // Neutral values are no constraint.
  const HttpReply ok = post_json(c, "/v1/completions",
                                 json{{"prompt", "x"},
                                      {"max_tokens", 2},
                                      {"grammar", ""},
                                      {"json_schema", json::object()},
                                      {"response_format", {{"type", "text"}}}}
                                     .dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
}
