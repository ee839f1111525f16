// Sequence and mapping filters, and the filter registry.
#include <fmt/format.h>

#include <algorithm>

#include "chat/filters.h"
#include "chat/objects.h"
#include "chat/unicode.h"

namespace treespec::chat::filters {

namespace {

// Jinja2's make_attrgetter: `attribute` is a dotted path or an integer index.
Value get_attribute(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_string()) return in.attr_path(item, attribute.as_string());
  return in.getitem(item, attribute);
}

// ignore_case: lower-case strings for comparison when not case sensitive.
Value sort_key(Interpreter& in, const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  Value k = attribute ? get_attribute(in, item, *attribute) : item;
  if (!case_sensitive && k.is_string()) return Value(py_lower(k.as_string()));
  return k;
}

std::optional<Value> opt_attribute(ArgReader& r, size_t index) {
  auto a = r.get(index, "attribute");
  if (!a || a->is_none()) return std::nullopt;
  return a;
}

Value f_length(Interpreter&, const Value& v, Args& a) {
  ArgReader(a, "length").done();
  if (v.is_undefined()) return Value(0);
  if (v.is_string()) return Value(static_cast<int64_t>(utf8_length(v.as_string())));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().items.size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
  if (v.is_object() && !v.as_object().single_pass()) {
    if (auto items = v.as_object().iterate()) return Value(static_cast<int64_t>(items->size()));
  }
  type_error(fmt::format("object of type '{}' has no len()", type_name(v)));
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "join");
  const std::string sep = to_str(r.get_or(0, "d", Value("")));
  auto attribute = opt_attribute(r, 1);
  r.done();
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute ? get_attribute(in, item, *attribute) : item);
    in.check_string(out.size());
  }
  return Value(std::move(out));
}

Value f_first(Interpreter& in, const Value& v, Args& a) {
  ArgReader(a, "first").done();
  if (v.is_object() && v.as_object().single_pass()) {  // next(): the rest stays in the iterator
    if (auto x = static_cast<Iterator&>(v.as_object()).next()) return *x;
    return Value::undefined("No first item, sequence was empty.");
  }
  auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& in, const Value& v, Args& a) {
  ArgReader(a, "last").done();
  if (v.is_undefined()) type_error("'Undefined' object is not reversible");
  if (v.is_object() && v.as_object().single_pass())
    type_error(fmt::format("'{}' object is not reversible", type_name(v)));
  auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_list(Interpreter& in, const Value& v, Args& a) {
  ArgReader(a, "list").done();
  return Value::list(in.iterate(v));
}

// select / reject / selectattr / rejectattr
template <bool Select, bool Attr>
Value f_select(Interpreter& in, const Value& v, Args& a) {
  size_t off = 0;
  Value attribute;
  if (Attr) {
    if (a.pos.empty()) type_error("selectattr/rejectattr need an attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  std::optional<std::string> test;
  Args test_args;
  if (a.pos.size() > off) {
    test = to_str(a.pos[off]);
    test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), a.pos.end());
  }
  test_args.kw = a.kw;
  std::vector<Value> out;
  if (!truthy(v)) return make_iterator(in, {});  // Jinja2 iterates only a truthy value (None gives nothing)
  for (const Value& item : in.iterate(v)) {
    in.step();
    const Value x = Attr ? get_attribute(in, item, attribute) : item;
    bool r;
    if (test) {
      Args copy = test_args;
      r = in.apply_test(*test, x, copy);
    } else {
      r = truthy(x);
    }
    if (r == Select) out.push_back(item);
  }
  return make_iterator(in, std::move(out));
}

Value f_map(Interpreter& in, const Value& v, Args& a) {
  std::vector<Value> out;
  if (!truthy(v)) return make_iterator(in, {});  // as select: a falsy value maps to nothing
  if (a.pos.empty()) {
    std::optional<Value> attribute, def;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute") {
        attribute = x;
      } else if (k == "default") {
        def = x;
      } else {
        throw TemplateError("FilterArgumentError", fmt::format("Unexpected keyword argument '{}'", k));
      }
    }
    if (!attribute) throw TemplateError("FilterArgumentError", "map requires a filter argument");
    for (const Value& item : in.iterate(v)) {
      in.step();
      Value x = get_attribute(in, item, *attribute);
      if (x.is_undefined() && def) x = *def;
      out.push_back(std::move(x));
    }
    return make_iterator(in, std::move(out));
  }
  const std::string name = to_str(a.pos[0]);
  Args rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : in.iterate(v)) {
    Args copy = rest;
    out.push_back(in.apply_filter(name, item, copy));
  }
  return make_iterator(in, std::move(out));
}

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "sum");
  auto attribute = opt_attribute(r, 0);
  Value total = r.get_or(1, "start", Value(0));
  r.done();
  for (const Value& item : in.iterate(v))
    total = binary_op(in, "+", total, attribute ? get_attribute(in, item, *attribute) : item);
  return total;
}

template <bool Max>
Value f_minmax(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, Max ? "max" : "min");
  const bool cs = truthy(r.get_or(0, "case_sensitive", Value(false)));
  auto attribute = opt_attribute(r, 1);
  r.done();
  auto items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], attribute, cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(in, items[i], attribute, cs);
    const int c = compare(k, best_key, Max ? ">" : "<");
    if (Max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "unique");
  const bool cs = truthy(r.get_or(0, "case_sensitive", Value(false)));
  auto attribute = opt_attribute(r, 1);
  r.done();
  std::vector<Value> out, seen;
  for (const Value& item : in.iterate(v)) {
    Value k = sort_key(in, item, attribute, cs);
    if (k.is_list() && !k.is_tuple()) type_error("unhashable type: 'list'");
    if (k.is_dict()) type_error("unhashable type: 'dict'");
    bool dup = false;
    for (const Value& s : seen) dup = dup || equals(s, k);
    in.step(seen.size() / 16);
    if (!dup) {
      seen.push_back(std::move(k));
      out.push_back(item);
    }
  }
  return make_iterator(in, std::move(out));
}

// The values of (key, value) pairs in key order, as a list (sort and dictsort). Python's
// sort(reverse=True) keeps equal elements in their original order too: stable both ways.
Value sorted_by_key(Interpreter& in, std::vector<std::pair<Value, Value>> keyed, bool reverse) {
  in.step(keyed.size() * 4);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& [k, it] : keyed) out.push_back(std::move(it));
  return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "sort");
  const bool reverse = truthy(r.get_or(0, "reverse", Value(false)));
  const bool cs = truthy(r.get_or(1, "case_sensitive", Value(false)));
  auto attribute = opt_attribute(r, 2);
  r.done();
  auto items = in.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (Value& it : items) keyed.emplace_back(sort_key(in, it, attribute, cs), it);
  return sorted_by_key(in, std::move(keyed), reverse);
}

Value f_reverse(Interpreter& in, const Value& v, Args& a) {
  ArgReader(a, "reverse").done();
  if (v.is_string()) {
    auto cps = utf8_decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return same_kind(v, utf8_encode(cps));
  }
  // reversed(): an iterator for a list, tuple or dict (its keys); an iterator itself is
  // not reversible, so Jinja2 falls back to a reversed list of its items
  const bool seq = v.is_list() || v.is_dict();
  const std::string type = v.is_tuple() ? "reversed" : v.is_list() ? "list_reverseiterator" : "dict_reversekeyiterator";
  auto items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return seq ? make_iterator(in, std::move(items), type) : Value::list(std::move(items));
}

Value f_batch(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "batch");
  auto n = r.get(0, "linecount");
  auto fill = r.get(1, "fill_with");
  r.done();
  if (!n || (!n->is_int() && !n->is_bool())) type_error("batch(): linecount must be an integer");
  const int64_t count = n->as_int();
  if (count <= 0) value_error("batch(): linecount must be positive");
  std::vector<Value> out, cur;
  for (const Value& item : in.iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == count) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      in.check_items(static_cast<size_t>(count));
      while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return make_iterator(in, std::move(out));
}

Value f_items(Interpreter& in, const Value& v, Args& a) {
  ArgReader(a, "items").done();
  if (v.is_undefined()) return make_iterator(in, {});
  if (!v.is_dict()) type_error(fmt::format("Can only get item pairs from a mapping, not {}", type_name(v)));
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::tuple({k, x}));
  return make_iterator(in, std::move(out));
}

Value f_dictsort(Interpreter& in, const Value& v, Args& a) {
  ArgReader r(a, "dictsort");
  const bool cs = truthy(r.get_or(0, "case_sensitive", Value(false)));
  const std::string by = to_str(r.get_or(1, "by", Value("key")));
  const bool reverse = truthy(r.get_or(2, "reverse", Value(false)));
  r.done();
  if (by != "key" && by != "value")
    throw TemplateError("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict()) type_error(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, x] : v.as_dict().items) {
    Value key = by == "key" ? k : x;
    if (!cs && key.is_string()) key = Value(py_lower(key.as_string()));
    keyed.emplace_back(std::move(key), Value::tuple({k, x}));
  }
  return sorted_by_key(in, std::move(keyed), reverse);
}

}  // namespace

}  // namespace treespec::chat::filters

namespace treespec::chat {

const std::unordered_map<std::string, FilterFn>& filter_registry() {
  using namespace filters;
  static const std::unordered_map<std::string, FilterFn> reg = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_minmax<true>},
      {"min", f_minmax<false>},
      {"reject", f_select<false, false>},
      {"rejectattr", f_select<false, true>},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select<true, false>},
      {"selectattr", f_select<true, true>},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return reg;
}

}  // namespace treespec::chat
