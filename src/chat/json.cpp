#include "chat/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/unicode.h"

namespace treespec::chat {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::dict();
      for (const auto& [k, v] : j.items()) d.as_dict().set(Value(k), from_json(v));
      return d;
    }
    default: type_error("unsupported JSON value (binary)");
  }
}

namespace {

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else if (ensure_ascii && c >= 0x7F) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                               static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          utf8_append(out, c);
        }
    }
  }
  out += '"';
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return format_float(d);
}

std::string key_string(const Value& k) {
  if (k.is_string()) return k.as_string();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return float_json(k.as_float());
  if (k.is_none()) return "null";
  type_error(fmt::format("keys must be str, int, float, bool or None, not {}", type_name(k)));
}

struct Dumper {
  const DumpOptions& opt;
  std::string out;
  std::string item_sep, key_sep;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *opt.indent;
  }

  void dump(const Value& v, int level) {
    if (level > 500) value_error("Circular reference detected (or nesting too deep)");
    if (v.is_none()) {
      out += "null";
    } else if (v.is_bool()) {
      out += v.as_bool() ? "true" : "false";
    } else if (v.is_int()) {
      out += std::to_string(v.as_int());
    } else if (v.is_float()) {
      out += float_json(v.as_float());
    } else if (v.is_string()) {
      dump_string(out, v.as_string(), opt.ensure_ascii);
    } else if (v.is_list()) {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (opt.indent) newline(level + 1);
        dump(items[i], level + 1);
      }
      if (opt.indent) newline(level);
      out += ']';
    } else if (v.is_dict()) {
      std::vector<std::pair<Value, Value>> items = v.as_dict().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (opt.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return compare(a.first, b.first) < 0; });
      }
      out += '{';
      bool first = true;
      for (const auto& [k, val] : items) {
        if (!first) out += item_sep;
        first = false;
        if (opt.indent) newline(level + 1);
        dump_string(out, key_string(k), opt.ensure_ascii);
        out += key_sep;
        dump(val, level + 1);
      }
      if (opt.indent) newline(level);
      out += '}';
    } else {
      type_error(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
    }
  }
};

}  // namespace

std::string dump_json(const Value& v, const DumpOptions& opt) {
  Dumper d{opt, {}, {}, {}};
  d.item_sep = opt.item_separator.value_or(opt.indent ? "," : ", ");
  d.key_sep = opt.key_separator.value_or(": ");
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace treespec::chat
