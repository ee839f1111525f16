#include "chat/strings.h"

#include "chat/errors.h"
#include "chat/unicode.h"

namespace treespec::chat {

namespace {

bool cased(char32_t c) { return py_islower_cased(c) || py_isupper_cased(c); }

void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {
    out += "SS";
  } else {
    utf8_append(out, py_upper(c));
  }
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) value_error("empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t p = s.find(*sep, start);
      if (p == std::string_view::npos) break;
      out.emplace_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  auto skip_space = [&]() {
    while (i < s.size()) {
      size_t j = i;
      if (!py_isspace(utf8_next(s, j))) break;
      i = j;
    }
  };
  skip_space();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      std::string rest(s.substr(i));
      out.push_back(py_strip(rest, false, true, nullptr));
      return out;
    }
    const size_t start = i;
    while (i < s.size()) {
      size_t j = i;
      if (py_isspace(utf8_next(s, j))) break;
      i = j;
    }
    out.emplace_back(s.substr(start, i - start));
    skip_space();
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) value_error("empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string_view::npos) break;
      out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::vector<char32_t> cps = utf8_decode(s);
    size_t e = cps.size();
    while (e > 0 && py_isspace(cps[e - 1])) --e;
    while (e > 0) {
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(utf8_encode(std::vector<char32_t>(cps.begin(), cps.begin() + static_cast<std::ptrdiff_t>(e))));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(cps[b - 1])) --b;
      out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                                      cps.begin() + static_cast<std::ptrdiff_t>(e))));
      e = b;
      while (e > 0 && py_isspace(cps[e - 1])) --e;
    }
  }
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = utf8_next(s, i);
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.append(s.substr(start, i - start));
      continue;
    }
    std::string end(s.substr(start, i - start));
    if (c == '\r' && i < s.size() && s[i] == '\n') {
      end += '\n';
      ++i;
    }
    if (keepends) cur += end;
    out.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // inserts `repl` between code points (and at both ends)
    int64_t n = 0;
    size_t i = 0;
    while (true) {
      if (count < 0 || n < count) {
        out.append(repl);
        ++n;
      }
      if (i >= s.size()) break;
      const size_t start = i;
      utf8_next(s, i);
      out.append(s.substr(start, i - start));
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t p = s.find(old, start);
    if (p == std::string_view::npos) break;
    out.append(s.substr(start, p - start));
    out.append(repl);
    start = p + old.size();
    ++n;
  }
  out.append(s.substr(start));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (cased(c)) {
      if (prev_cased) {
        utf8_append(out, py_lower(c));
      } else {
        append_upper(out, c);
      }
      prev_cased = true;
    } else {
      utf8_append(out, c);
      prev_cased = false;
    }
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (first) {
      append_upper(out, c);
      first = false;
    } else {
      utf8_append(out, py_lower(c));
    }
  }
  return out;
}

std::string py_center(std::string_view s, int64_t width, char32_t fill) {
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return std::string(s);
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  std::string f;
  utf8_append(f, fill);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += f;
  out.append(s);
  for (int64_t i = 0; i < marg - left; ++i) out += f;
  return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string_view::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  const size_t p = reverse ? s.rfind(sub) : s.find(sub);
  if (p == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, p)));
}

bool py_islower(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (py_isupper_cased(c)) return false;
    if (py_islower_cased(c)) any = true;
  }
  return any;
}

bool py_isupper(std::string_view s) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (py_islower_cased(c)) return false;
    if (py_isupper_cased(c)) any = true;
  }
  return any;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace treespec::chat
