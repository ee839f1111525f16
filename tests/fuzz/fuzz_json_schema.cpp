// JSON Schema -> GBNF: any bytes as a schema (and, after a NUL byte, as the choices of a
// random walk through the resulting grammar). The converter returns a grammar or throws
// InvalidArgument, nothing else, and gives the same text twice; the grammar parses
// (only the parser's size limits may refuse it); every sentence the walk completes is a
// JSON text and honours the root's `type`, `enum` and `const`.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "treespec/status.h"

namespace {

using treespec::InvalidArgument;
using ojson = nlohmann::ordered_json;
namespace g = treespec::grammar;

void check(bool ok) {
  if (!ok) std::abort();
}

// Characters the walk may write: printable ASCII, the JSON whitespace, and one 2-, 3- and
// 4-byte UTF-8 character.
const std::vector<std::string>& walk_alphabet() {
  static const std::vector<std::string> chars = [] {
    std::vector<std::string> v;
    for (int c = 0x20; c < 0x7f; ++c) v.emplace_back(1, static_cast<char>(c));
    for (const char* s : {"\n", "\t", "\r", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}) v.emplace_back(s);
    return v;
  }();
  return chars;
}

// A sentence of the grammar chosen by `choices`, or "" with *done = false when the walk
// runs out of choices or characters before the grammar can end. Each choice picks a
// character; when the grammar refuses it, the next characters of the alphabet are tried
// in turn (cheaper than listing every allowed character at every step).
std::string walk(const std::shared_ptr<const g::Grammar>& gr, const std::string& choices, bool* done) {
  const std::vector<std::string>& alphabet = walk_alphabet();
  g::State s = g::State::initial(gr);
  std::string out;
  *done = false;
  for (size_t i = 0; i < choices.size() && out.size() < 256; ++i) {
    const auto c = static_cast<uint8_t>(choices[i]);
    if (s.can_end() && (c < 32 || s.must_end())) {
      *done = true;
      return out;
    }
    bool moved = false;
    for (size_t k = 0; k < alphabet.size() && !moved; ++k) {
      const std::string& ch = alphabet[(c + k) % alphabet.size()];
      g::State n = s.advance(ch);
      if (n.dead()) continue;
      out += ch;
      s = std::move(n);
      moved = true;
    }
    if (!moved) break;
  }
  *done = s.can_end();
  return out;
}

bool has_type(const ojson& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  // "integer": JSON Schema counts 1.0 as an integer; the grammar writes integers without
  // a fraction or exponent, so nlohmann parses them as integers.
  if (t == "integer") return v.is_number_integer();
  return true;
}

// The root keywords every accepted sentence must honour.
void check_root(const ojson& schema, const ojson& value) {
  if (!schema.is_object()) return;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) check(has_type(value, t->get<std::string>()));
    if (t->is_array()) {
      bool any = false;
      for (const auto& e : *t) any = any || (e.is_string() && has_type(value, e.get<std::string>()));
      check(any);
    }
  }
  if (auto c = schema.find("const"); c != schema.end()) check(value == *c);
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    bool any = false;
    for (const auto& x : *e) any = any || value == x;
    check(any);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  const std::string choices = nul == std::string::npos ? std::string() : input.substr(nul + 1, 600);
  ojson schema;
  try {
    schema = ojson::parse(source);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  std::string gbnf;
  try {
    gbnf = g::json_schema_to_gbnf(schema);
  } catch (const InvalidArgument&) {
    return 0;
  }
  check(g::json_schema_to_gbnf(schema) == gbnf);
  // The sorted-keys overload refuses or converts too (a different property order).
  try {
    (void)g::json_schema_to_gbnf(nlohmann::json(schema));
  } catch (const InvalidArgument&) {
  }
  std::shared_ptr<const g::Grammar> gr;
  try {
    gr = g::Grammar::parse(gbnf);
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    check(what.find("more than") != std::string::npos);  // a size limit, never a syntax error
    return 0;
  }
  bool done = false;
  const std::string sentence = walk(gr, choices, &done);
  if (!done) return 0;
  check(g::matches(gr, sentence));
  ojson value;
  try {
    value = ojson::parse(sentence);
  } catch (const nlohmann::json::out_of_range&) {
    return 0;  // valid JSON whose number nlohmann cannot hold (1e400): nothing more to check
  } catch (const nlohmann::json::exception&) {
    std::abort();  // the grammar accepted a text that is not JSON
  }
  check_root(schema, value);
  return 0;
}
