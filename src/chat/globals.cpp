// Global functions: range, dict, namespace, cycler, joiner (Jinja2's defaults) and
// transformers' raise_exception and strftime_now.
#include <fmt/format.h>

#include <chrono>
#include <ctime>

#include "chat/objects.h"

namespace treespec::chat {

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox MAX_RANGE

Value fn(const char* name, Function::Fn f) {
  return Value(std::shared_ptr<Object>(std::make_shared<Function>(name, std::move(f))));
}

Value g_range(Interpreter& in, Args& a) {
  if (!a.kw.empty()) type_error("range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3)
    type_error(fmt::format("range expected 1 to 3 arguments, got {}", a.pos.size()));
  for (const auto& v : a.pos) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_int() && !v.is_bool())
      type_error(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
  }
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  }
  if (step == 0) value_error("range() arg 3 must not be zero");
  int64_t n = 0;
  if (step > 0 && stop > start) n = (stop - start + step - 1) / step;
  if (step < 0 && stop < start) n = (start - stop - step - 1) / -step;
  if (n > kMaxRange)
    throw TemplateError("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.emplace_back(start + i * step);
  in.step(static_cast<uint64_t>(n) / 8);
  return Value::list(std::move(out));
}

void fill_dict(Interpreter& in, DictObj& d, Args& a, const char* fn_name) {
  if (a.pos.size() > 1) type_error(fmt::format("{} expected at most 1 argument, got {}", fn_name, a.pos.size()));
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().items) d.set(k, v);
    } else {
      for (const Value& pair : in.iterate(src)) {
        auto kv = in.iterate(pair);
        if (kv.size() != 2) value_error("dictionary update sequence element has wrong length; 2 is required");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) d.set(Value(k), v);
}

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::optional<Value> attr(std::string_view name) override {
    if (items_.empty()) return std::nullopt;  // released
    if (name == "current") return items_[pos_];
    if (name == "next") {
      auto self = std::static_pointer_cast<Cycler>(shared_from_this());
      return fn("next", [self](Interpreter&, Args&) {
        Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return v;
      });
    }
    if (name == "reset") {
      auto self = std::static_pointer_cast<Cycler>(shared_from_this());
      return fn("reset", [self](Interpreter&, Args&) {
        self->pos_ = 0;
        return Value(None{});
      });
    }
    return std::nullopt;
  }
  void release() override { items_.clear(); }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, Args&) override {
    if (!used_) {
      used_ = true;
      return Value(std::string());
    }
    return Value(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

std::string strftime_py(const std::tm& tm, const std::string& f) {
  // Python's datetime.strftime on a naive datetime: %f is microseconds, %z and %Z empty;
  // everything else goes to the C library, as CPython does.
  std::string fmt2;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '%' && i + 1 < f.size()) {
      const char c = f[i + 1];
      if (c == 'f') {
        fmt2 += "000000";
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      fmt2 += f[i];
      fmt2 += f[++i];
      continue;
    }
    fmt2 += f[i];
  }
  if (fmt2.empty()) return {};
  std::string out(256 + fmt2.size() * 32, '\0');
  const size_t n = std::strftime(out.data(), out.size(), fmt2.c_str(), &tm);
  out.resize(n);
  return out;
}

}  // namespace

std::optional<Value> builtin_global(Interpreter& in, std::string_view name) {
  if (name == "range") return fn("range", g_range);
  if (name == "dict") {
    return fn("dict", [](Interpreter& i, Args& a) {
      Value d = Value::dict();
      fill_dict(i, d.as_dict(), a, "dict");
      return d;
    });
  }
  if (name == "namespace") {
    return fn("namespace", [](Interpreter& i, Args& a) {
      auto ns = std::make_shared<Namespace>();
      fill_dict(i, ns->attrs, a, "namespace");
      return i.track(ns);
    });
  }
  if (name == "cycler") {
    return fn("cycler", [](Interpreter& i, Args& a) {
      if (a.pos.empty()) type_error("cycler() needs at least one item");
      return i.track(std::make_shared<Cycler>(a.pos));
    });
  }
  if (name == "joiner") {
    return fn("joiner", [](Interpreter&, Args& a) {
      ArgReader r(a, "joiner");
      Value sep = r.get_or(0, "sep", Value(", "));
      r.done();
      return Value(std::shared_ptr<Object>(std::make_shared<Joiner>(to_str(sep))));
    });
  }
  if (name == "raise_exception") {
    return fn("raise_exception", [](Interpreter&, Args& a) -> Value {
      ArgReader r(a, "raise_exception");
      Value msg = r.get_or(0, "message", Value(""));
      r.done();
      throw TemplateError("TemplateError", to_str(msg));
    });
  }
  if (name == "strftime_now") {
    return fn("strftime_now", [](Interpreter& i, Args& a) {
      ArgReader r(a, "strftime_now");
      auto f = r.get(0, "format");
      r.done();
      if (!f) type_error("strftime_now() missing 1 required positional argument: 'format'");
      if (!f->is_string()) type_error(fmt::format("strftime() argument 1 must be str, not {}", type_name(*f)));
      std::tm tm{};
      if (i.options().now) {
        tm = *i.options().now;
      } else {
        const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        localtime_r(&t, &tm);
      }
      return Value(strftime_py(tm, f->as_string()));
    });
  }
  (void)in;
  return std::nullopt;
}

}  // namespace treespec::chat
