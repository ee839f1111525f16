// Tokenizer base: vocabulary lookups, special-token partitioning, decoding, EOG, and the
// streaming decoder. The encoding algorithms live in their own files (spm.cpp, bpe.cpp).
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "gguf/byte_piece.h"
#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"
#include "treespec/status.h"

namespace treespec::tokenizer {

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  const int32_t n = vocab_.n_tokens();
  if (vocab_.types.empty()) vocab_.types.assign(static_cast<size_t>(n), TokenType::normal);
  if (vocab_.types.size() != static_cast<size_t>(n) ||
      (!vocab_.scores.empty() && vocab_.scores.size() != vocab_.tokens.size()) ||
      (!vocab_.strip.empty() && vocab_.strip.size() != vocab_.tokens.size())) {
    throw InvalidArgument("Tokenizer: vocab scores/types/strip must be empty or have one entry per token");
  }
  for (int32_t* id : {&vocab_.bos_id, &vocab_.eos_id, &vocab_.eot_id, &vocab_.eom_id, &vocab_.unk_id, &vocab_.pad_id}) {
    if (*id >= n) throw InvalidArgument(fmt::format("Tokenizer: special token id {} outside the vocabulary", *id));
  }
  token_to_id_.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const auto& t = vocab_.tokens[static_cast<size_t>(i)];
    if (!t.empty()) token_to_id_.emplace(t, i);  // emplace keeps the first (lowest) id
  }
  for (int b = 0; b < 256; ++b) {
    int32_t id = token_id(gguf::byte_piece(static_cast<uint8_t>(b)));
    if (id < 0 && b < 0x80) id = token_id(std::string(1, static_cast<char>(b)));
    byte_to_token_[static_cast<size_t>(b)] = id >= 0 ? id : vocab_.unk_id;
  }
  for (int32_t i = 0; i < n; ++i) {
    const TokenType t = vocab_.type(i);
    if ((t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown) &&
        !vocab_.tokens[static_cast<size_t>(i)].empty()) {
      special_by_length_.push_back(i);
    }
  }
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[static_cast<size_t>(a)].size() > vocab_.tokens[static_cast<size_t>(b)].size();
  });
}

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(std::move(vocab));
  if (vocab.model == "gpt2") return std::make_unique<BpeTokenizer>(std::move(vocab));
  throw Unsupported(
      fmt::format("tokenizer model '{}' is not supported (supported: 'llama' SentencePiece, 'gpt2' byte-level BPE)",
                  vocab.model));
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  Vocab v = load_vocab(file);
  // Name the file in errors about the vocabulary as a whole (unsupported model or
  // pre-tokenizer, malformed merges).
  try {
    return create(std::move(v));
  } catch (const Unsupported& e) {
    throw Unsupported(fmt::format("{}: {}", file.path(), e.what()));
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{}: {}", file.path(), e.what()));
  }
}

int32_t Tokenizer::token_id(std::string_view piece) const {
  auto it = token_to_id_.find(std::string(piece));
  return it == token_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> Vocab::eog_ids() const {
  std::vector<int32_t> ids;
  for (int32_t id : {eos_id, eot_id, eom_id}) {
    if (id >= 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> eog_ids(const gguf::GgufFile& file, int32_t n_vocab) {
  if (!file.has("tokenizer.ggml.tokens")) return {};
  std::vector<int32_t> ids = load_vocab(file).eog_ids();
  std::erase_if(ids, [&](int32_t id) { return id >= n_vocab; });
  return ids;
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && vocab_.type(id) == TokenType::control;
}

bool Tokenizer::is_byte(int32_t id) const { return id >= 0 && id < n_vocab() && vocab_.type(id) == TokenType::byte; }

std::vector<Tokenizer::Fragment> Tokenizer::partition_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  for (int32_t id : special_by_length_) {
    const TokenType type = vocab_.type(id);
    if (!parse_special && (type == TokenType::control || type == TokenType::unknown)) continue;
    const std::string& piece = vocab_.tokens[static_cast<size_t>(id)];
    const uint8_t strip = vocab_.strip.empty() ? 0 : vocab_.strip[static_cast<size_t>(id)];
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset, len = f.length;
      while (len > 0) {
        const size_t match = text.substr(off, len).find(piece);
        if (match == std::string_view::npos) {
          next.push_back({-1, off, len});
          break;
        }
        size_t left_len = match;
        if (strip & Vocab::kStripLeft) {
          while (left_len > 0 && is_space(text[off + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({-1, off, left_len});
        next.push_back({id, 0, 0});
        size_t right_off = off + match + piece.size();
        size_t right_len = len - match - piece.size();
        if (strip & Vocab::kStripRight) {
          while (right_len > 0 && is_space(text[right_off])) {
            ++right_off;
            --right_len;
          }
        }
        off = right_off;
        len = right_len;
      }
    }
    frags = std::move(next);
  }
  return frags;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (vocab_.add_space_prefix && prev >= 0 && prev == vocab_.bos_id && !piece.empty() && piece[0] == ' ') {
      piece.erase(0, 1);
    }
    out += piece;
    prev = id;
  }
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, render_special_);
  if (tok_.vocab().add_space_prefix && prev_ >= 0 && prev_ == tok_.bos_id() && !piece.empty() && piece[0] == ' ') {
    piece.erase(0, 1);
  }
  prev_ = id;
  pending_ += piece;
  // Emit every complete character; replace invalid bytes; keep an unfinished tail.
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    size_t n = 0;
    const auto r = utf8::scan(std::string_view(pending_).substr(i), &n);
    if (r == utf8::Scan::incomplete) break;
    if (r == utf8::Scan::invalid) out += utf8::kReplacement;
    else out.append(pending_, i, n);
    i += n;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(utf8::kReplacement);
  pending_.clear();
  return out;
}

}  // namespace treespec::tokenizer
