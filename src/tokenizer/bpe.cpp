// BpeTokenizer: see bpe.h.
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <functional>
#include <optional>

#include "gguf/byte_piece.h"
#include "tokenizer/merge.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"
#include "treespec/status.h"

namespace treespec::tokenizer {

BpeTokenizer::BpeTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)), pre_(pre_tokenizer_from_name(vocab_.pre)) {
  ignore_merges_ = pre_ == PreTokenizer::llama3;
  if (vocab_.merges.empty()) {
    throw FormatError("metadata key 'tokenizer.ggml.merges' is missing or empty (byte-level BPE needs its merges)");
  }
  ranks_.reserve(vocab_.merges.size());
  for (size_t i = 0; i < vocab_.merges.size(); ++i) {
    const std::string& m = vocab_.merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size()) {
      throw FormatError(
          fmt::format("metadata key 'tokenizer.ggml.merges': entry {} ('{}') is not two pieces "
                      "separated by a space",
                      i, m));
    }
    ranks_.emplace(m, static_cast<int32_t>(i));  // a repeated merge keeps its first (lowest) rank
  }
  // Byte tokens are the pieces spelled as GPT-2's byte characters.
  const auto& bytes = unicode::byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    int32_t id = token_id(bytes[static_cast<size_t>(b)]);
    if (id < 0) id = vocab_.unk_id;
    if (id < 0) {
      throw FormatError(
          fmt::format("byte-level BPE vocabulary has no token for byte 0x{:02X} ('{}') and no unknown "
                      "token",
                      b, bytes[static_cast<size_t>(b)]));
    }
    byte_to_token_[static_cast<size_t>(b)] = id;
  }
}

int32_t BpeTokenizer::rank(std::string_view left, std::string_view right, std::string& key) const {
  key.assign(left);
  key += ' ';
  key += right;
  auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  std::vector<std::string_view> words;
  for (const Fragment& f : partition_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    words.clear();
    pre_tokenize(pre_, text.substr(f.offset, f.length), words);
    for (std::string_view w : words) encode_word(w, out);
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  // mapped = the word in GPT-2 byte characters; moff[i] = where byte i's character starts.
  const auto& bytes = unicode::byte_to_unicode();
  std::string mapped;
  mapped.reserve(word.size() * 2);
  std::vector<size_t> moff(word.size() + 1);
  for (size_t i = 0; i < word.size(); ++i) {
    moff[i] = mapped.size();
    mapped += bytes[static_cast<uint8_t>(word[i])];
  }
  moff[word.size()] = mapped.size();
  auto text = [&](size_t start, size_t n) {
    return std::string_view(mapped).substr(moff[start], moff[start + n] - moff[start]);
  };

  if (ignore_merges_) {
    if (auto it = token_to_id_.find(mapped); it != token_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }

  std::vector<MergeSymbol> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    sym[i] = {static_cast<int>(i) - 1, i + 1 < word.size() ? static_cast<int>(i + 1) : -1, i, 1};
  }
  // Lowest merge rank first.
  std::string key;
  auto rank_of = [&](const MergeSymbol& l, const MergeSymbol& r) -> std::optional<int32_t> {
    const int32_t rk = rank(text(l.start, l.n), text(r.start, r.n), key);
    if (rk < 0) return std::nullopt;
    return rk;
  };
  merge_symbols<int32_t>(sym, std::less<int32_t>(), rank_of);

  for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const MergeSymbol& s = sym[static_cast<size_t>(i)];
    if (auto it = token_to_id_.find(std::string(text(s.start, s.n))); it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // A merge whose result is not a vocab piece (a broken vocab): spell the bytes.
    for (size_t k = s.start; k < s.start + s.n; ++k) out.push_back(byte_to_token_[static_cast<uint8_t>(word[k])]);
  }
}

std::string BpeTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) {
    throw InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", id, n_vocab()));
  }
  const std::string& text = vocab_.tokens[static_cast<size_t>(id)];
  switch (vocab_.type(id)) {
    case TokenType::normal: {
      // Each GPT-2 byte character becomes its byte; any other character stays as it is.
      std::string out;
      out.reserve(text.size());
      const unicode::CodePoints cps = unicode::decode_utf8(text);
      for (size_t i = 0; i < cps.cp.size(); ++i) {
        const int b = unicode::unicode_to_byte(cps.cp[i]);
        if (b >= 0) out += static_cast<char>(b);
        else out.append(text, cps.offsets[i], cps.offsets[i + 1] - cps.offsets[i]);
      }
      return out;
    }
    case TokenType::byte: {
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
