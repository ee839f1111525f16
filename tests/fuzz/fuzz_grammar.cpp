// GBNF grammars: any bytes as a grammar (and, after a NUL byte, as output text) must
// parse or throw InvalidArgument, nothing else; a parsed grammar's state after the text
// is the same fed at once or byte by byte, and the token mask agrees with per-token
// checks for a vocabulary cut from the text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "treespec/status.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treespec;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  const std::string text = nul == std::string::npos ? std::string() : input.substr(nul + 1, 256);
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::Grammar::parse(source);
  } catch (const InvalidArgument&) {
    return 0;
  }
  const grammar::State s0 = grammar::State::initial(g);
  const grammar::State all = s0.advance(text);
  grammar::State step = s0;
  for (const char c : text) step = step.advance(std::string_view(&c, 1));
  check(all.dead() == step.dead() && all.can_end() == step.can_end() && all.must_end() == step.must_end());
  // A vocabulary of the text's 1-3 byte pieces, an empty piece and an end token.
  std::vector<std::string> pieces = {"", ""};
  for (size_t i = 0; i + 1 <= text.size() && pieces.size() < 64; i += 2) pieces.push_back(text.substr(i, 1 + i % 3));
  const grammar::TokenMask mask(pieces, {0});
  const std::vector<uint8_t> ok = mask.allowed(s0);
  bool any = false;
  for (int32_t t = 1; t < mask.n_vocab(); ++t) {
    check((ok[static_cast<size_t>(t)] != 0) == mask.allows(s0, t));
    any = any || ok[static_cast<size_t>(t)] != 0;
  }
  check(ok[0] == (s0.can_end() || !any));
  return 0;
}
