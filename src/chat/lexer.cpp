#include "chat/lexer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "chat/errors.h"
#include "chat/unicode.h"

namespace treespec::chat {

namespace {

[[noreturn]] void syntax_error(const std::string& msg, int line, int col) {
  throw TemplateError("TemplateSyntaxError", msg, line, col);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Length of Python's \s* (or \s+ when `at_least_one` and none) at s[pos].
size_t space_run(std::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size()) {
    size_t j = i;
    if (!py_isspace(utf8_next(s, j))) break;
    i = j;
  }
  return i - pos;
}

std::string rstrip_space(std::string_view s) { return py_strip(s, false, true, nullptr); }

bool all_space(std::string_view s) {
  if (s.empty()) return false;  // Jinja2 uses \s+: an empty tail is not stripped (nothing to strip)
  return space_run(s, 0) == s.size();
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
std::string unescape(std::string_view s, int line, int col) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c != '\\' || i + 1 >= s.size()) {
      out += c;
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const int n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        uint32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          const int h = i + 1 + k < s.size() ? hexval(s[i + 1 + k]) : -1;
          if (h < 0) syntax_error(fmt::format("truncated \\{}{} escape", e, std::string(n, 'X')), line, col);
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10FFFF) syntax_error("illegal Unicode character", line, col);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // lone surrogates cannot be UTF-8
        utf8_append(out, cp);
        i += n;
        break;
      }
      case 'N': syntax_error("\\N{...} escapes are not supported", line, col);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            cp = cp * 8 + (s[++i] - '0');
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& opt) : s_(std::move(src)), opt_(opt) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) root();
    push(Tok::eof, "", pos_);
    return std::move(out_);
  }

 private:
  std::string s_;
  LexerOptions opt_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
  // line bookkeeping: newlines before `line_pos_` counted in `line_`
  size_t line_pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;

  void locate(size_t pos, int& line, int& col) {
    if (pos < line_pos_) {  // rare: recount from the start
      line_pos_ = 0;
      line_ = 1;
      line_start_ = 0;
    }
    for (; line_pos_ < pos && line_pos_ < s_.size(); ++line_pos_) {
      if (s_[line_pos_] == '\n') {
        ++line_;
        line_start_ = line_pos_ + 1;
      }
    }
    line = line_;
    col = static_cast<int>(pos - line_start_) + 1;
  }

  Token& push(Tok t, std::string text, size_t pos) {
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    locate(pos, tok.line, tok.column);
    out_.push_back(std::move(tok));
    return out_.back();
  }

  [[noreturn]] void fail(const std::string& msg, size_t pos) {
    int line, col;
    locate(pos, line, col);
    syntax_error(msg, line, col);
  }

  // Applies `-` (strip all whitespace) or lstrip_blocks to the text before a tag.
  std::string strip_before(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return rstrip_space(text);
    if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(std::string_view(text).substr(l_pos))) text.resize(l_pos);
    }
    return text;
  }

  void emit_data(std::string text, size_t pos) {
    if (!text.empty()) push(Tok::data, std::move(text), pos);
  }

  // Matches a tag end `close` ("%}" / "#}") at p with the +, - and trim_blocks forms;
  // returns the end position or npos.
  size_t match_close(size_t p, std::string_view close, bool allow_plus, bool trim) {
    if (allow_plus && s_.compare(p, 1, "+") == 0 && s_.compare(p + 1, close.size(), close) == 0)
      return p + 1 + close.size();
    if (s_.compare(p, 1, "-") == 0 && s_.compare(p + 1, close.size(), close) == 0) {
      const size_t e = p + 1 + close.size();
      return e + space_run(s_, e);
    }
    if (s_.compare(p, close.size(), close) == 0) {
      size_t e = p + close.size();
      if (trim && opt_.trim_blocks && e < s_.size() && s_[e] == '\n') ++e;
      return e;
    }
    return std::string::npos;
  }

  // `{%` [-+] \s* raw \s* (-%}\s* | %}) at p: returns the end or npos.
  size_t match_raw_begin(size_t p) {
    size_t i = p + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i += space_run(s_, i);
    if (s_.compare(i, 3, "raw") != 0) return std::string::npos;
    i += 3;
    i += space_run(s_, i);
    if (s_.compare(i, 3, "-%}") == 0) return i + 3 + space_run(s_, i + 3);
    if (s_.compare(i, 2, "%}") == 0) return i + 2;
    return std::string::npos;
  }

  void root() {
    const size_t start = s_.find('{', pos_);
    size_t tag = std::string::npos;
    for (size_t p = start; p != std::string::npos && p + 1 < s_.size(); p = s_.find('{', p + 1)) {
      const char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') {
        tag = p;
        break;
      }
    }
    if (tag == std::string::npos) {
      emit_data(s_.substr(pos_), pos_);
      pos_ = s_.size();
      return;
    }
    const char kind = s_[tag + 1];
    const char sign = tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : '\0';
    std::string text = s_.substr(pos_, tag - pos_);
    if (kind == '%') {
      const size_t raw_end = match_raw_begin(tag);
      if (raw_end != std::string::npos) {
        emit_data(strip_before(std::move(text), sign, false), pos_);
        line_starting_ = s_[raw_end - 1] == '\n';
        raw(raw_end, tag);
        return;
      }
    }
    emit_data(strip_before(std::move(text), sign, kind == '{'), pos_);
    size_t p = tag + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      comment(p, tag);
    } else {
      push(kind == '{' ? Tok::var_begin : Tok::block_begin, kind == '{' ? "{{" : "{%", tag);
      inside_tag(p, kind == '{');
    }
  }

  void comment(size_t p, size_t tag) {
    for (size_t q = s_.find('#', p); q != std::string::npos; q = s_.find('#', q + 1)) {
      if (q + 1 >= s_.size() || s_[q + 1] != '}') continue;
      // the close may start one character earlier with + or -
      size_t at = q;
      if (q > p && (s_[q - 1] == '-' || s_[q - 1] == '+')) at = q - 1;
      const size_t e = match_close(at, "#}", true, true);
      pos_ = e;
      line_starting_ = s_[e - 1] == '\n';
      return;
    }
    fail("Missing end of comment tag", tag);
  }

  void raw(size_t p, size_t tag) {
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 1)) {
      size_t i = q + 2;
      const char sign = i < s_.size() && (s_[i] == '-' || s_[i] == '+') ? s_[i] : '\0';
      if (sign) ++i;
      i += space_run(s_, i);
      if (s_.compare(i, 6, "endraw") != 0) continue;
      i += 6;
      i += space_run(s_, i);
      const size_t e = match_close(i, "%}", true, true);
      if (e == std::string::npos) continue;
      emit_data(strip_before(s_.substr(p, q - p), sign, false), p);
      pos_ = e;
      line_starting_ = s_[e - 1] == '\n';
      return;
    }
    fail("Missing end of raw directive", tag);
  }

  void inside_tag(size_t p, bool variable) {
    std::vector<char> balance;
    while (true) {
      if (balance.empty()) {
        size_t e = std::string::npos;
        if (variable) {
          if (s_.compare(p, 3, "-}}") == 0) {
            e = p + 3 + space_run(s_, p + 3);
          } else if (s_.compare(p, 2, "}}") == 0) {
            e = p + 2;
          }
        } else {
          e = match_close(p, "%}", true, true);
        }
        if (e != std::string::npos) {
          push(variable ? Tok::var_end : Tok::block_end, variable ? "}}" : "%}", p);
          pos_ = e;
          line_starting_ = s_[e - 1] == '\n';
          return;
        }
      }
      if (p >= s_.size()) {
        pos_ = p;  // the parser reports the unexpected end
        return;
      }
      const size_t ws = space_run(s_, p);
      if (ws) {
        p += ws;
        continue;
      }
      p = lex_one(p, balance);
    }
  }

  size_t lex_number(size_t p) {
    // float: digits ((.digits)? e[+-]digits | .digits); integer otherwise
    auto digits = [&](size_t i) {  // (\d+_)*\d+
      size_t j = i;
      while (true) {
        size_t k = j;
        while (k < s_.size() && is_digit(s_[k])) ++k;
        if (k == j) return j == i ? i : j;  // no digits after '_' : back off
        j = k;
        if (j + 1 < s_.size() && s_[j] == '_' && is_digit(s_[j + 1])) {
          ++j;
          continue;
        }
        return j;
      }
    };
    const size_t int_end = digits(p);
    size_t f_end = std::string::npos;
    if (p == 0 || s_[p - 1] != '.') {
      size_t i = int_end;
      size_t frac = i;
      if (i < s_.size() && s_[i] == '.' && i + 1 < s_.size() && is_digit(s_[i + 1])) frac = digits(i + 1);
      size_t j = frac;
      if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
        size_t k = j + 1;
        if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
        if (k < s_.size() && is_digit(s_[k])) f_end = digits(k);
      }
      if (f_end == std::string::npos && frac != i) f_end = frac;
    }
    if (f_end != std::string::npos) {
      std::string t;
      for (size_t i = p; i < f_end; ++i)
        if (s_[i] != '_') t += s_[i];
      Token& tok = push(Tok::floating, s_.substr(p, f_end - p), p);
      tok.fval = std::strtod(t.c_str(), nullptr);
      return f_end;
    }
    // integers: 0b / 0o / 0x, [1-9](_?\d)*, 0(_?0)*
    int base = 10;
    size_t i = p, body = p;
    if (s_[p] == '0' && p + 1 < s_.size() && std::string_view("bBoOxX").find(s_[p + 1]) != std::string_view::npos) {
      const char b = static_cast<char>(s_[p + 1] | 0x20);
      base = b == 'b' ? 2 : (b == 'o' ? 8 : 16);
      body = i = p + 2;
      auto ok = [&](char c) { return base == 16 ? hexval(c) >= 0 : (c >= '0' && c < '0' + base); };
      while (i < s_.size()) {
        if (ok(s_[i])) {
          ++i;
        } else if (s_[i] == '_' && i + 1 < s_.size() && ok(s_[i + 1])) {
          i += 2;
        } else {
          break;
        }
      }
      if (i == body) {  // "0x" alone: the integer is "0"
        base = 10;
        body = p;
        i = p + 1;
      }
    } else if (s_[p] == '0') {
      i = p + 1;
      while (i < s_.size()) {
        if (s_[i] == '0') {
          ++i;
        } else if (s_[i] == '_' && i + 1 < s_.size() && s_[i + 1] == '0') {
          i += 2;
        } else {
          break;
        }
      }
    } else {
      i = int_end;
    }
    std::string t;
    for (size_t k = body; k < i; ++k)
      if (s_[k] != '_') t += s_[k];
    errno = 0;
    const unsigned long long v = std::strtoull(t.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      fail("integer literal too large (64-bit integers)", p);
    Token& tok = push(Tok::integer, s_.substr(p, i - p), p);
    tok.ival = static_cast<int64_t>(v);
    return i;
  }

  size_t lex_one(size_t p, std::vector<char>& balance) {
    const char c = s_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t e = p + 1;
      while (e < s_.size() && is_name_char(s_[e])) ++e;
      push(Tok::name, s_.substr(p, e - p), p);
      return e;
    }
    if (c == '\'' || c == '"') {
      size_t i = p + 1;
      while (i < s_.size() && s_[i] != c) i += s_[i] == '\\' ? 2 : 1;
      if (i >= s_.size()) fail(fmt::format("unexpected char '{}'", c), p);
      int line, col;
      locate(p, line, col);
      push(Tok::string, unescape(std::string_view(s_).substr(p + 1, i - p - 1), line, col), p);
      return i + 1;
    }
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two) {
      if (s_.compare(p, 2, op) == 0) {
        push(Tok::op, op, p);
        return p + 2;
      }
    }
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t j = p;
      const char32_t cp = utf8_next(s_, j);
      std::string ch;
      utf8_append(ch, cp);
      fail(fmt::format("unexpected char '{}'", ch), p);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(fmt::format("unexpected '{}'", c), p);
      if (balance.back() != c) fail(fmt::format("unexpected '{}', expected '{}'", c, balance.back()), p);
      balance.pop_back();
    }
    push(Tok::op, std::string(1, c), p);
    return p + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& opt) {
  // Newlines normalised (\r\n and \r become \n), one trailing newline dropped.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s), opt).run();
}

}  // namespace treespec::chat
