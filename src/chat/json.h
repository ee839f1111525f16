// JSON in and out of the interpreter: render variables from nlohmann::ordered_json (key
// order kept, as Python's json.loads does), and Python's json.dumps for `tojson`.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "chat/value.h"

namespace treespec::chat {

Value from_json(const nlohmann::ordered_json& j);

struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

// json.dumps(v, ...); TypeError for values JSON cannot hold (Undefined, macros, ...).
std::string dump_json(const Value& v, const DumpOptions& opt);

}  // namespace treespec::chat
