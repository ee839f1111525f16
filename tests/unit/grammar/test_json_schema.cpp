// JSON Schema -> GBNF (src/grammar/json_schema.h) on real schemas: documents valid under
// the schema match the grammar (compact and with spaces), invalid ones do not; keywords
// the converter cannot honour are errors naming the keyword and its place.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "treespec/status.h"

namespace treespec::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> from_schema(const char* schema) {
  const std::string gbnf = json_schema_to_gbnf(ojson::parse(schema));
  try {
    return Grammar::parse(gbnf);
  } catch (const InvalidArgument& e) {
    ADD_FAILURE() << e.what() << "\n" << gbnf;
    throw;
  }
}

// The document compact and with one space after ':' and ','.
std::vector<std::string> spellings(const std::string& doc) {
  const std::string compact = ojson::parse(doc).dump();
  std::string spaced;
  bool in_str = false;
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    spaced += c;
    if (c == '"' && (i == 0 || compact[i - 1] != '\\')) in_str = !in_str;
    if (!in_str && (c == ':' || c == ',')) spaced += ' ';
  }
  return {compact, spaced};
}

void expect_matches(const char* schema, std::vector<std::string> good, std::vector<std::string> bad) {
  auto g = from_schema(schema);
  for (const std::string& d : good) {
    for (const std::string& s : spellings(d))
      EXPECT_TRUE(matches(g, s)) << "should match: " << s << "\n" << json_schema_to_gbnf(ojson::parse(schema));
  }
  for (const std::string& d : bad) EXPECT_FALSE(matches(g, d)) << "should not match: " << d;
}

std::string error_of(const char* schema) {
  try {
    json_schema_to_gbnf(ojson::parse(schema));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JsonSchema, NestedObjectWithRequiredOptionalEnumIntegerRangeAndArray) {
  const char* person = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 40},
      "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "role": {"enum": ["admin", "user", null]},
      "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                  "required": ["city"], "additionalProperties": false},
      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    },
    "required": ["name", "age"],
    "additionalProperties": false
  })";
  expect_matches(person,
                 {R"({"name":"Ann","age":30})", R"({"name":"Bo","age":0,"role":"admin"})",
                  R"({"name":"C","age":130,"role":null,"tags":[]})",
                  R"({"name":"D","age":7,"address":{"city":"Rome","zip":"00100"},"tags":["a","b","c"]})",
                  R"({"name":"E \"quoted\" \\ back\nline \u00e9","age":1})"},
                 {R"({"age":30,"name":"Ann"})",   // order: required first, as declared
                  R"({"name":"Ann"})",            // missing required
                  R"({"name":"Ann","age":131})",  // out of range
                  R"({"name":"Ann","age":-1})", R"({"name":"Ann","age":030})", R"({"name":"Ann","age":3.5})",
                  R"({"name":"","age":3})",                   // minLength
                  R"({"name":"Ann","age":3,"role":"root"})",  // not in the enum
                  R"({"name":"Ann","age":3,"extra":1})",      // additionalProperties false
                  R"({"name":"Ann","age":3,"address":{"zip":"12345"}})",
                  R"({"name":"Ann","age":3,"address":{"city":"R","zip":"1234"}})",
                  R"({"name":"Ann","age":3,"tags":["a","b","c","d"]})", R"({"name":"Ann","age":3)",
                  R"({"name":"Ann","age":3}})", R"({"name":"A\qn","age":3})",
                  R"({"name":"Ann","age":3} )"
                  "\n\n"});
}

TEST(JsonSchema, OpenAiStructuredOutputExamples) {
  // The math-reasoning and calendar-event shapes from OpenAI's structured-output guide.
  const char* math = R"({"type":"object","properties":{
      "steps":{"type":"array","items":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},
               "required":["explanation","output"],"additionalProperties":false}},
      "final_answer":{"type":"string"}},
    "required":["steps","final_answer"],"additionalProperties":false})";
  expect_matches(
      math,
      {R"({"steps":[{"explanation":"8x + 7 = -23","output":"8x = -30"},{"explanation":"divide","output":"x = -15/4"}],"final_answer":"x = -3.75"})",
       R"({"steps":[],"final_answer":""})"},
      {R"({"steps":[{"explanation":"a"}],"final_answer":"x"})", R"({"steps":{},"final_answer":"x"})",
       R"({"final_answer":"x","steps":[]})"});
  const char* event =
      R"({"type":"object","properties":{"name":{"type":"string"},"date":{"type":"string","format":"date"},
      "participants":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["name","date","participants"],
      "additionalProperties":false})";
  expect_matches(event, {R"({"name":"science fair","date":"2024-02-29","participants":["Alice","Bob"]})"},
                 {R"({"name":"x","date":"2023-02-29","participants":["A"]})",
                  R"({"name":"x","date":"2024-13-01","participants":["A"]})",
                  R"({"name":"x","date":"2024-01-01","participants":[]})"});
}

TEST(JsonSchema, RefsDefsRecursionAnyOfAndNumbers) {
  const char* tree = R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"number"},
      "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"],"additionalProperties":false}},
    "$ref":"#/$defs/node"})";
  expect_matches(
      tree, {R"({"value":1})", R"({"value":-2.5e3,"children":[{"value":0},{"value":1.25,"children":[{"value":3}]}]})"},
      {R"({"value":"1"})", R"({"value":1,"children":[{"children":[]}]})", R"({"value":01})", R"({"value":1.})"});
  const char* any =
      R"({"anyOf":[{"type":"string","format":"uuid"},{"type":"integer"},{"type":"array","prefixItems":[{"type":"boolean"},{"const":"x"}],"items":false}]})";
  expect_matches(any, {R"("123e4567-e89b-12d3-a456-426614174000")", "42", "-7", R"([true,"x"])", "[false]", "[]"},
                 {R"("not-a-uuid")", "4.2", R"([true,"y"])", R"([true,"x",1])", "null"});
  const char* extra =
      R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"boolean"}})";
  expect_matches(extra, {R"({"id":1})", R"({"id":1,"ok":true,"i":false})", R"({"id":1,"idx":true})"},
                 {R"({"id":1,"ok":1})", R"({"id":1,"id":true})"});
  expect_matches("{}", {"null", R"({"a":[1,{"b":"c"}]})", R"("s")", "-0.5"}, {"nul", "[1,]"});
}

TEST(JsonSchema, ObjectGrammarAndErrorsNameTheKeywordAndPlace) {
  auto obj = Grammar::parse(json_object_grammar());
  EXPECT_TRUE(matches(obj, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(matches(obj, "{}"));
  EXPECT_FALSE(matches(obj, "[1]"));
  EXPECT_FALSE(matches(obj, R"("x")"));
  EXPECT_NE(error_of(R"({"type":"bogus"})").find("'type' \"bogus\""), std::string::npos);
  EXPECT_NE(error_of(R"({"properties":{"a":{"type":"number","minimum":0.5}}})").find("/properties/a"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"properties":{"a":{"minProperties":1}}})").find("unsupported keyword 'minProperties'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","uniqueItems":true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","format":"email"})").find("'format' \"email\""), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","minItems":3,"maxItems":2})").find("'minItems' 3 is above 'maxItems' 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","minimum":5,"maximum":4})").find("no integer"), std::string::npos);
  EXPECT_NE(error_of("false").find("no value is valid"), std::string::npos);
}

}  // namespace
}  // namespace treespec::grammar
