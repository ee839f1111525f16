// GBNF text -> compiled rules (grammar.h). A recursive-descent parser over bytes; rule
// bodies are alternatives of sequences; groups and repetitions become generated rules
// named "<rule>-<n>" so that error messages and dumps stay readable.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "grammar/grammar.h"
#include "treespec/status.h"

namespace treespec::grammar {

class GrammarBuilder {
 public:
  explicit GrammarBuilder(std::string_view src) : src_(src) {}

  std::shared_ptr<const Grammar> build(std::string_view root);

 private:
  using Seq = std::vector<Element>;

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw InvalidArgument(fmt::format("grammar: line {}, column {}: {}", line, col, what));
  }
  bool eof() const { return pos_ >= src_.size(); }
  char peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }
  // Spaces, tabs and comments; newlines too when newline_ok (inside groups, after ::= or |).
  void skip_space(bool newline_ok);
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string parse_name();
  uint32_t parse_char(bool in_class);  // one (possibly escaped) UTF-8 character
  uint32_t parse_hex(int n_digits);
  uint64_t parse_int();
  uint32_t rule_id(const std::string& name, size_t at);
  uint32_t new_rule(const std::string& base);
  void define(uint32_t id, std::vector<Seq> alts);
  std::vector<Seq> parse_alternates(const std::string& rule, bool nested);
  Seq parse_sequence(const std::string& rule, bool nested);
  // Replaces the last symbol (elements [sym_start, end) of seq) by its repetition.
  void repeat(const std::string& rule, Seq& seq, size_t sym_start, uint64_t min, uint64_t max, bool unbounded);
  void check_left_recursion() const;

  // Limits that keep a hostile grammar from exhausting memory or the matcher's stack.
  static constexpr size_t kMaxElements = size_t{1} << 20;
  static constexpr size_t kMaxLeftDepth = 2000;
  // Nested groups are parsed recursively: deeper nesting would overflow the stack (found by
  // fuzz_grammar: "((((..." 10k deep crashed; a server request's `grammar` field too).
  static constexpr int kMaxGroupDepth = 256;
  void count(size_t n) {
    n_elements_ += n;
    if (n_elements_ > kMaxElements)
      fail(pos_, fmt::format("the grammar expands to more than {} elements", kMaxElements));
  }

  std::string_view src_;
  size_t pos_ = 0;
  size_t n_elements_ = 0;
  int group_depth_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::map<std::string, int> n_generated_;
};

void GrammarBuilder::skip_space(bool newline_ok) {
  while (!eof()) {
    const char c = peek();
    if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
      ++pos_;
    } else if (c == '#') {
      while (!eof() && peek() != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::string GrammarBuilder::parse_name() {
  const size_t b = pos_;
  while (!eof() && is_name_char(peek())) ++pos_;
  if (pos_ == b)
    fail(b, eof() ? "expected a rule name, got the end of the grammar"
                  : fmt::format("expected a rule name, got '{}'", peek()));
  return std::string(src_.substr(b, pos_ - b));
}

uint32_t GrammarBuilder::parse_hex(int n_digits) {
  uint32_t v = 0;
  for (int i = 0; i < n_digits; ++i) {
    const char c = peek();
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else fail(pos_, fmt::format("expected {} hex digits in an escape", n_digits));
    v = v * 16 + static_cast<uint32_t>(d);
    ++pos_;
  }
  if (v > 0x10FFFF) fail(pos_, fmt::format("escape U+{:X} is beyond U+10FFFF", v));
  return v;
}

uint32_t GrammarBuilder::parse_char(bool in_class) {
  if (eof()) fail(pos_, "unexpected end of the grammar inside a literal");
  const auto b = static_cast<unsigned char>(peek());
  if (b == '\\') {
    ++pos_;
    const char e = peek();
    ++pos_;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': return '\\';
      case '"': return '"';
      case '[': return '[';
      case ']': return ']';
      case '-': return '-';
      case '^': return '^';
      case '/': return '/';
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default: fail(pos_ - 2, fmt::format("unknown escape '\\{}'", e == '\0' ? std::string("end") : std::string(1, e)));
    }
  }
  (void)in_class;
  // UTF-8: the source is text, a character is one code point.
  int n = 0;
  uint32_t cp = 0;
  if (b < 0x80) {
    cp = b;
  } else if ((b & 0xE0) == 0xC0) {
    cp = b & 0x1F;
    n = 1;
  } else if ((b & 0xF0) == 0xE0) {
    cp = b & 0x0F;
    n = 2;
  } else if ((b & 0xF8) == 0xF0) {
    cp = b & 0x07;
    n = 3;
  } else {
    fail(pos_, "invalid UTF-8 in the grammar");
  }
  const size_t at = pos_;
  ++pos_;
  for (int i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(peek());
    if ((c & 0xC0) != 0x80) fail(at, "invalid UTF-8 in the grammar");
    cp = (cp << 6) | (c & 0x3F);
    ++pos_;
  }
  return cp;
}

uint64_t GrammarBuilder::parse_int() {
  const size_t b = pos_;
  uint64_t v = 0;
  while (!eof() && peek() >= '0' && peek() <= '9') {
    v = v * 10 + static_cast<uint64_t>(peek() - '0');
    if (v > 100000) fail(b, "repetition count above 100000");
    ++pos_;
  }
  if (pos_ == b) fail(b, "expected a number in a repetition {m,n}");
  return v;
}

uint32_t GrammarBuilder::rule_id(const std::string& name, size_t at) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  ids_.emplace(name, id);
  names_.push_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  first_use_.push_back(at);
  return id;
}

uint32_t GrammarBuilder::new_rule(const std::string& base) {
  std::string name;
  do {
    name = fmt::format("{}-{}", base, ++n_generated_[base]);
  } while (ids_.count(name) != 0);
  const uint32_t id = rule_id(name, pos_);
  defined_[id] = true;
  return id;
}

void GrammarBuilder::define(uint32_t id, std::vector<Seq> alts) {
  rules_[id] = std::move(alts);
  defined_[id] = true;
}

GrammarBuilder::Seq GrammarBuilder::parse_sequence(const std::string& rule, bool nested) {
  Seq seq;
  size_t last_sym = seq.size();
  bool have_sym = false;
  while (!eof()) {
    const char c = peek();
    const size_t at = pos_;
    if (c == '"') {
      ++pos_;
      last_sym = seq.size();
      while (!eof() && peek() != '"') {
        if (peek() == '\n') fail(at, "unterminated literal (a newline before the closing '\"')");
        seq.push_back({Op::chr, parse_char(false)});
        count(1);
      }
      if (eof()) fail(at, "unterminated literal");
      ++pos_;
      have_sym = true;
    } else if (c == '[') {
      ++pos_;
      last_sym = seq.size();
      Op first = Op::chr;
      if (peek() == '^') {
        first = Op::chr_not;
        ++pos_;
      }
      bool any = false;
      while (!eof() && peek() != ']') {
        if (peek() == '\n') fail(at, "unterminated character class (a newline before ']')");
        const uint32_t lo = parse_char(true);
        seq.push_back({any ? Op::chr_alt : first, lo});
        any = true;
        if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
          ++pos_;
          const uint32_t hi = parse_char(true);
          if (hi < lo) fail(at, fmt::format("character range U+{:X}-U+{:X} is reversed", lo, hi));
          seq.push_back({Op::chr_upper, hi});
        }
      }
      if (eof()) fail(at, "unterminated character class");
      if (!any) fail(at, "empty character class []");
      ++pos_;
      have_sym = true;
    } else if (is_name_char(c)) {
      // A name followed by ::= starts the next rule: the sequence ends before it.
      const size_t save = pos_;
      const std::string name = parse_name();
      skip_space(false);
      if (peek() == ':' && peek(1) == ':' && peek(2) == '=') {
        if (nested) fail(save, fmt::format("rule '{}' defined inside a group (missing ')'?)", name));
        pos_ = save;
        return seq;
      }
      last_sym = seq.size();
      seq.push_back({Op::rule_ref, rule_id(name, save)});
      have_sym = true;
      skip_space(nested);
      continue;
    } else if (c == '(') {
      if (++group_depth_ > kMaxGroupDepth) fail(at, fmt::format("groups nest more than {} deep", kMaxGroupDepth));
      ++pos_;
      skip_space(true);
      std::vector<Seq> alts = parse_alternates(rule, true);
      if (peek() != ')') fail(at, "group '(' without its ')'");
      ++pos_;
      --group_depth_;
      const uint32_t id = new_rule(rule);
      define(id, std::move(alts));
      last_sym = seq.size();
      seq.push_back({Op::rule_ref, id});
      have_sym = true;
    } else if (c == '.') {
      ++pos_;
      last_sym = seq.size();
      seq.push_back({Op::any, 0});
      have_sym = true;
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (!have_sym) fail(at, fmt::format("'{}' without a symbol before it", c));
      ++pos_;
      uint64_t mn = 0, mx = 0;
      bool unbounded = false;
      if (c == '*') {
        unbounded = true;
      } else if (c == '+') {
        mn = 1;
        unbounded = true;
      } else if (c == '?') {
        mx = 1;
      } else {
        skip_space(false);
        mn = parse_int();
        skip_space(false);
        if (peek() == ',') {
          ++pos_;
          skip_space(false);
          if (peek() == '}') {
            unbounded = true;
          } else {
            mx = parse_int();
            if (mx < mn) fail(at, fmt::format("repetition {{{},{}}} has max < min", mn, mx));
          }
        } else {
          mx = mn;
        }
        skip_space(false);
        if (peek() != '}') fail(at, "repetition '{' without its '}'");
        ++pos_;
      }
      repeat(rule, seq, last_sym, mn, mx, unbounded);
      have_sym = false;  // "x**" is an error, as in llama.cpp
    } else {
      break;  // '|', ')', newline or something the caller reports
    }
    skip_space(nested);
  }
  return seq;
}

void GrammarBuilder::repeat(const std::string& rule, Seq& seq, size_t sym_start, uint64_t min, uint64_t max,
                            bool unbounded) {
  const Seq sym(seq.begin() + static_cast<std::ptrdiff_t>(sym_start), seq.end());
  // Before copying: {m,n} of a large symbol is checked against the limit up front.
  const uint64_t copies = unbounded ? min + 1 : std::max(min, max);
  if (copies > kMaxElements || sym.size() * copies > kMaxElements) {
    fail(pos_, fmt::format("the grammar expands to more than {} elements", kMaxElements));
  }
  count(sym.size() * copies + 2 * copies);
  seq.resize(sym_start);
  for (uint64_t i = 0; i < min; ++i) seq.insert(seq.end(), sym.begin(), sym.end());
  if (unbounded) {
    // r ::= sym r |
    const uint32_t r = new_rule(rule);
    Seq body = sym;
    body.push_back({Op::rule_ref, r});
    define(r, {body, Seq{}});
    seq.push_back({Op::rule_ref, r});
    return;
  }
  if (max == min) return;
  // Optional tail of max - min symbols, nested: t1 ::= sym t2 | ; ... ; tk ::= sym |
  uint32_t next = UINT32_MAX;
  for (uint64_t i = 0; i < max - min; ++i) {
    const uint32_t r = new_rule(rule);
    Seq body = sym;
    if (next != UINT32_MAX) body.push_back({Op::rule_ref, next});
    define(r, {body, Seq{}});
    next = r;
  }
  seq.push_back({Op::rule_ref, next});
}

std::vector<GrammarBuilder::Seq> GrammarBuilder::parse_alternates(const std::string& rule, bool nested) {
  std::vector<Seq> alts;
  alts.push_back(parse_sequence(rule, nested));
  while (peek() == '|') {
    ++pos_;
    skip_space(true);
    alts.push_back(parse_sequence(rule, nested));
  }
  return alts;
}

std::shared_ptr<const Grammar> GrammarBuilder::build(std::string_view root) {
  skip_space(true);
  if (eof()) fail(pos_, "the grammar is empty (expected at least 'root ::= ...')");
  while (!eof()) {
    const size_t at = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (!(peek() == ':' && peek(1) == ':' && peek(2) == '='))
      fail(pos_, fmt::format("expected '::=' after rule name '{}'", name));
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, at);
    if (defined_[id] && !rules_[id].empty()) fail(at, fmt::format("rule '{}' is defined twice", name));
    std::vector<Seq> alts = parse_alternates(name, false);
    define(id, std::move(alts));
    if (!eof() && peek() != '\n') {
      fail(pos_, peek() == ')' ? std::string("')' without its '('") : fmt::format("unexpected '{}'", peek()));
    }
    skip_space(true);
  }
  for (uint32_t r = 0; r < names_.size(); ++r) {
    if (!defined_[r]) fail(first_use_[r], fmt::format("rule '{}' is used but never defined", names_[r]));
  }
  auto it = ids_.find(std::string(root));
  if (it == ids_.end())
    throw InvalidArgument(fmt::format("grammar: no root rule '{}' (define '{} ::= ...')", root, root));
  check_left_recursion();

  auto g = std::make_shared<Grammar>();
  for (uint32_t r = 0; r < names_.size(); ++r) {
    g->rule_start_.push_back(static_cast<uint32_t>(g->elements_.size()));
    const auto& alts = rules_[r];
    for (size_t a = 0; a < alts.size(); ++a) {
      if (a > 0) g->elements_.push_back({Op::alt, 0});
      g->elements_.insert(g->elements_.end(), alts[a].begin(), alts[a].end());
    }
    g->elements_.push_back({Op::end, 0});
  }
  g->names_ = names_;
  g->root_ = it->second;
  return g;
}

// A rule that can reach itself before consuming a character would make the matcher
// expand forever: refused, as llama.cpp does.
void GrammarBuilder::check_left_recursion() const {
  const size_t n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : rules_[r]) {
        const bool all = std::all_of(s.begin(), s.end(),
                                     [&](const Element& e) { return e.op == Op::rule_ref && nullable[e.value]; });
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Edges r -> s when s can be the first thing r expands to.
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& s : rules_[r]) {
      for (const Element& e : s) {
        if (e.op != Op::rule_ref) break;
        left[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  std::vector<uint8_t> mark(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<size_t> depth(n, 0);  // longest chain of left references from the rule
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t start = 0; start < n; ++start) {
    if (mark[start]) continue;
    stack.push_back({start, 0});
    mark[start] = 1;
    while (!stack.empty()) {
      auto& [r, k] = stack.back();
      if (k < left[r].size()) {
        const uint32_t s = left[r][k++];
        if (mark[s] == 1) {
          throw InvalidArgument(
              fmt::format("grammar: rule '{}' is left-recursive (it can reach itself before any character)",
                          names_[s]));
        }
        if (mark[s] == 0) {
          mark[s] = 1;
          stack.push_back({s, 0});
        }
      } else {
        mark[r] = 2;
        size_t d = 1;
        for (uint32_t s : left[r]) d = std::max(d, depth[s] + 1);
        depth[r] = d;
        if (d > kMaxLeftDepth) {
          throw InvalidArgument(fmt::format("grammar: rule '{}' nests more than {} rule references before a character",
                                            names_[r], kMaxLeftDepth));
        }
        stack.pop_back();
      }
    }
  }
}

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root) {
  return GrammarBuilder(gbnf).build(root);
}

}  // namespace treespec::grammar
