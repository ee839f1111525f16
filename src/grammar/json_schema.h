// JSON Schema -> GBNF (docs/grammar.md, "JSON Schema"): the grammar whose sentences are
// JSON texts valid under the schema, in llama.cpp's compact style: no whitespace before
// the root value, then optional bounded whitespace (the `space` rule) after every token,
// so a model constrained by it cannot spin in whitespace forever.
//
// Exactness: every sentence of the grammar is valid under the schema. Where the grammar
// accepts only part of the valid texts, the part is documented (one spelling per string
// character inside literals and patterns, digit counts bounded, declared property order,
// no extra properties when `properties` is given and `additionalProperties` is absent,
// as llama.cpp does). A keyword the converter cannot honour throws InvalidArgument
// "json_schema: <JSON pointer>: <what>" instead of being dropped. One documented
// exception: `oneOf` is treated as `anyOf`.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace treespec::grammar {

// Properties come out in declared order with ordered_json; nlohmann::json sorts object
// keys when it parses, so with it the order is alphabetical.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
std::string json_schema_to_gbnf(const nlohmann::json& schema);

// Any JSON object (response_format {type: "json_object"}).
std::string json_object_grammar();
// Any JSON value (the schema {} or true).
std::string json_value_grammar();

// `text` as a GBNF string literal, quotes included: "a\"b" -> "\"a\\\"b\"" in GBNF.
std::string escape_gbnf_literal(std::string_view text);

}  // namespace treespec::grammar
