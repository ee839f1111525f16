// The GBNF matcher: a set of parse stacks advanced one code point at a time (grammar.h).
#include "grammar/grammar.h"

#include <algorithm>

namespace treespec::grammar {

using Stack = std::vector<uint32_t>;

struct StateOps {
  static bool ends_seq(const Element& e) { return e.op == Op::end || e.op == Op::alt; }

  static void add_unique(std::vector<Stack>& out, Stack s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  }

  // Expands rule references at the top until every stack's top is a character element
  // (or the stack is empty: the sentence may end there).
  static void expand(const Grammar& g, Stack stack, std::vector<Stack>& out) {
    const auto& el = g.elements();
    if (stack.empty() || el[stack.back()].op != Op::rule_ref) {
      add_unique(out, std::move(stack));
      return;
    }
    const uint32_t p = stack.back();
    stack.pop_back();
    const bool has_next = !ends_seq(el[p + 1]);
    uint32_t a = g.rule_start(el[p].value);
    for (;;) {
      Stack s = stack;
      if (has_next) s.push_back(p + 1);
      if (!ends_seq(el[a])) s.push_back(a);
      expand(g, std::move(s), out);
      while (!ends_seq(el[a])) ++a;
      if (el[a].op == Op::end) break;
      ++a;
    }
  }

  // Calls f(lo, hi) for every range of the (non-'.') class at p (one character is
  // [c, c]); returns the element after the class.
  template <class F>
  static uint32_t class_ranges(const std::vector<Element>& el, uint32_t p, F&& f) {
    uint32_t i = p;
    do {
      const bool range = el[i + 1].op == Op::chr_upper;
      f(el[i].value, range ? el[i + 1].value : el[i].value);
      i += range ? 2 : 1;
    } while (el[i].op == Op::chr_alt);
    return i;
  }

  // Whether the class at p contains cp; *after = the element after the class.
  static bool match_char(const std::vector<Element>& el, uint32_t p, uint32_t cp, uint32_t* after) {
    if (el[p].op == Op::any) {
      *after = p + 1;
      return true;
    }
    bool found = false;
    *after = class_ranges(el, p, [&](uint32_t lo, uint32_t hi) { found = found || (lo <= cp && cp <= hi); });
    return found != (el[p].op == Op::chr_not);
  }

  // Whether some code point in [lo, hi] (the characters an incomplete UTF-8 sequence can
  // still become) is in the class at p.
  static bool match_range(const std::vector<Element>& el, uint32_t p, uint32_t lo, uint32_t hi) {
    if (el[p].op == Op::any) return true;
    bool meets = false, covers = false;  // some range overlaps [lo, hi]; one holds all of it
    class_ranges(el, p, [&](uint32_t a, uint32_t b) {
      meets = meets || (a <= hi && lo <= b);
      covers = covers || (a <= lo && hi <= b);
    });
    return el[p].op == Op::chr_not ? !covers : meets;
  }

  // The smallest code point an n-byte UTF-8 sequence may encode (shorter ones are overlong).
  static uint32_t min_code_point(int n) { return n == 2 ? 0x80u : n == 3 ? 0x800u : n == 4 ? 0x10000u : 0u; }

  static void accept_code_point(State& s, uint32_t cp) {
    const auto& el = s.grammar_->elements();
    std::vector<Stack> next;
    for (const Stack& st : s.stacks_) {
      if (st.empty()) continue;
      uint32_t after = 0;
      if (!match_char(el, st.back(), cp, &after)) continue;
      Stack n(st.begin(), st.end() - 1);
      if (!ends_seq(el[after])) n.push_back(after);
      expand(*s.grammar_, std::move(n), next);
    }
    s.stacks_ = std::move(next);
  }

  // After the bytes of an incomplete character: keep the stacks that can still take it.
  static void filter_partial(State& s) {
    const auto& el = s.grammar_->elements();
    const uint32_t shift = 6u * s.partial_left_;
    uint32_t lo = s.partial_ << shift;
    const uint32_t hi = lo | ((1u << shift) - 1u);
    lo = std::max(lo, min_code_point(s.partial_len_ + s.partial_left_));
    if (lo > hi || lo > 0x10FFFF) {
      s.stacks_.clear();
      return;
    }
    std::vector<Stack> keep;
    for (Stack& st : s.stacks_) {
      if (!st.empty() && match_range(el, st.back(), lo, std::min(hi, 0x10FFFFu))) keep.push_back(std::move(st));
    }
    s.stacks_ = std::move(keep);
  }
};

State State::initial(std::shared_ptr<const Grammar> g) {
  State s;
  s.grammar_ = std::move(g);
  const Grammar& gr = *s.grammar_;
  s.stacks_.clear();
  const auto& el = gr.elements();
  uint32_t a = gr.rule_start(gr.root());
  for (;;) {
    Stack st;
    if (!StateOps::ends_seq(el[a])) st.push_back(a);
    StateOps::expand(gr, std::move(st), s.stacks_);
    while (!StateOps::ends_seq(el[a])) ++a;
    if (el[a].op == Op::end) break;
    ++a;
  }
  return s;
}

State State::advance(std::string_view bytes) const {
  State s = *this;
  for (const char ch : bytes) {
    if (s.dead()) return s;
    const auto b = static_cast<uint8_t>(ch);
    if (s.partial_left_ == 0) {
      if (b < 0x80) {
        StateOps::accept_code_point(s, b);
        continue;
      }
      if ((b & 0xE0) == 0xC0) {
        s.partial_ = b & 0x1Fu;
        s.partial_left_ = 1;
      } else if ((b & 0xF0) == 0xE0) {
        s.partial_ = b & 0x0Fu;
        s.partial_left_ = 2;
      } else if ((b & 0xF8) == 0xF0 && b <= 0xF4) {
        s.partial_ = b & 0x07u;
        s.partial_left_ = 3;
      } else {
        s.stacks_.clear();  // not a UTF-8 lead byte
        return s;
      }
      s.partial_len_ = 1;
      continue;
    }
    if ((b & 0xC0) != 0x80) {
      s.stacks_.clear();  // a lead byte where a continuation byte belongs
      return s;
    }
    s.partial_ = (s.partial_ << 6) | (b & 0x3Fu);
    --s.partial_left_;
    ++s.partial_len_;
    if (s.partial_left_ == 0) {
      const uint32_t cp = s.partial_;
      const int n = s.partial_len_;
      s.partial_ = 0;
      s.partial_len_ = 0;
      if (cp < StateOps::min_code_point(n) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        s.stacks_.clear();
        return s;
      }
      StateOps::accept_code_point(s, cp);
    }
  }
  if (!s.dead() && s.partial_left_ > 0) StateOps::filter_partial(s);
  return s;
}

bool State::can_end() const {
  if (dead() || partial_left_ > 0) return false;
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool State::must_end() const { return can_end() && stacks_.size() == 1; }

bool matches(std::shared_ptr<const Grammar> g, std::string_view text) {
  return State::initial(std::move(g)).advance(text).can_end();
}

}  // namespace treespec::grammar
