#include "bench_test_util.h"

#include <cctype>
#include <stdexcept>

namespace treespec::test {

using nlohmann::json;

namespace {

enum class T { string, integer, number, boolean, object, array, number_or_null };

bool type_ok(const json& v, T t) {
  switch (t) {
    case T::string: return v.is_string();
    case T::integer: return v.is_number_integer();
    case T::number: return v.is_number();
    case T::boolean: return v.is_boolean();
    case T::object: return v.is_object();
    case T::array: return v.is_array();
    case T::number_or_null: return v.is_number() || v.is_null();
  }
  return false;
}

const char* type_name(T t) {
  switch (t) {
    case T::string: return "string";
    case T::integer: return "integer";
    case T::number: return "number";
    case T::boolean: return "boolean";
    case T::object: return "object";
    case T::array: return "array";
    case T::number_or_null: return "number or null";
  }
  return "?";
}

void need(const json& obj, const std::string& where, const char* key, T t, std::vector<std::string>& errs) {
  if (!obj.is_object() || !obj.contains(key)) {
    errs.push_back(where + "." + key + ": missing");
    return;
  }
  if (!type_ok(obj.at(key), t)) errs.push_back(where + "." + key + ": expected " + type_name(t));
}

void need_array_of(const json& obj, const std::string& where, const char* key, T t, std::vector<std::string>& errs) {
  need(obj, where, key, T::array, errs);
  if (!obj.contains(key) || !obj.at(key).is_array()) return;
  for (size_t i = 0; i < obj.at(key).size(); ++i) {
    if (!type_ok(obj.at(key)[i], t))
      errs.push_back(where + "." + key + "[" + std::to_string(i) + "]: expected " + type_name(t));
  }
}

}  // namespace

std::vector<std::string> check_bench_schema(const json& r) {
  std::vector<std::string> e;
  if (!r.is_object()) return {"report: expected object"};
  need(r, "report", "schema", T::string, e);
  if (r.value("schema", "") != "treespec-bench") e.push_back("report.schema: expected \"treespec-bench\"");
  need(r, "report", "schema_version", T::integer, e);
  if (r.value("schema_version", 0) != 1) e.push_back("report.schema_version: expected 1");
  need(r, "report", "created_utc", T::string, e);
  need(r, "report", "command", T::string, e);
  need(r, "report", "greedy_ok", T::boolean, e);
  need(r, "report", "skipped_methods", T::array, e);

  need(r, "report", "machine", T::object, e);
  if (r.contains("machine") && r["machine"].is_object()) {
    const auto& m = r["machine"];
    need(m, "machine", "cpu_model", T::string, e);
    need(m, "machine", "n_cpus", T::integer, e);
    need(m, "machine", "isa", T::string, e);
    need(m, "machine", "os", T::string, e);
    need(m, "machine", "compiler", T::string, e);
    if (!m.contains("membw")) e.push_back("machine.membw: missing (null when not measured)");
    else if (!m["membw"].is_null()) {
      need(m["membw"], "machine.membw", "probe", T::string, e);
      need(m["membw"], "machine.membw", "bytes", T::integer, e);
      need(m["membw"], "machine.membw", "samples", T::array, e);
      if (m["membw"].contains("samples")) {
        for (const auto& s : m["membw"]["samples"]) {
          need(s, "machine.membw.samples[]", "n_threads", T::integer, e);
          need(s, "machine.membw.samples[]", "gb_per_s", T::number, e);
        }
      }
    }
  }

  need(r, "report", "config", T::object, e);
  if (r.contains("config") && r["config"].is_object()) {
    const auto& c = r["config"];
    for (const char* k : {"n_predict", "reps", "n_threads", "n_ctx", "n_prompts", "max_prompt_tokens"})
      need(c, "config", k, T::integer, e);
    for (const char* k : {"ignore_eos", "warmup"}) need(c, "config", k, T::boolean, e);
    for (const char* k : {"sampling", "order"}) need(c, "config", k, T::string, e);
    need_array_of(c, "config", "batches", T::integer, e);
    need_array_of(c, "config", "budgets", T::integer, e);
    need_array_of(c, "config", "methods", T::string, e);
  }

  need(r, "report", "models", T::array, e);
  if (r.contains("models") && r["models"].is_array()) {
    for (size_t i = 0; i < r["models"].size(); ++i) {
      const auto& m = r["models"][i];
      const std::string w = "models[" + std::to_string(i) + "]";
      for (const char* k : {"name", "path", "arch"}) need(m, w, k, T::string, e);
      for (const char* k : {"n_params", "weight_bytes", "n_layer", "n_embd", "n_vocab", "n_ctx_train"})
        need(m, w, k, T::integer, e);
    }
  }
  need(r, "report", "prompt_sets", T::array, e);
  if (r.contains("prompt_sets") && r["prompt_sets"].is_array()) {
    for (size_t i = 0; i < r["prompt_sets"].size(); ++i) {
      const auto& p = r["prompt_sets"][i];
      const std::string w = "prompt_sets[" + std::to_string(i) + "]";
      for (const char* k : {"name", "path", "format", "field"}) need(p, w, k, T::string, e);
      for (const char* k : {"turn", "n_available", "n_prompts", "prompt_tokens_max", "n_truncated"})
        need(p, w, k, T::integer, e);
      need(p, w, "prompt_tokens_mean", T::number, e);
    }
  }

  need(r, "report", "cells", T::array, e);
  if (r.contains("cells") && r["cells"].is_array()) {
    for (size_t i = 0; i < r["cells"].size(); ++i) {
      const auto& c = r["cells"][i];
      const std::string w = "cells[" + std::to_string(i) + "]";
      for (const char* k : {"model", "prompt_set", "method", "method_name", "peak_rss_scope"})
        need(c, w, k, T::string, e);
      for (const char* k : {"batch", "budget", "reps", "n_generated", "n_steps", "n_forwards", "peak_rss_bytes"})
        need(c, w, k, T::integer, e);
      for (const char* k : {"mean_accepted_length", "acceptance_rate", "rows_per_step", "seqs_per_forward", "decode_s",
                            "prefill_s", "weight_read_gb_per_s"}) {
        need(c, w, k, T::number, e);
      }
      need(c, w, "bandwidth_fraction", T::number_or_null, e);
      need(c, w, "greedy_match", T::boolean, e);
      need(c, w, "params", T::object, e);
      need_array_of(c, w, "acceptance_by_depth", T::number, e);
      need_array_of(c, w, "accepted_per_pos", T::integer, e);
      need_array_of(c, w, "drafted_per_pos", T::integer, e);
      need(c, w, "tokens_per_s", T::object, e);
      if (c.contains("tokens_per_s") && c["tokens_per_s"].is_object()) {
        for (const char* k : {"median", "min", "max"}) need(c["tokens_per_s"], w + ".tokens_per_s", k, T::number, e);
        need_array_of(c["tokens_per_s"], w + ".tokens_per_s", "values", T::number, e);
      }
      need(c, w, "speedup", T::object, e);
      if (c.contains("speedup") && c["speedup"].is_object()) {
        for (const char* k : {"median", "min", "max"}) need(c["speedup"], w + ".speedup", k, T::number, e);
      }
      need(c, w, "time_s", T::object, e);
      if (c.contains("time_s") && c["time_s"].is_object()) {
        for (const char* k : {"draft", "forward", "verify", "commit"})
          need(c["time_s"], w + ".time_s", k, T::number, e);
      }
      need(c, w, "mismatches", T::array, e);
      if (c.contains("mismatches") && c["mismatches"].is_array()) {
        for (const auto& m : c["mismatches"]) {
          for (const char* k : {"prompt", "rep", "position", "expected", "got", "expected_len", "got_len"}) {
            need(m, w + ".mismatches[]", k, T::integer, e);
          }
        }
      }
    }
  }
  return e;
}

void XmlNode::find_all(const std::string& tag, std::vector<const XmlNode*>& out) const {
  if (name == tag) out.push_back(this);
  for (const auto& c : children) c.find_all(tag, out);
}

std::vector<const XmlNode*> XmlNode::find_all(const std::string& tag) const {
  std::vector<const XmlNode*> out;
  find_all(tag, out);
  return out;
}

namespace {

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}

  XmlNode document() {
    if (s_.compare(0, 5, "<?xml") == 0) {
      const size_t e = s_.find("?>");
      if (e == std::string::npos) fail("unterminated XML declaration");
      i_ = e + 2;
    }
    misc();
    if (i_ >= s_.size() || s_[i_] != '<') fail("expected the root element");
    XmlNode root = element();
    misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("XML error at byte " + std::to_string(i_) + ": " + what);
  }
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  // Whitespace and comments between top-level constructs.
  void misc() {
    for (;;) {
      ws();
      if (s_.compare(i_, 4, "<!--") == 0) {
        comment();
        continue;
      }
      break;
    }
  }
  void comment() {
    const size_t e = s_.find("-->", i_ + 4);
    if (e == std::string::npos) fail("unterminated comment");
    if (s_.substr(i_ + 4, e - i_ - 4).find("--") != std::string::npos) fail("'--' inside a comment");
    i_ = e + 3;
  }
  static bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
  static bool name_char(char c) {
    return name_start(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  }
  std::string name() {
    if (i_ >= s_.size() || !name_start(s_[i_])) fail("expected a name");
    const size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }
  std::string reference() {  // at '&'
    const size_t e = s_.find(';', i_);
    if (e == std::string::npos || e - i_ > 10) fail("unterminated entity reference");
    const std::string ent = s_.substr(i_ + 1, e - i_ - 1);
    i_ = e + 1;
    if (ent == "amp") return "&";
    if (ent == "lt") return "<";
    if (ent == "gt") return ">";
    if (ent == "quot") return "\"";
    if (ent == "apos") return "'";
    if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x';
      const std::string digits = ent.substr(hex ? 2 : 1);
      if (digits.empty()) fail("empty character reference");
      for (char c : digits) {
        if (!(hex ? std::isxdigit(static_cast<unsigned char>(c)) : std::isdigit(static_cast<unsigned char>(c))))
          fail("bad character reference");
      }
      return "?";
    }
    fail("unknown entity &" + ent + ";");
  }
  XmlNode element() {
    ++i_;  // '<'
    XmlNode n;
    n.name = name();
    for (;;) {
      const size_t before = i_;
      ws();
      if (i_ >= s_.size()) fail("unterminated start tag <" + n.name);
      if (s_[i_] == '/') {
        if (s_.compare(i_, 2, "/>") != 0) fail("expected '/>'");
        i_ += 2;
        return n;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      if (i_ == before) fail("attributes must be separated by whitespace");
      const std::string key = name();
      ws();
      if (i_ >= s_.size() || s_[i_] != '=') fail("attribute " + key + " without '='");
      ++i_;
      ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("attribute " + key + " value not quoted");
      const char q = s_[i_++];
      std::string v;
      while (i_ < s_.size() && s_[i_] != q) {
        if (s_[i_] == '<') fail("'<' in attribute " + key);
        if (s_[i_] == '&') v += reference();
        else v += s_[i_++];
      }
      if (i_ >= s_.size()) fail("unterminated attribute " + key);
      ++i_;
      if (n.attrs.count(key)) fail("duplicate attribute " + key);
      n.attrs[key] = v;
    }
    // Content.
    for (;;) {
      if (i_ >= s_.size()) fail("element <" + n.name + "> is not closed");
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        const std::string end = name();
        if (end != n.name) fail("</" + end + "> closes <" + n.name + ">");
        ws();
        if (i_ >= s_.size() || s_[i_] != '>') fail("expected '>'");
        ++i_;
        return n;
      }
      if (s_.compare(i_, 4, "<!--") == 0) {
        comment();
        continue;
      }
      if (s_[i_] == '<') {
        n.children.push_back(element());
        continue;
      }
      if (s_[i_] == '&') {
        n.text += reference();
        continue;
      }
      if (s_[i_] == '>' && i_ >= 2 && s_.compare(i_ - 2, 2, "]]") == 0) fail("']]>' in text");
      n.text += s_[i_++];
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

XmlNode parse_xml(const std::string& doc) { return XmlParser(doc).document(); }

}  // namespace treespec::test
