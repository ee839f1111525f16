// gguf::Value: one metadata value with its exact GGUF type.
#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "gguf/gguf.h"
#include "treespec/status.h"

namespace treespec::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

namespace {
bool is_unsigned_type(ValueType t) {
  return t == ValueType::u8 || t == ValueType::u16 || t == ValueType::u32 || t == ValueType::u64;
}
bool is_signed_type(ValueType t) {
  return t == ValueType::i8 || t == ValueType::i16 || t == ValueType::i32 || t == ValueType::i64;
}
}  // namespace

Value Value::u8(uint8_t v) {
  Value r;
  r.type_ = ValueType::u8;
  r.num_.u = v;
  return r;
}
Value Value::u16(uint16_t v) {
  Value r;
  r.type_ = ValueType::u16;
  r.num_.u = v;
  return r;
}
Value Value::u32(uint32_t v) {
  Value r;
  r.type_ = ValueType::u32;
  r.num_.u = v;
  return r;
}
Value Value::u64(uint64_t v) {
  Value r;
  r.type_ = ValueType::u64;
  r.num_.u = v;
  return r;
}
Value Value::i8(int8_t v) {
  Value r;
  r.type_ = ValueType::i8;
  r.num_.i = v;
  return r;
}
Value Value::i16(int16_t v) {
  Value r;
  r.type_ = ValueType::i16;
  r.num_.i = v;
  return r;
}
Value Value::i32(int32_t v) {
  Value r;
  r.type_ = ValueType::i32;
  r.num_.i = v;
  return r;
}
Value Value::i64(int64_t v) {
  Value r;
  r.type_ = ValueType::i64;
  r.num_.i = v;
  return r;
}
Value Value::f32(float v) {
  Value r;
  r.type_ = ValueType::f32;
  r.num_.f = static_cast<double>(v);
  return r;
}
Value Value::f64(double v) {
  Value r;
  r.type_ = ValueType::f64;
  r.num_.f = v;
  return r;
}
Value Value::boolean(bool v) {
  Value r;
  r.type_ = ValueType::boolean;
  r.num_.u = v ? 1 : 0;
  return r;
}

Value Value::string(std::string v) {
  Value r;
  r.type_ = ValueType::string;
  r.str_ = std::move(v);
  return r;
}

Value Value::array(ValueType elem_type, std::vector<Value> items) {
  if (static_cast<uint32_t>(elem_type) > static_cast<uint32_t>(ValueType::f64)) {
    throw InvalidArgument(fmt::format("Value::array: unknown element type {}", static_cast<uint32_t>(elem_type)));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].type() != elem_type) {
      throw InvalidArgument(fmt::format("Value::array: item {} has type {}, expected {}", i,
                                        value_type_name(items[i].type()), value_type_name(elem_type)));
    }
  }
  Value r;
  r.type_ = ValueType::array;
  r.elem_type_ = elem_type;
  r.items_ = std::move(items);
  return r;
}

Value Value::string_array(const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(Value::string(s));
  return array(ValueType::string, std::move(items));
}

Value Value::f32_array(const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(Value::f32(x));
  return array(ValueType::f32, std::move(items));
}

Value Value::i32_array(const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(Value::i32(x));
  return array(ValueType::i32, std::move(items));
}

bool Value::is_integer() const { return is_unsigned_type(type_) || is_signed_type(type_); }

int64_t Value::as_int() const {
  if (is_signed_type(type_)) return num_.i;
  if (is_unsigned_type(type_)) {
    if (num_.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw InvalidArgument(fmt::format("value {} does not fit in int64", num_.u));
    }
    return static_cast<int64_t>(num_.u);
  }
  throw InvalidArgument(fmt::format("value has type {}, expected an integer", value_type_name(type_)));
}

uint64_t Value::as_uint() const {
  if (is_unsigned_type(type_)) return num_.u;
  if (is_signed_type(type_)) {
    if (num_.i < 0) throw InvalidArgument(fmt::format("value {} is negative, expected a non-negative integer", num_.i));
    return static_cast<uint64_t>(num_.i);
  }
  throw InvalidArgument(fmt::format("value has type {}, expected an integer", value_type_name(type_)));
}

double Value::as_float() const {
  if (is_float()) return num_.f;
  if (is_signed_type(type_)) return static_cast<double>(num_.i);
  if (is_unsigned_type(type_)) return static_cast<double>(num_.u);
  throw InvalidArgument(fmt::format("value has type {}, expected a number", value_type_name(type_)));
}

bool Value::as_bool() const {
  if (type_ != ValueType::boolean) {
    throw InvalidArgument(fmt::format("value has type {}, expected bool", value_type_name(type_)));
  }
  return num_.u != 0;
}

const std::string& Value::as_string() const {
  if (type_ != ValueType::string) {
    throw InvalidArgument(fmt::format("value has type {}, expected string", value_type_name(type_)));
  }
  return str_;
}

ValueType Value::elem_type() const {
  if (type_ != ValueType::array) {
    throw InvalidArgument(fmt::format("value has type {}, expected array", value_type_name(type_)));
  }
  return elem_type_;
}

const std::vector<Value>& Value::items() const {
  if (type_ != ValueType::array) {
    throw InvalidArgument(fmt::format("value has type {}, expected array", value_type_name(type_)));
  }
  return items_;
}

bool Value::operator==(const Value& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case ValueType::string: return str_ == o.str_;
    case ValueType::array: return elem_type_ == o.elem_type_ && items_ == o.items_;
    case ValueType::f32: {
      // Compare the f32 bit patterns: a round trip through a file must be exact.
      const float a = static_cast<float>(num_.f), b = static_cast<float>(o.num_.f);
      return std::memcmp(&a, &b, sizeof a) == 0;  // NOLINT(bugprone-suspicious-memory-comparison): the bits
    }
    default: return num_.u == o.num_.u;
  }
}

namespace {

std::string quote_cut(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ >= max_chars) {
      out += fmt::format("\"... ({} bytes)", s.size());
      return out;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

}  // namespace

std::string value_to_display(const Value& v, size_t max_items, size_t max_chars) {
  switch (v.type()) {
    case ValueType::string: return quote_cut(v.as_string(), max_chars);
    case ValueType::boolean: return v.as_bool() ? "true" : "false";
    case ValueType::f32: return fmt::format("{}", static_cast<float>(v.as_float()));
    case ValueType::f64: return fmt::format("{}", v.as_float());
    case ValueType::array: {
      std::string out = fmt::format("[{} x {}]", value_type_name(v.elem_type()), v.items().size());
      if (v.items().empty()) return out;
      out += " [";
      const size_t n = std::min(max_items, v.items().size());
      for (size_t i = 0; i < n; ++i) {
        if (i) out += ", ";
        // Nested items get a short rendering so one line stays one line.
        out += value_to_display(v.items()[i], std::min<size_t>(max_items, 3), std::min<size_t>(max_chars, 24));
      }
      if (n < v.items().size()) out += ", ...";
      return out + "]";
    }
    default:
      if (v.type() == ValueType::u8 || v.type() == ValueType::u16 || v.type() == ValueType::u32 ||
          v.type() == ValueType::u64) {
        return fmt::format("{}", v.as_uint());
      }
      return fmt::format("{}", v.as_int());
  }
}

}  // namespace treespec::gguf
