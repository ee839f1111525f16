// allOf: the parts of a conjunction merged into one schema, keyword by keyword, with
// JSON Schema's meaning kept: types intersect, enums intersect, bounds tighten, required
// lists join, a property declared in one part is also constrained by the other parts'
// additionalProperties, prefixItems positions also obey the other parts' items. What
// has no merge (two different patterns or formats, two prefixItems lists) is refused.
#include <fmt/format.h>

#include <algorithm>

#include "grammar/json_schema_internal.h"

namespace treespec::grammar::js_detail {

bool js_is_annotation(const std::string& key) {
  static const char* const names[] = {"$schema",     "$id",     "$anchor",    "$comment",   "title",
                                      "description", "default", "examples",   "deprecated", "readOnly",
                                      "writeOnly",   "$defs",   "definitions"};
  return std::any_of(std::begin(names), std::end(names), [&key](const char* n) { return key == n; });
}

namespace {

struct JsPart {
  Json schema;
  std::string path;
};

constexpr size_t kJsMaxInline = 32;    // nested $ref / allOf inlined while merging
constexpr size_t kJsMaxProduct = 256;  // alternatives from several anyOf parts

// Splits a schema into flat parts (no $ref, no allOf, no annotations).
void js_flatten(const Json& s, const std::string& path, const JsResolve& resolve, std::vector<std::string>& refs,
                std::vector<JsPart>& out) {
  if (s.is_boolean()) {
    if (!s.get<bool>()) js_fail(path, "schema false in 'allOf': no value is valid");
    return;
  }
  if (!s.is_object()) js_fail(path, "a schema must be an object or a boolean");
  if (refs.size() > kJsMaxInline) js_fail(path, "'allOf' and '$ref' nested too deeply");
  Json rest = Json::object();
  for (const auto& [k, v] : s.items()) {
    if (!js_is_annotation(k) && k != "$ref" && k != "allOf") rest[k] = v;
  }
  if (s.contains("$ref")) {
    const Json& ref = s["$ref"];
    if (!ref.is_string()) js_fail(js_path(path, "$ref"), "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (std::find(refs.begin(), refs.end(), r) != refs.end())
      js_fail(path, fmt::format("'$ref' \"{}\" refers to itself through 'allOf'", r));
    refs.push_back(r);
    js_flatten(resolve(r, path), r.substr(1), resolve, refs, out);
    refs.pop_back();
  }
  if (s.contains("allOf")) {
    const Json& all = s["allOf"];
    if (!all.is_array() || all.empty()) js_fail(js_path(path, "allOf"), "'allOf' must be a non-empty array of schemas");
    refs.push_back("");  // depth only
    for (size_t i = 0; i < all.size(); ++i)
      js_flatten(all[i], js_path(js_path(path, "allOf"), std::to_string(i)), resolve, refs, out);
    refs.pop_back();
  }
  if (!rest.empty()) out.push_back({std::move(rest), path});
}

Json js_type_set(const Json& t, const std::string& path) {
  Json out = Json::array();
  if (t.is_string()) out.push_back(t);
  if (t.is_array()) out = t;
  if (out.empty()) js_fail(js_path(path, "type"), "'type' must be a type name or a non-empty array of them");
  return out;
}

Json js_intersect_types(const Json& a, const Json& b, const std::string& path) {
  Json out = Json::array();
  auto add = [&out](const Json& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const Json& x : a) {
    for (const Json& y : b) {
      if (x == y) add(x);
      if ((x == "integer" && y == "number") || (x == "number" && y == "integer")) add(Json("integer"));
    }
  }
  if (out.empty()) js_fail(path, "the 'type's in 'allOf' have no type in common");
  return out;
}

Json js_all_of(std::vector<Json> schemas) {
  if (schemas.size() == 1) return schemas[0];
  Json all = Json::array();
  for (Json& s : schemas) all.push_back(std::move(s));
  return Json{{"allOf", std::move(all)}};
}

bool js_tighter(const std::string& key, const Json& candidate, const Json& current) {
  const bool lower_bound = key == "minimum" || key == "exclusiveMinimum" || key == "minItems" || key == "minLength";
  return lower_bound ? candidate.get<double>() > current.get<double>()
                     : candidate.get<double>() < current.get<double>();
}

// properties / additionalProperties of all parts (see the file comment).
void js_merge_objects(const std::vector<JsPart>& parts, Json& out) {
  std::vector<std::string> names;
  bool any_properties = false;
  for (const JsPart& p : parts) {
    if (!p.schema.contains("properties")) continue;
    if (!p.schema["properties"].is_object()) js_fail(js_path(p.path, "properties"), "'properties' must be an object");
    any_properties = true;
    for (const auto& [k, v] : p.schema["properties"].items()) {
      if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
    }
  }
  const Json required = out.contains("required") ? out["required"] : Json::array();
  Json props = Json::object();
  for (const std::string& name : names) {
    std::vector<Json> constraints;
    bool forbidden = false;
    for (const JsPart& p : parts) {
      const Json& s = p.schema;
      if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(name)) {
        constraints.push_back(s["properties"][name]);
      } else if (s.contains("additionalProperties")) {
        const Json& extra = s["additionalProperties"];
        if (extra == false) forbidden = true;
        constraints.push_back(extra);
      }
    }
    if (!forbidden) {
      props[name] = js_all_of(constraints);
    } else if (std::find(required.begin(), required.end(), name) != required.end()) {
      js_fail(parts[0].path,
              fmt::format("property '{}' is required but another 'allOf' part has additionalProperties false", name));
    }
  }
  if (any_properties) out["properties"] = props;
  std::vector<Json> extras;
  for (const JsPart& p : parts) {
    if (!p.schema.contains("additionalProperties")) continue;
    const Json& extra = p.schema["additionalProperties"];
    if (extra == false) {
      out["additionalProperties"] = false;
      return;
    }
    extras.push_back(extra);
  }
  if (!extras.empty()) out["additionalProperties"] = js_all_of(extras);
}

// items / prefixItems (draft-4 array `items` and `additionalItems` normalised first).
void js_merge_arrays(const std::vector<JsPart>& parts, Json& out) {
  const JsPart* prefix_part = nullptr;
  std::vector<Json> items_of_others;
  for (const JsPart& p : parts) {
    if (p.schema.contains("prefixItems")) {
      if (prefix_part) js_fail(p.path, "two 'prefixItems' lists in 'allOf' are not supported");
      prefix_part = &p;
    } else if (p.schema.contains("items")) {
      items_of_others.push_back(p.schema["items"]);
    }
  }
  if (!prefix_part) {
    if (!items_of_others.empty()) out["items"] = js_all_of(items_of_others);
    return;
  }
  const Json& prefix = prefix_part->schema["prefixItems"];
  if (!prefix.is_array())
    js_fail(js_path(prefix_part->path, "prefixItems"), "'prefixItems' must be an array of schemas");
  Json merged = Json::array();
  for (const Json& item : prefix) {
    std::vector<Json> c{item};
    c.insert(c.end(), items_of_others.begin(), items_of_others.end());
    merged.push_back(js_all_of(c));
  }
  out["prefixItems"] = merged;
  std::vector<Json> rest = items_of_others;
  // Without its own `items` the prefix part allows any further item: the others decide.
  if (prefix_part->schema.contains("items")) rest.push_back(prefix_part->schema["items"]);
  if (!rest.empty()) out["items"] = js_all_of(rest);
}

void js_merge_alternatives(const std::vector<Json>& lists, const std::string& path, Json& out) {
  if (lists.empty()) return;
  if (lists.size() == 1) {
    out["anyOf"] = lists[0];
    return;
  }
  std::vector<std::vector<Json>> combos{{}};
  for (const Json& list : lists) {
    std::vector<std::vector<Json>> next;
    for (const auto& c : combos) {
      for (const Json& alt : list) {
        next.push_back(c);
        next.back().push_back(alt);
      }
    }
    if (next.size() > kJsMaxProduct)
      js_fail(path, fmt::format("several 'anyOf'/'oneOf' in 'allOf' make more than {} alternatives", kJsMaxProduct));
    combos = std::move(next);
  }
  Json any = Json::array();
  for (auto& c : combos) any.push_back(js_all_of(std::move(c)));
  out["anyOf"] = any;
}

void js_merge_key(Json& out, const std::string& k, const Json& v, const std::string& path) {
  static const char* const bounds[] = {"minimum",  "maximum",  "exclusiveMinimum", "exclusiveMaximum",
                                       "minItems", "maxItems", "minLength",        "maxLength"};
  const std::string kpath = js_path(path, k);
  if (k == "type") {
    const Json t = js_type_set(v, path);
    out["type"] = out.contains("type") ? js_intersect_types(out["type"], t, kpath) : t;
  } else if (k == "enum" || k == "const") {
    if (k == "enum" && !v.is_array()) js_fail(kpath, "'enum' must be an array");
    const Json values = k == "const" ? Json::array({v}) : v;
    if (!out.contains("enum")) {
      out["enum"] = values;
      return;
    }
    Json kept = Json::array();
    for (const Json& x : out["enum"]) {
      if (std::find(values.begin(), values.end(), x) != values.end()) kept.push_back(x);
    }
    if (kept.empty()) js_fail(kpath, "no value is in every 'enum'/'const' of the 'allOf'");
    out["enum"] = kept;
  } else if (k == "required") {
    if (!v.is_array()) js_fail(kpath, "'required' must be an array of strings");
    Json& req = out["required"];
    if (req.is_null()) req = Json::array();
    for (const Json& name : v) {
      if (std::find(req.begin(), req.end(), name) == req.end()) req.push_back(name);
    }
  } else if (std::find(std::begin(bounds), std::end(bounds), k) != std::end(bounds)) {
    if (!v.is_number()) js_fail(kpath, fmt::format("'{}' must be a number", k));
    if (!out.contains(k) || js_tighter(k, v, out[k])) out[k] = v;
  } else if (k == "pattern" || k == "format") {
    if (out.contains(k) && out[k] != v)
      js_fail(kpath, fmt::format("two different '{}'s in 'allOf' are not supported", k));
    out[k] = v;
  } else if (k == "uniqueItems") {
    if (!out.contains(k) || v == true) out[k] = v;
  } else if (!out.contains(k)) {
    out[k] = v;  // anything else: the converter checks it (and refuses what it does not know)
  } else if (out[k] != v) {
    js_fail(kpath, fmt::format("'{}' in several 'allOf' parts is not supported", k));
  }
}

}  // namespace

void js_normalize(Json& s) {
  if (!s.is_object()) return;
  if (s.contains("items") && s["items"].is_array()) {
    s["prefixItems"] = s["items"];
    s.erase("items");
    if (s.contains("additionalItems")) s["items"] = s["additionalItems"];
  }
  s.erase("additionalItems");  // without an array `items` it has no effect
  for (const char* bound : {"Minimum", "Maximum"}) {
    const std::string excl = std::string("exclusive") + bound;
    std::string incl = bound;
    incl[0] = static_cast<char>(incl[0] - 'A' + 'a');
    if (s.contains(excl) && s[excl].is_boolean()) {  // draft 4: a flag on minimum / maximum
      if (s[excl].get<bool>() && s.contains(incl)) {
        s[excl] = s[incl];
        s.erase(incl);
      } else {
        s.erase(excl);
      }
    }
  }
}

Json js_merge_all(const std::vector<Json>& parts_in, const std::string& path, const JsResolve& resolve) {
  std::vector<JsPart> parts;
  std::vector<std::string> refs;
  for (const Json& p : parts_in) js_flatten(p, path, resolve, refs, parts);
  Json out = Json::object();
  std::vector<Json> alternatives;
  for (JsPart& p : parts) {
    js_normalize(p.schema);
    for (const auto& [k, v] : p.schema.items()) {
      if (k == "properties" || k == "additionalProperties" || k == "items" || k == "prefixItems") continue;
      if (k == "anyOf" || k == "oneOf") {
        if (!v.is_array() || v.empty())
          js_fail(js_path(p.path, k), fmt::format("'{}' must be a non-empty array of schemas", k));
        alternatives.push_back(v);
        continue;
      }
      js_merge_key(out, k, v, p.path);
    }
  }
  js_merge_objects(parts, out);
  js_merge_arrays(parts, out);
  js_merge_alternatives(alternatives, path, out);
  return out;
}

}  // namespace treespec::grammar::js_detail
