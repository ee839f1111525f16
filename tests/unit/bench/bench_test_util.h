// Helpers for the bench tests: an independent check of the report JSON against the
// schema documented in docs/benchmarks.md, and a small XML parser for the SVG plots
// (well-formedness: one root, matched tags, quoted attributes, known entities).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace treespec::test {

// Empty when `report` follows the documented schema (schema_version 1); otherwise one
// message per violation ("cells[3].speedup.median: expected number").
std::vector<std::string> check_bench_schema(const nlohmann::json& report);

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<XmlNode> children;
  std::string text;  // concatenated character data directly inside this element

  // All descendants (and self) named `name`.
  void find_all(const std::string& tag, std::vector<const XmlNode*>& out) const;
  std::vector<const XmlNode*> find_all(const std::string& tag) const;
  std::string attr(const std::string& key) const {
    const auto it = attrs.find(key);
    return it == attrs.end() ? std::string() : it->second;
  }
};

// Parses a whole XML document; throws std::runtime_error with the byte offset on any
// well-formedness error.
XmlNode parse_xml(const std::string& doc);

}  // namespace treespec::test
