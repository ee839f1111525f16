// Runs gen_expectations.py (Python's Jinja2 configured as transformers configures it)
// once per test binary and hands the cases to the conformance tests.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace treespec::test {

struct Expectations {
  bool available = false;
  std::string why_not;  // when not available
  nlohmann::ordered_json doc;
};

// `group`: snippets, ours or shared (the script renders only that group);
// `shared_templates`: a directory of real *.jinja templates ("" for none).
const Expectations& jinja2_expectations(const std::string& group, const std::string& shared_templates = "");

}  // namespace treespec::test
