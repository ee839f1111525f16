// Constrained output: GBNF grammars (llama.cpp's syntax, docs/grammar.md) as a pushdown
// matcher over Unicode code points, and the per-token mask the engine applies to every
// tree row (sampling and verification) so that output under a grammar, with or without
// speculation, is what plain decoding under the same grammar gives.
//
// Grammar::parse compiles GBNF into flat rules (repetitions and groups become generated
// rules). A State is the set of parse stacks reachable after the bytes accepted so far
// plus an incomplete UTF-8 sequence; advancing it never mutates the Grammar, so one
// Grammar serves every sequence and every tree node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::grammar {

// One element of a compiled rule (llama.cpp's GBNF element model).
enum class Op : uint8_t {
  end,        // end of a rule
  alt,        // start of another alternative of the same rule
  rule_ref,   // value = rule index
  chr,        // value = code point; starts a character class
  chr_not,    // value = code point; starts a negated class
  chr_upper,  // value = upper bound of a range started by the previous chr/chr_alt
  chr_alt,    // value = another code point of the current class
  any,        // '.': any code point
};
struct Element {
  Op op;
  uint32_t value;
};

class Grammar {
 public:
  // Throws InvalidArgument "grammar: line L, column C: ..." naming the problem (syntax,
  // undefined rule, missing root, left recursion, empty grammar).
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root");

  const std::vector<Element>& elements() const { return elements_; }
  // Index into elements() of the first element of rule r.
  uint32_t rule_start(uint32_t r) const { return rule_start_[r]; }
  uint32_t n_rules() const { return static_cast<uint32_t>(rule_start_.size()); }
  uint32_t root() const { return root_; }
  const std::string& rule_name(uint32_t r) const { return names_[r]; }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<uint32_t> rule_start_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

// Matcher state after some prefix of the output.
class State {
 public:
  State() = default;  // dead
  static State initial(std::shared_ptr<const Grammar> g);

  // The state after `bytes` (UTF-8, possibly ending or starting inside a character);
  // dead() when the grammar cannot continue that way.
  State advance(std::string_view bytes) const;
  bool dead() const { return !grammar_ || stacks_.empty(); }
  // The output so far is a complete sentence of the grammar (end of generation allowed).
  bool can_end() const;
  // No character can follow (only the end of generation is allowed).
  bool must_end() const;
  const Grammar* grammar() const { return grammar_.get(); }

 private:
  friend struct StateOps;
  std::shared_ptr<const Grammar> grammar_;
  std::vector<std::vector<uint32_t>> stacks_;  // element indices; top = back(), each top a character element
  uint32_t partial_ = 0;                       // code point bits of an incomplete UTF-8 sequence
  uint8_t partial_left_ = 0;                   // continuation bytes still expected (0 = none)
  uint8_t partial_len_ = 0;                    // bytes of it seen
};

// True iff the whole of `text` is a sentence of the grammar.
bool matches(std::shared_ptr<const Grammar> g, std::string_view text);

}  // namespace treespec::grammar
