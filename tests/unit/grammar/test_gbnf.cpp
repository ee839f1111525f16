// GBNF parsing and matching (src/grammar): llama.cpp's syntax, errors that name the
// problem, and the token mask over a vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "treespec/status.h"

namespace treespec::grammar {
namespace {

std::shared_ptr<const Grammar> G(const char* src) { return Grammar::parse(src); }

std::string parse_error(const char* src) {
  try {
    Grammar::parse(src);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

// fuzz_grammar finding: groups nested 10k deep overflowed the parser's stack (a crash
// of the server through a request's `grammar`). Seed: corpus/grammar/regress_deep_groups.
TEST(Gbnf, DeeplyNestedGroupsAreRefusedNotAStackOverflow) {
  const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')') + "\n";
  const std::string err = parse_error(deep.c_str());
  EXPECT_NE(err.find("groups nest more than 256 deep"), std::string::npos) << err;
  const std::string ok = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')') + "\n";
  EXPECT_TRUE(matches(Grammar::parse(ok), "a"));
}

TEST(Gbnf, LiteralsAlternativesAndGroups) {
  auto g = G(R"(root ::= "yes" | "no" | ("may" "be"))");
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_TRUE(matches(g, "maybe"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_FALSE(matches(g, "yess"));
  EXPECT_FALSE(matches(g, ""));
}

TEST(Gbnf, CharacterClassesRangesNegationAndAny) {
  auto g = G(R"(root ::= [a-c0-9_] [^"\\\n] .)");
  EXPECT_TRUE(matches(g, "a!x"));
  EXPECT_TRUE(matches(g, "_zé"));
  EXPECT_TRUE(matches(g, "9é\xF0\x9F\x98\x80"));  // U+1F600 as the '.'
  EXPECT_FALSE(matches(g, "d!x"));
  EXPECT_FALSE(matches(g, "a\"x"));
  EXPECT_FALSE(matches(g, "a\\x"));
  EXPECT_FALSE(matches(g, "a\nx"));
}

TEST(Gbnf, RepetitionOperators) {
  auto star = G(R"(root ::= "a" "b"* "c")");
  EXPECT_TRUE(matches(star, "ac"));
  EXPECT_TRUE(matches(star, "abbbbc"));
  EXPECT_FALSE(matches(star, "abbb"));
  auto plus = G(R"(root ::= [0-9]+)");
  EXPECT_TRUE(matches(plus, "0123"));
  EXPECT_FALSE(matches(plus, ""));
  auto opt = G(R"(root ::= "-"? [0-9])");
  EXPECT_TRUE(matches(opt, "-1"));
  EXPECT_TRUE(matches(opt, "1"));
  EXPECT_FALSE(matches(opt, "--1"));
  auto range = G(R"(root ::= [a-z]{2,4} "!" [0-9]{3} ("x"){1,})");
  EXPECT_TRUE(matches(range, "ab!123x"));
  EXPECT_TRUE(matches(range, "abcd!123xxx"));
  EXPECT_FALSE(matches(range, "a!123x"));
  EXPECT_FALSE(matches(range, "abcde!123x"));
  EXPECT_FALSE(matches(range, "ab!12x"));
  EXPECT_FALSE(matches(range, "ab!123"));
  auto zero = G(R"(root ::= "a"{0} "b")");
  EXPECT_TRUE(matches(zero, "b"));
}

TEST(Gbnf, EscapesInLiteralsAndClasses) {
  auto g = G(R"(root ::= "\"\\\n\t\x41\u00e9\U0001F600" [\x30-\x39])");
  EXPECT_TRUE(matches(g,
                      "\"\\\n\tAé\xF0\x9F\x98\x80"
                      "5"));
  EXPECT_FALSE(matches(g,
                       "\"\\\n\tAe\xF0\x9F\x98\x80"
                       "5"));
}

TEST(Gbnf, MultiLineRulesCommentsAndRecursion) {
  // llama.cpp's json.gbnf, shortened: newlines inside groups and after ::= / |.
  auto g = G(R"(# a JSON-ish value
root   ::= value
value  ::= object | array | "true" | "false" | "null" | number   # comment
object ::=
  "{" ws (
    string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\"" ws
number ::= "-"? [0-9]+ ws
ws ::= [ \t\n]*
)");
  EXPECT_TRUE(matches(g, R"({"a": [1, -2, {"b": null}], "c\"": true})"));
  EXPECT_TRUE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, R"({"a" 1})"));
  EXPECT_FALSE(matches(g, R"([1,])"));
  EXPECT_FALSE(matches(g, R"({"a": tru})"));
}

TEST(Gbnf, ErrorsNameTheProblemAndWhere) {
  EXPECT_NE(parse_error("").find("empty"), std::string::npos);
  EXPECT_NE(parse_error("root ::= foo").find("rule 'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(parse_error("start ::= \"a\"").find("no root rule 'root'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"abc").find("line 1, column 10: unterminated literal"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [a-z").find("unterminated character class"), std::string::npos);
  EXPECT_NE(parse_error("root ::= (\"a\"").find("without its ')'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\")").find("')' without its '('"), std::string::npos);
  EXPECT_NE(parse_error("root ::= *").find("'*' without a symbol"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"{3,1}").find("max < min"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [z-a]").find("reversed"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"\\q\"").find("unknown escape '\\q'"), std::string::npos);
  EXPECT_NE(parse_error("root \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"\nroot ::= \"b\"").find("line 2, column 1: rule 'root' is defined twice"),
            std::string::npos);
  EXPECT_NE(parse_error("root ::= x \"a\"\nx ::= y | \"b\"\ny ::= x \"c\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(parse_error("root ::= e root\ne ::= \"x\"?").find("left-recursive"), std::string::npos);
  // Right recursion is fine.
  EXPECT_TRUE(matches(G("root ::= \"a\" root | \"b\""), "aaab"));
}

TEST(Gbnf, HostileSizesAreRefusedNotExhausting) {
  EXPECT_NE(parse_error(R"(root ::= "abcdefghijk"{100000})").find("more than 1048576 elements"), std::string::npos);
  EXPECT_NE(parse_error(R"(root ::= "a"{100001})").find("above 100000"), std::string::npos);
  std::string chain;
  for (int i = 0; i < 2500; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r2500 ::= \"x\"\nroot ::= r0\n";
  EXPECT_NE(parse_error(chain.c_str()).find("nests more than 2000"), std::string::npos);
  // Large but within the limits: fine, and matching stays linear.
  auto g = G(R"(root ::= ("ab"{1000}){20})");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "ab";
  EXPECT_TRUE(matches(g, text));
  EXPECT_FALSE(matches(g, text + "a"));
}

TEST(Gbnf, OtherRootNameAndEndStates) {
  auto g = Grammar::parse(R"(answer ::= "ok" "!"?)", "answer");
  State s = State::initial(g);
  EXPECT_FALSE(s.can_end());
  s = s.advance("ok");
  EXPECT_TRUE(s.can_end());
  EXPECT_FALSE(s.must_end());
  s = s.advance("!");
  EXPECT_TRUE(s.must_end());
  EXPECT_TRUE(s.advance("!").dead());
}

TEST(Gbnf, IncompleteUtf8AcrossAdvances) {
  auto g = G(R"(root ::= "é" [α-ω])");  // U+00E9 = C3 A9; U+03B1..U+03C9 = CE B1..CF 89
  State s = State::initial(g);
  State a = s.advance("\xC3");
  EXPECT_FALSE(a.dead());
  EXPECT_FALSE(a.can_end());
  EXPECT_TRUE(s.advance("\xC4").dead());  // U+0100..U+013F: not é
  a = a.advance("\xA9");
  EXPECT_FALSE(a.dead());
  EXPECT_FALSE(a.advance("\xCE").dead());
  EXPECT_TRUE(a.advance("\xD0").dead());  // Cyrillic: outside the class
  EXPECT_TRUE(a.advance("\xCE\xB1").can_end());
  EXPECT_TRUE(a.advance("\xA9").dead());                                    // a continuation byte without a lead
  EXPECT_TRUE(s.advance("\xC3\x28").dead());                                // a lead byte followed by ASCII
  EXPECT_TRUE(State::initial(G("root ::= .")).advance("\xC0\x80").dead());  // overlong NUL
}

TEST(TokenMask, AllowsTokensWhoseBytesTheGrammarTakesAndEogOnlyAtTheEnd) {
  auto g = G(R"(root ::= "{" [a-z]+ "}")");
  // 0: eos, 1: "{", 2: "{a", 3: "ab", 4: "}", 5: "b}", 6: "", 7: "x{", 8: "\xC3"
  TokenMask m({"", "{", "{a", "ab", "}", "b}", "", "x{", "\xC3"}, {0});
  State s = State::initial(g);
  std::vector<uint8_t> ok = m.allowed(s);
  EXPECT_EQ(ok, (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 0, 0, 0}));
  s = m.advance(s, 2);
  ok = m.allowed(s);
  EXPECT_EQ(ok, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 0, 0, 0}));
  for (int32_t t = 0; t < m.n_vocab(); ++t) EXPECT_EQ(m.allows(s, t), ok[static_cast<size_t>(t)] != 0) << t;
  s = m.advance(s, 5);
  ok = m.allowed(s);
  EXPECT_EQ(ok, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 0, 0}));  // only the end
  std::vector<float> logits(9, 1.0f);
  m.apply(s, logits.data());
  EXPECT_EQ(logits[0], 1.0f);
  for (size_t i = 1; i < logits.size(); ++i) EXPECT_TRUE(std::isinf(logits[i]) && logits[i] < 0) << i;
}

TEST(TokenMask, AStuckStateAllowsTheEndRatherThanNothing) {
  auto g = G(R"(root ::= "q")");
  TokenMask m({"", "a", "b"}, {0});
  std::vector<uint8_t> ok = m.allowed(State::initial(g));
  EXPECT_EQ(ok, (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_FALSE(m.allows(State::initial(g), 0));  // not a sentence yet: only the fallback lets it end
}

}  // namespace
}  // namespace treespec::grammar
