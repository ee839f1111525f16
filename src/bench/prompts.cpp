#include "bench/prompts.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "treespec/status.h"

namespace treespec::bench {

namespace {

constexpr const char* kAutoFields[] = {"prompt", "turns", "question", "text", "instruction", "input", "content"};

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

// File name without directory and without .gz / .jsonl / .json / .txt.
std::string stem(const std::string& path) {
  std::string s = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  for (const char* ext : {".gz", ".jsonl", ".json", ".txt"}) {
    if (ends_with(s, ext) && s.size() > std::strlen(ext)) s.resize(s.size() - std::strlen(ext));
  }
  return s;
}

std::string gunzip(const std::string& path, const std::string& data) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw Error(fmt::format("{}: cannot initialise zlib", path));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      throw FormatError(fmt::format("{}: corrupt gzip data ({})", path, rc == Z_BUF_ERROR ? "truncated" : msg));
    }
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (out.size() > (size_t{1} << 31)) {
      inflateEnd(&zs);
      throw FormatError(fmt::format("{}: decompresses to more than 2 GiB; not a prompt file", path));
    }
  }
  inflateEnd(&zs);
  return out;
}

std::string prompt_of(const nlohmann::json& obj, const PromptSource& src, std::string& field,
                      const std::string& where) {
  if (!obj.is_object()) throw FormatError(fmt::format("{}: expected a JSON object, got {}", where, obj.type_name()));
  if (field.empty()) {
    for (const char* f : kAutoFields) {
      if (obj.contains(f)) {
        field = f;
        break;
      }
    }
    if (field.empty()) {
      throw FormatError(fmt::format("{}: no prompt field (looked for {}); name one with {}:field=NAME", where,
                                    fmt::join(kAutoFields, ", "), src.path));
    }
  }
  const auto it = obj.find(field);
  if (it == obj.end()) throw FormatError(fmt::format("{}: field '{}' is missing", where, field));
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    if (src.turn >= static_cast<int64_t>(it->size())) {
      throw FormatError(
          fmt::format("{}: field '{}' has {} turns, turn {} requested", where, field, it->size(), src.turn));
    }
    const auto& t = (*it)[static_cast<size_t>(src.turn)];
    if (!t.is_string()) throw FormatError(fmt::format("{}: field '{}'[{}] is not a string", where, field, src.turn));
    return t.get<std::string>();
  }
  throw FormatError(
      fmt::format("{}: field '{}' is a {}, not a string or an array of strings", where, field, it->type_name()));
}

// `text` parsed as JSON, or a FormatError with message(what went wrong): a parse_error,
// or out_of_range for a number like 1e400.
template <class Message>
nlohmann::json parse_json(const std::string& text, Message message) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(message(e.what()));
  }
}

}  // namespace

PromptSource parse_prompt_source(std::string_view arg) {
  PromptSource src;
  std::string path(arg);
  // Options are trailing :key=value segments with a known key; anything else is path.
  for (;;) {
    const size_t colon = path.rfind(':');
    if (colon == std::string::npos) break;
    const std::string seg = path.substr(colon + 1);
    const size_t eq = seg.find('=');
    const std::string key = seg.substr(0, eq);
    if (eq == std::string::npos || (key != "field" && key != "turn" && key != "format" && key != "name")) break;
    const std::string value = seg.substr(eq + 1);
    if (value.empty()) throw InvalidArgument(fmt::format("--prompts '{}': '{}' has an empty value", arg, key));
    if (key == "field") src.field = value;
    if (key == "name") src.name = value;
    if (key == "format") {
      if (value != "jsonl" && value != "json" && value != "text" && value != "lines") {
        throw InvalidArgument(
            fmt::format("--prompts '{}': format must be jsonl, json, text or lines, got '{}'", arg, value));
      }
      src.format = value;
    }
    if (key == "turn") {
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), src.turn);
      if (ec != std::errc() || p != value.data() + value.size() || src.turn < 0) {
        throw InvalidArgument(fmt::format("--prompts '{}': turn must be an integer >= 0, got '{}'", arg, value));
      }
    }
    path.resize(colon);
  }
  if (path.empty()) throw InvalidArgument(fmt::format("--prompts '{}': no file name", arg));
  src.path = path;
  return src;
}

std::string read_file_maybe_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(fmt::format("cannot open prompt file '{}': {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw IoError(fmt::format("cannot read prompt file '{}'", path));
  std::string data = ss.str();
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b) {
    return gunzip(path, data);
  }
  return data;
}

PromptSet load_prompts(const PromptSource& src, int64_t n_prompts) {
  PromptSet set;
  set.path = src.path;
  set.name = src.name.empty() ? stem(src.path) : src.name;
  set.turn = src.turn;
  set.field = src.field;
  std::string base = src.path;
  if (ends_with(base, ".gz")) base.resize(base.size() - 3);
  set.format = !src.format.empty()         ? src.format
               : ends_with(base, ".jsonl") ? "jsonl"
               : ends_with(base, ".json")  ? "json"
                                           : "text";

  const std::string data = read_file_maybe_gzip(src.path);
  std::vector<std::string> all;
  if (set.format == "text") {
    if (!src.field.empty())
      throw InvalidArgument(fmt::format("--prompts '{}': field= applies to JSON files only", src.path));
    std::istringstream in(data);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines separate nothing
      all.push_back(line);
    }
  } else if (set.format == "lines") {
    std::istringstream in(data);
    std::string line;
    for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (line.front() != '{') {
        all.push_back(line);
        continue;
      }
      const std::string where = fmt::format("{}:{}", src.path, lineno);
      const nlohmann::json j = parse_json(line, [&](const char* e) {
        return fmt::format("{}: line starts with '{{' but is not JSON: {}", where, e);
      });
      std::string field = src.field;  // found per line: lines may mix sources
      all.push_back(prompt_of(j, src, field, where));
    }
  } else if (set.format == "jsonl") {
    std::istringstream in(data);
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", src.path, lineno);
      const nlohmann::json j =
          parse_json(line, [&](const char* e) { return fmt::format("{}: not valid JSON ({})", where, e); });
      all.push_back(prompt_of(j, src, set.field, where));
    }
  } else {
    const nlohmann::json j =
        parse_json(data, [&](const char* e) { return fmt::format("{}: not valid JSON ({})", src.path, e); });
    if (!j.is_array())
      throw FormatError(fmt::format("{}: expected a JSON array of objects, got {}", src.path, j.type_name()));
    for (size_t i = 0; i < j.size(); ++i)
      all.push_back(prompt_of(j[i], src, set.field, fmt::format("{}[{}]", src.path, i)));
  }
  if (all.empty()) throw FormatError(fmt::format("{}: no prompts", src.path));
  set.n_available = static_cast<int64_t>(all.size());
  if (n_prompts > 0 && static_cast<int64_t>(all.size()) > n_prompts) all.resize(static_cast<size_t>(n_prompts));
  set.prompts = std::move(all);
  return set;
}

}  // namespace treespec::bench
