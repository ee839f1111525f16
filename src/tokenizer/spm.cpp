// SpmTokenizer: see spm.h.
#include "tokenizer/spm.h"

#include <fmt/format.h>

#include <functional>
#include <optional>

#include "gguf/byte_piece.h"
#include "tokenizer/merge.h"
#include "tokenizer/utf8.h"
#include "treespec/status.h"

namespace treespec::tokenizer {

namespace {

std::string escape_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char c : s) {
    if (c == ' ') out += utf8::kSpaceMarker;
    else out += c;
  }
  return out;
}

}  // namespace

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  bool prev_special = true;  // the dummy prefix goes at the start and after special tokens
  for (const Fragment& f : partition_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string frag;
    if (vocab_.add_space_prefix && prev_special) frag = " ";
    frag.append(text.substr(f.offset, f.length));
    encode_fragment(escape_spaces(frag), out);
    prev_special = false;
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

void SpmTokenizer::encode_fragment(const std::string& text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // Split into characters; a byte that does not start a valid UTF-8 character is a
  // symbol of its own (it can only end up as a byte token).
  std::vector<MergeSymbol> sym;
  sym.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    if (utf8::scan(std::string_view(text).substr(i), &n) != utf8::Scan::complete) n = 1;
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, -1, i, n});
    if (idx > 0) sym[static_cast<size_t>(idx - 1)].next = idx;
    i += n;
  }
  // Highest vocab score first; a pair merges only if the merged text is a piece.
  auto score_of = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<float> {
    auto it = token_to_id_.find(text.substr(l.start, l.n + r.n));
    if (it == token_to_id_.end()) return std::nullopt;
    return vocab_.scores.empty() ? 0.0f : vocab_.scores[static_cast<size_t>(it->second)];
  };
  merge_symbols<float>(sym, std::greater<float>(), score_of);

  for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const MergeSymbol& s = sym[static_cast<size_t>(i)];
    auto it = token_to_id_.find(text.substr(s.start, s.n));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Only single characters get here (every merge produced a vocab piece).
    for (size_t k = 0; k < s.n; ++k) {
      const int32_t id = byte_to_token_[static_cast<uint8_t>(text[s.start + k])];
      if (id >= 0) out.push_back(id);  // -1 only for a vocab with neither byte tokens nor <unk>
    }
  }
}

std::string SpmTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) {
    throw InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", id, n_vocab()));
  }
  const std::string& text = vocab_.tokens[static_cast<size_t>(id)];
  switch (vocab_.type(id)) {
    case TokenType::normal: {
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, 3, utf8::kSpaceMarker) == 0) {
          out += ' ';
          i += 3;
        } else {
          out += text[i++];
        }
      }
      return out;
    }
    case TokenType::byte: {
      // "<0xNN>"; a malformed byte piece renders as its text.
      const int b = gguf::parse_byte_piece(text);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : text;
    }
    case TokenType::user_defined: return text;
    case TokenType::control:
    case TokenType::unknown: return render_special ? text : std::string();
    case TokenType::unused:
    case TokenType::undefined: return std::string();
  }
  return std::string();
}

}  // namespace treespec::tokenizer
