// JSON Schema `pattern` (an ECMAScript regular expression over the decoded string) as
// GBNF over the JSON text of the string's content. Supported: literals, escapes of
// punctuation, \d \w \s \D \W \S, \n \t \r \f \v \0 \xHH \uHHHH \u{H...}, classes with
// ranges and negation, '.', groups ( ), (?: ), (?<name> ), '|', * + ? {m} {m,} {m,n}
// (lazy forms too: same language), '^' at the start and '$' at the end of a top-level
// alternative. An alternative without '^' (or '$') may have anything before (or after)
// it, as a regex search does. Everything else (lookaround, backreferences, \b, \p{..},
// anchors elsewhere) is refused.
#include <fmt/format.h>

#include "grammar/json_schema_internal.h"

namespace treespec::grammar::js_detail {

namespace {

const JsSet kJsDigit = {{'0', '9'}};
const JsSet kJsWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const JsSet kJsSpace = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
// '.': anything but a line terminator.
const JsSet kJsDot = js_set_complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});

// A parsed piece of a sequence.
struct JsRxPiece {
  std::string gbnf;  // GBNF; a single symbol (literal, class, group) when atomic
  bool nullable = false;
  bool atomic = true;
  bool literal = false;  // one character: `text` holds its JSON spelling
  std::string text;
};

class JsRegexParser {
 public:
  JsRegexParser(std::vector<uint32_t> p, std::string_view src, const std::string& path, const std::string& char_rule)
      : p_(std::move(p)), src_(src), path_(path), any_(char_rule + "*") {}

  std::string top();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    js_fail(path_, fmt::format("'pattern' \"{}\": {} (at character {})", src_, what, i_ + 1));
  }
  bool eof() const { return i_ >= p_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0; }
  bool eat(uint32_t c) {
    if (eof() || p_[i_] != c) return false;
    ++i_;
    return true;
  }
  JsRxPiece alternation();
  // Pieces up to '|', ')' or the end; at top level '$' before those ends sets *end_anchor.
  std::vector<JsRxPiece> sequence(bool top, bool* end_anchor);
  JsRxPiece atom();
  JsRxPiece group();
  void quantify(JsRxPiece& piece);
  JsSet class_body();
  // After '\': a class escape into *set, or one character into *cp; `in_class` makes \b
  // a backspace.
  void escape(bool in_class, JsSet* set, uint32_t* cp);
  uint32_t hex(int n);
  uint64_t count();

  static JsRxPiece set_piece(const JsSet& s, const JsRegexParser& self);
  static JsRxPiece char_piece(uint32_t cp);
  static std::string join(const std::vector<JsRxPiece>& seq);

  std::vector<uint32_t> p_;
  std::string_view src_;
  const std::string& path_;
  std::string any_;
  size_t i_ = 0;
};

JsRxPiece JsRegexParser::char_piece(uint32_t cp) {
  JsRxPiece piece;
  piece.text = js_json_spelling(cp);
  piece.gbnf = js_literal(piece.text);
  piece.literal = true;
  return piece;
}

JsRxPiece JsRegexParser::set_piece(const JsSet& s, const JsRegexParser& self) {
  JsRxPiece piece;
  piece.gbnf = js_string_char_set(s);
  if (piece.gbnf.empty()) self.fail("a character class that matches no character");
  return piece;
}

// Consecutive single characters become one literal.
std::string JsRegexParser::join(const std::vector<JsRxPiece>& seq) {
  std::string out, run;
  auto add = [&out](const std::string& s) {
    if (!s.empty()) out += (out.empty() ? "" : " ") + s;
  };
  for (const JsRxPiece& piece : seq) {
    if (piece.literal) {
      run += piece.text;
      continue;
    }
    if (!run.empty()) add(js_literal(run));
    run.clear();
    add(piece.gbnf);
  }
  if (!run.empty()) add(js_literal(run));
  return out;
}

std::string JsRegexParser::top() {
  std::vector<std::string> alts;
  do {
    const bool start_anchor = eat('^');
    bool end_anchor = false;
    const std::string body = join(sequence(true, &end_anchor));
    std::string alt;
    if (!start_anchor) alt = any_;
    if (!body.empty()) alt += (alt.empty() ? "" : " ") + body;
    if (!end_anchor && !(alt == any_)) alt += (alt.empty() ? "" : " ") + any_;
    alts.push_back(alt);
  } while (eat('|'));
  if (!eof()) fail("')' without its '('");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
  return out + " )";
}

JsRxPiece JsRegexParser::alternation() {
  std::vector<std::vector<JsRxPiece>> alts;
  do {
    alts.push_back(sequence(false, nullptr));
  } while (eat('|'));
  JsRxPiece out;
  out.nullable = false;
  std::vector<std::string> texts;
  for (const auto& seq : alts) {
    bool nullable = true;
    for (const JsRxPiece& piece : seq) nullable = nullable && piece.nullable;
    out.nullable = out.nullable || nullable;
    texts.push_back(join(seq));
  }
  if (texts.size() == 1 && alts[0].size() == 1) return alts[0][0];  // (x) is x
  out.gbnf = "(";
  for (size_t k = 0; k < texts.size(); ++k) out.gbnf += (k ? " | " : " ") + texts[k];
  out.gbnf += " )";
  if (texts.size() == 1 && texts[0].empty()) out.gbnf.clear();
  return out;
}

std::vector<JsRxPiece> JsRegexParser::sequence(bool top, bool* end_anchor) {
  std::vector<JsRxPiece> seq;
  while (!eof() && peek() != '|' && peek() != ')') {
    if (peek() == '$') {
      if (top && (peek(1) == '|' || i_ + 1 == p_.size())) {
        ++i_;
        *end_anchor = true;
        break;
      }
      fail("'$' other than at the end of a top-level alternative");
    }
    if (peek() == '^') fail("'^' other than at the start of a top-level alternative");
    JsRxPiece piece = atom();
    quantify(piece);
    seq.push_back(std::move(piece));
  }
  return seq;
}

JsRxPiece JsRegexParser::group() {
  if (eat('?')) {
    if (eat(':')) {
      // non-capturing
    } else if (peek() == '<' && peek(1) != '=' && peek(1) != '!') {
      ++i_;
      while (!eof() && peek() != '>') ++i_;
      if (!eat('>')) fail("unterminated group name");
    } else if (peek() == '=' || peek() == '!' || peek() == '<') {
      fail("lookaround assertions are not supported");
    } else {
      fail("unsupported group syntax '(?'");
    }
  }
  JsRxPiece inner = alternation();
  if (!eat(')')) fail("'(' without its ')'");
  return inner;
}

JsRxPiece JsRegexParser::atom() {
  const uint32_t c = peek();
  ++i_;
  switch (c) {
    case '(': return group();
    case '[': return set_piece(class_body(), *this);
    case '.': return set_piece(kJsDot, *this);
    case '*':
    case '+':
    case '?': --i_; fail("a quantifier with nothing to repeat");
    case '{': --i_; fail("'{' that is not a repetition (write \\{ for the character)");
    case '\\': {
      JsSet set;
      uint32_t cp = 0;
      escape(false, &set, &cp);
      return set.empty() ? char_piece(cp) : set_piece(set, *this);
    }
    default: return char_piece(c);
  }
}

uint64_t JsRegexParser::count() {
  const size_t b = i_;
  uint64_t v = 0;
  while (!eof() && peek() >= '0' && peek() <= '9') {
    v = v * 10 + (peek() - '0');
    if (v > 1000000000) fail("a repetition count that is too large");
    ++i_;
  }
  if (i_ == b) fail("'{' that is not a repetition (write \\{ for the character)");
  return v;
}

void JsRegexParser::quantify(JsRxPiece& piece) {
  if (eof()) return;
  const uint32_t q = peek();
  uint64_t mn = 0, mx = 0;
  bool unbounded = false;
  if (q == '*' || q == '+' || q == '?') {
    ++i_;
    mn = q == '+' ? 1 : 0;
    mx = q == '?' ? 1 : 0;
    unbounded = q != '?';
  } else if (q == '{') {
    ++i_;
    mn = count();
    if (eat(',')) {
      if (peek() == '}') {
        unbounded = true;
      } else {
        mx = count();
      }
    } else {
      mx = mn;
    }
    if (!eat('}')) fail("'{' that is not a repetition (write \\{ for the character)");
    if (!unbounded && mx < mn) fail(fmt::format("repetition {{{},{}}} with max < min", mn, mx));
  } else {
    return;
  }
  eat('?');  // lazy: the same strings
  if (!eof() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{'))
    fail("a quantifier with nothing to repeat");
  if (mn > kJsMaxRepeat) fail(fmt::format("repetition count {} above the limit {}", mn, kJsMaxRepeat));
  if (!unbounded && mx > kJsMaxRepeat) mx = kJsMaxRepeat;  // fewer strings: still valid ones
  if (unbounded && piece.nullable) fail("an unbounded repetition of something that can be empty");
  if (piece.gbnf.empty() || (!unbounded && mx == 0)) {
    piece = JsRxPiece{"", true, true, false, ""};
    return;
  }
  std::string sym = piece.atomic ? piece.gbnf : "( " + piece.gbnf + " )";
  std::string suffix;
  if (unbounded) {
    suffix = mn == 0 ? "*" : mn == 1 ? "+" : fmt::format("{{{},}}", mn);
  } else if (mn == 0 && mx == 1) {
    suffix = "?";
  } else if (mn == mx) {
    suffix = mn == 1 ? "" : fmt::format("{{{}}}", mn);
  } else {
    suffix = fmt::format("{{{},{}}}", mn, mx);
  }
  piece.gbnf = sym + suffix;
  piece.nullable = piece.nullable || mn == 0;
  piece.literal = piece.literal && suffix.empty();
  piece.atomic = true;
}

uint32_t JsRegexParser::hex(int n) {
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) {
    const uint32_t c = peek();
    uint32_t d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else fail(fmt::format("expected {} hex digits", n));
    v = v * 16 + d;
    ++i_;
  }
  return v;
}

void JsRegexParser::escape(bool in_class, JsSet* set, uint32_t* cp) {
  if (eof()) fail("'\\' at the end");
  const uint32_t e = peek();
  ++i_;
  switch (e) {
    case 'd': *set = kJsDigit; return;
    case 'D': *set = js_set_complement(kJsDigit); return;
    case 'w': *set = kJsWord; return;
    case 'W': *set = js_set_complement(kJsWord); return;
    case 's': *set = kJsSpace; return;
    case 'S': *set = js_set_complement(kJsSpace); return;
    case 'n': *cp = '\n'; return;
    case 't': *cp = '\t'; return;
    case 'r': *cp = '\r'; return;
    case 'f': *cp = '\f'; return;
    case 'v': *cp = '\v'; return;
    case 'x': *cp = hex(2); return;
    case '0':
      if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
      *cp = 0;
      return;
    case 'u':
      if (eat('{')) {
        uint32_t v = 0;
        int n = 0;
        while (!eof() && peek() != '}' && n < 7) {
          v = v * 16 + hex(1);
          ++n;
        }
        if (!eat('}') || n == 0 || v > 0x10FFFF) fail("bad \\u{...} escape");
        *cp = v;
        return;
      }
      *cp = hex(4);
      if (*cp >= 0xD800 && *cp <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
        const size_t save = i_;
        i_ += 2;
        const uint32_t lo = hex(4);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
          *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
          return;
        }
        i_ = save;
      }
      if (*cp >= 0xD800 && *cp <= 0xDFFF) fail("a lone surrogate escape");
      return;
    case 'b':
      if (in_class) {
        *cp = '\b';
        return;
      }
      fail("word boundaries (\\b) are not supported");
    case 'B': fail("word boundaries (\\B) are not supported");
    case 'p':
    case 'P': fail("Unicode property escapes are not supported");
    case 'k': fail("named backreferences are not supported");
    case 'c': fail("control escapes (\\c) are not supported");
    default: break;
  }
  if (e >= '1' && e <= '9') fail("backreferences are not supported");
  if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
    fail(fmt::format("unknown escape '\\{}'", static_cast<char>(e)));
  *cp = e;  // an escaped punctuation character or any other character: itself
}

JsSet JsRegexParser::class_body() {
  const bool negated = eat('^');
  JsSet s;
  if (eat(']')) {
    if (!negated) fail("an empty character class []");
    return JsSet{{0, 0x10FFFF}};  // [^] is any character
  }
  while (!eof() && peek() != ']') {
    JsSet set;
    uint32_t lo = peek();
    ++i_;
    if (lo == '\\') escape(true, &set, &lo);
    if (!set.empty()) {
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) fail("a class escape as a range end");
      s.insert(s.end(), set.begin(), set.end());
      continue;
    }
    uint32_t hi = lo;
    if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
      ++i_;
      hi = peek();
      ++i_;
      if (hi == '\\') {
        escape(true, &set, &hi);
        if (!set.empty()) fail("a class escape as a range end");
      }
      if (hi < lo) fail("a reversed character range");
    }
    s.push_back({lo, hi});
  }
  if (!eat(']')) fail("'[' without its ']'");
  s = js_set_normalize(s);
  return negated ? js_set_complement(s) : s;
}

}  // namespace

std::string js_pattern_to_gbnf(std::string_view pattern, const std::string& path, const std::string& char_rule) {
  auto cps = js_decode_utf8(pattern);
  if (!cps) js_fail(path, "'pattern' is not valid UTF-8");
  return JsRegexParser(std::move(*cps), pattern, path, char_rule).top();
}

}  // namespace treespec::grammar::js_detail
