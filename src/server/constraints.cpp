// Constrained output fields of a generation request (docs/server.md, docs/grammar.md):
// llama-server's `grammar` (GBNF) and `json_schema`, OpenAI's `response_format`
// (json_object, json_schema). Read from the body as sent (ordered_json), so that a
// schema's properties keep the order the client wrote them in.
#include <fmt/format.h>

#include "grammar/json_schema.h"
#include "server/api.h"
#include "treespec/status.h"

namespace treespec::server {

namespace {

using ojson = nlohmann::ordered_json;

const ojson* constraint_field(const ojson& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::shared_ptr<const grammar::Grammar> compile_for(const std::string& gbnf, const char* param) {
  try {
    return grammar::Grammar::parse(gbnf);
  } catch (const Error& e) {
    throw invalid_request(fmt::format("'{}': {}", param, e.what()), param);
  }
}

std::shared_ptr<const grammar::Grammar> compile_schema(const ojson& schema, const char* param) {
  if (!schema.is_object() && !schema.is_boolean()) {
    throw invalid_request(fmt::format("'{}' must be a JSON Schema object, got {}", param, schema.type_name()), param);
  }
  std::string gbnf;
  try {
    gbnf = grammar::json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    throw invalid_request(fmt::format("'{}': {}", param, e.what()), param);
  }
  return compile_for(gbnf, param);
}

// response_format: {"type": "text"} | {"type": "json_object"[, "schema": S]} |
// {"type": "json_schema", "json_schema": {"name": N, "schema": S, "strict": B}}.
std::shared_ptr<const grammar::Grammar> response_format_grammar(const ojson& rf) {
  if (!rf.is_object())
    throw invalid_request(fmt::format("'response_format' must be an object, got {}", rf.type_name()),
                          "response_format");
  const ojson* type = constraint_field(rf, "type");
  if (type && !type->is_string()) throw invalid_request("'response_format.type' must be a string", "response_format");
  const std::string t = type ? type->get<std::string>() : "text";
  if (t == "text") return nullptr;
  if (t == "json_object") {
    if (const ojson* s = constraint_field(rf, "schema")) return compile_schema(*s, "response_format");
    return compile_for(grammar::json_object_grammar(), "response_format");
  }
  if (t == "json_schema") {
    const ojson* js = constraint_field(rf, "json_schema");
    if (!js || !js->is_object()) {
      throw invalid_request("'response_format.json_schema' must be an object with the 'schema'", "response_format");
    }
    const ojson* s = constraint_field(*js, "schema");
    if (!s) throw invalid_request("'response_format.json_schema.schema' is required", "response_format");
    return compile_schema(*s, "response_format");
  }
  throw invalid_request(
      fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"", t),
      "response_format");
}

}  // namespace

std::shared_ptr<const grammar::Grammar> parse_request_grammar(const nlohmann::ordered_json& body) {
  std::shared_ptr<const grammar::Grammar> g;
  const char* from = nullptr;
  auto take = [&](std::shared_ptr<const grammar::Grammar> next, const char* name) {
    if (!next) return;
    if (from) throw invalid_request(fmt::format("give one of '{}' and '{}', not both", from, name), name);
    g = std::move(next);
    from = name;
  };
  if (const ojson* v = constraint_field(body, "grammar")) {
    if (!v->is_string())
      throw invalid_request(fmt::format("'grammar' must be a GBNF string, got {}", v->type_name()), "grammar");
    if (!v->get<std::string>().empty()) take(compile_for(v->get<std::string>(), "grammar"), "grammar");
  }
  if (const ojson* v = constraint_field(body, "json_schema"); v && !(v->is_object() && v->empty())) {
    take(compile_schema(*v, "json_schema"), "json_schema");
  }
  if (const ojson* v = constraint_field(body, "response_format")) take(response_format_grammar(*v), "response_format");
  return g;
}

}  // namespace treespec::server
