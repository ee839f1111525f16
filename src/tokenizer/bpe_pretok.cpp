// Hand-written pre-tokenizer regexes; see bpe_pretok.h. Each split function follows its
// regex alternative by alternative (leftmost alternative wins, quantifiers greedy), on
// code points classified once. Positions at or past the end of the range being split
// read as kEnd / kNoCp, which no alternative matches.
#include "tokenizer/bpe_pretok.h"

#include <fmt/format.h>

#include <utility>

#include "tokenizer/unicode.h"
#include "treespec/status.h"

namespace treespec::tokenizer {

namespace {

using Range = std::pair<size_t, size_t>;  // code point indices [first, second)
using Ranges = std::vector<Range>;

constexpr uint8_t kEnd = 0x80;
constexpr uint32_t kNoCp = 0xFFFFFFFFu;

bool is_letter(uint8_t f) { return f == unicode::kLetter; }
bool is_number(uint8_t f) { return f == unicode::kNumber; }
bool is_space(uint8_t f) { return f == unicode::kWhitespace; }
bool is_other(uint8_t f) { return f == unicode::kOther || f == unicode::kPunct; }  // [^\s\p{L}\p{N}]
// The three runs gpt2 distinguishes: letters, numbers, others (punctuation is other).
uint8_t gpt2_kind(uint8_t f) { return f == unicode::kPunct ? uint8_t{unicode::kOther} : f; }
bool is_cr_lf(uint32_t c) { return c == '\r' || c == '\n'; }
uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

struct Classified {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
};

// One range being split: accessors clamp to the range and emit() appends the word that
// ends at `end` (empty words are skipped).
class Cursor {
 public:
  Cursor(const Classified& t, Range r, Ranges& out) : t_(t), end_(r.second), prev_(r.first), out_(out) {}
  uint32_t cp(size_t i) const { return i < end_ ? t_.cp[i] : kNoCp; }
  uint8_t cls(size_t i) const { return i < end_ ? t_.cls[i] : kEnd; }
  size_t end() const { return end_; }
  void emit(size_t end) {
    if (end > prev_) out_.emplace_back(prev_, end);
    prev_ = end;
  }

 private:
  const Classified& t_;
  size_t end_;
  size_t prev_;
  Ranges& out_;
};

// 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for llama3/qwen2). Returns the match length.
size_t contraction(const Cursor& c, size_t pos, bool ignore_case) {
  if (c.cp(pos) != '\'') return 0;
  auto low = [&](size_t i) { return ignore_case ? ascii_lower(c.cp(i)) : c.cp(i); };
  const uint32_t n1 = low(pos + 1);
  if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
  const uint32_t n2 = low(pos + 2);
  if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
  return 0;
}

// Whitespace run starting at pos: its length, and the end of its last \r or \n (0: none).
size_t space_run(const Cursor& c, size_t pos, size_t* last_cr_lf_end) {
  size_t n = 0;
  if (last_cr_lf_end) *last_cr_lf_end = 0;
  while (is_space(c.cls(pos + n))) {
    if (last_cr_lf_end && is_cr_lf(c.cp(pos + n))) *last_cr_lf_end = pos + n + 1;
    ++n;
  }
  return n;
}

// The tail the llama3 and gpt4o regexes share, at pos (no earlier alternative matched):
//  ?[^\s\p{L}\p{N}]+[\r\n]*  (with '/' among the trailing characters when `slash`) |
// \s*[\r\n]+ | \s+(?!\S) | \s+. Returns the end of the match (at least pos + 1).
size_t other_or_space_end(const Cursor& c, size_t pos, bool slash) {
  const uint32_t ch = c.cp(pos);
  const uint8_t f2 = ch == ' ' ? c.cls(pos + 1) : c.cls(pos);
  if (is_other(f2)) {
    pos += ch == ' ';
    while (is_other(c.cls(pos))) ++pos;
    while (is_cr_lf(c.cp(pos)) || (slash && c.cp(pos) == '/')) ++pos;
    return pos;
  }
  size_t last_cr_lf_end = 0;
  const size_t ws = space_run(c, pos, &last_cr_lf_end);
  if (last_cr_lf_end > 0) return last_cr_lf_end;          // \s*[\r\n]+: up to the last line break
  if (ws > 1 && pos + ws < c.end()) return pos + ws - 1;  // \s+(?!\S)
  return pos + (ws > 0 ? ws : 1);                         // \s+ (or a guard: every class matches above)
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Classified& t, Range r, Ranges& out) {
  Cursor c(t, r, out);
  for (size_t pos = r.first; pos < r.second;) {
    if (const size_t n = contraction(c, pos, false)) {
      c.emit(pos += n);
      continue;
    }
    const uint32_t ch = c.cp(pos);
    const uint8_t f2 = ch == ' ' ? c.cls(pos + 1) : c.cls(pos);
    if (is_letter(f2) || is_number(f2) || is_other(f2)) {  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
      const uint8_t run = gpt2_kind(f2);
      pos += ch == ' ';
      while (gpt2_kind(c.cls(pos)) == run) ++pos;
      c.emit(pos);
      continue;
    }
    const size_t ws = space_run(c, pos, nullptr);
    if (ws > 1 && pos + ws < c.end()) {  // \s+(?!\S): leave the last space to the next word
      c.emit(pos += ws - 1);
      continue;
    }
    if (ws > 0) {
      c.emit(pos += ws);
      continue;
    }
    c.emit(++pos);  // unreachable for in-range text (every class matches above); kept as a guard
  }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Classified& t, Range r, Ranges& out, size_t max_digits) {
  Cursor c(t, r, out);
  for (size_t pos = r.first; pos < r.second;) {
    if (const size_t n = contraction(c, pos, true)) {
      c.emit(pos += n);
      continue;
    }
    const uint32_t ch = c.cp(pos);
    const uint8_t f = c.cls(pos);
    if (!is_cr_lf(ch) && !is_number(f) && (is_letter(f) || is_letter(c.cls(pos + 1)))) {
      ++pos;
      while (is_letter(c.cls(pos))) ++pos;
      c.emit(pos);
      continue;
    }
    if (is_number(f)) {
      size_t run = 0;
      while (is_number(c.cls(pos))) {
        ++pos;
        if (++run == max_digits) {
          c.emit(pos);
          run = 0;
        }
      }
      c.emit(pos);
      continue;
    }
    c.emit(pos = other_or_space_end(c, pos, false));
  }
}

// The o200k split (PreTokenizer::gpt4o, bpe_pretok.h).
void split_gpt4o(const Classified& t, Range r, Ranges& out) {
  Cursor c(t, r, out);
  auto upper = [&](size_t i) { return is_letter(c.cls(i)) && !(c.cp(i) >= 'a' && c.cp(i) <= 'z'); };
  auto lower = [&](size_t i) { return is_letter(c.cls(i)) && !(c.cp(i) >= 'A' && c.cp(i) <= 'Z'); };
  constexpr size_t kNone = static_cast<size_t>(-1);
  // End of U*W+C? (first) or U+W*C? (second) from s, or kNone: U* greedy, backing off
  // until a W follows (most non-ASCII letters are both), then W greedy.
  auto letters = [&](size_t s, bool first) {
    size_t k = s;
    while (upper(k)) ++k;
    size_t e = kNone;
    if (first) {
      for (size_t j = k + 1; j-- > s;) {
        if (lower(j)) {
          e = j;
          break;
        }
      }
      if (e == kNone) return kNone;
    } else {
      if (k == s) return kNone;
      e = k;
    }
    while (lower(e)) ++e;
    return e + contraction(c, e, true);
  };
  for (size_t pos = r.first; pos < r.second;) {
    const uint32_t ch = c.cp(pos);
    const uint8_t f = c.cls(pos);
    const bool prefix = !is_cr_lf(ch) && !is_letter(f) && !is_number(f);
    size_t e = kNone;
    for (const bool first : {true, false}) {
      if (prefix) e = letters(pos + 1, first);
      if (e == kNone) e = letters(pos, first);
      if (e != kNone) break;
    }
    if (e != kNone) {
      c.emit(pos = e);
      continue;
    }
    if (is_number(f)) {
      for (size_t run = 0; run < 3 && is_number(c.cls(pos)); ++run) ++pos;
      c.emit(pos);
      continue;
    }
    c.emit(pos = other_or_space_end(c, pos, true));
  }
}

// A regex whose matches are maximal runs of code points satisfying `pred` (X+): the
// runs and the gaps between them are words.
template <class Pred>
void split_runs(const Classified& t, Range r, Ranges& out, Pred pred) {
  Cursor c(t, r, out);
  for (size_t pos = r.first; pos < r.second;) {
    const bool in = pred(t.cp[pos], t.cls[pos]);
    while (pos < r.second && pred(t.cp[pos], t.cls[pos]) == in) ++pos;
    c.emit(pos);
  }
}

// \p{N}: every number code point is a word of its own; the gaps are words.
void split_each_number(const Classified& t, Range r, Ranges& out) {
  Cursor c(t, r, out);
  for (size_t pos = r.first; pos < r.second;) {
    if (is_number(t.cls[pos])) {
      c.emit(pos);
      c.emit(++pos);
    } else {
      ++pos;
    }
  }
  c.emit(r.second);
}

// [0-9][0-9][0-9]: leftmost non-overlapping triples of ASCII digits; the gaps are words.
void split_digit_triples(const Classified& t, Range r, Ranges& out) {
  Cursor c(t, r, out);
  auto digit = [&](size_t i) { return c.cp(i) >= '0' && c.cp(i) <= '9'; };
  for (size_t pos = r.first; pos < r.second;) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      c.emit(pos);
      c.emit(pos += 3);
    } else {
      ++pos;
    }
  }
  c.emit(r.second);
}

template <class Split>
Ranges split_each(const Ranges& in, Split split) {
  Ranges out;
  out.reserve(in.size());
  for (const Range& r : in) split(r, out);
  return out;
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view pre) {
  if (pre.empty() || pre == "default") return PreTokenizer::default_chain;
  if (pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "roberta-bpe") return PreTokenizer::gpt2;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreTokenizer::llama3;
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreTokenizer::qwen2;
  if (pre == "smollm") return PreTokenizer::smollm;
  if (pre == "gpt-4o" || pre == "llama4") return PreTokenizer::gpt4o;
  throw Unsupported(fmt::format(
      "BPE pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported (supported: default, gpt-2, llama-bpe, qwen2, "
      "smollm, gpt-4o and their aliases gpt2, phi-2, roberta-bpe, llama3, llama-v3, deepseek-r1-qwen, llama4)",
      pre));
}

const char* pre_tokenizer_name(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::default_chain: return "default";
    case PreTokenizer::gpt2: return "gpt-2";
    case PreTokenizer::llama3: return "llama-bpe";
    case PreTokenizer::qwen2: return "qwen2";
    case PreTokenizer::smollm: return "smollm";
    case PreTokenizer::gpt4o: return "gpt-4o";
  }
  return "?";
}

void pre_tokenize(PreTokenizer p, std::string_view text, std::vector<std::string_view>& words) {
  if (text.empty()) return;
  const unicode::CodePoints cps = unicode::decode_utf8(text);
  Classified t;
  t.cp = cps.cp;
  t.cls.resize(t.cp.size());
  for (size_t i = 0; i < t.cp.size(); ++i) t.cls[i] = unicode::classify(t.cp[i]);

  Ranges ranges{{0, t.cp.size()}};
  auto gpt2 = [&](Range r, Ranges& out) { split_gpt2(t, r, out); };
  switch (p) {
    case PreTokenizer::default_chain: {
      ranges = split_each(ranges, [&](Range r, Ranges& out) {
        split_runs(t, r, out, [](uint32_t cp, uint8_t f) {
          return f == unicode::kPunct || cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' ||
                 cp == '~' || cp == '|';
        });
      });
      ranges = split_each(ranges, gpt2);
      ranges = split_each(ranges, [&](Range r, Ranges& out) {
        split_runs(t, r, out, [](uint32_t, uint8_t f) { return is_number(f); });
      });
      ranges = split_each(ranges, [&](Range r, Ranges& out) { split_digit_triples(t, r, out); });
      break;
    }
    case PreTokenizer::gpt2: ranges = split_each(ranges, gpt2); break;
    case PreTokenizer::llama3:
      ranges = split_each(ranges, [&](Range r, Ranges& out) { split_llama3(t, r, out, 3); });
      break;
    case PreTokenizer::qwen2:
      ranges = split_each(ranges, [&](Range r, Ranges& out) { split_llama3(t, r, out, 1); });
      break;
    case PreTokenizer::smollm:
      ranges = split_each(ranges, [&](Range r, Ranges& out) { split_each_number(t, r, out); });
      ranges = split_each(ranges, gpt2);
      break;
    case PreTokenizer::gpt4o: ranges = split_each(ranges, [&](Range r, Ranges& out) { split_gpt4o(t, r, out); }); break;
  }
  for (const Range& r : ranges) {
    const size_t b = cps.offsets[r.first];
    words.push_back(text.substr(b, cps.offsets[r.second] - b));
  }
}

}  // namespace treespec::tokenizer
