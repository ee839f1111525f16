// Tokenizer encode/decode of arbitrary bytes, for SentencePiece (SPM) and byte-level BPE
// with each of the six pre-tokenizers. Properties checked on every input:
//   - encoding never fails and every id is inside the vocabulary;
//   - SPM with byte fallback loses nothing: decode(encode(text)) == text, up to the
//     documented SentencePiece convention that a literal U+2581 decodes as a space
//     (skipped when the text spells the user-defined token, which gets a dummy-prefix
//     space after it, as in llama.cpp);
//   - byte-level BPE is exactly reversible, special tokens parsed or not;
//   - decoding arbitrary ids never fails, and the stream decoder's output is valid UTF-8
//     and equals the whole-sequence decode with invalid bytes replaced by U+FFFD.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/utf8.h"

namespace {

using namespace treespec;

void check(bool ok) {
  if (!ok) std::abort();
}

// What StreamDecoder promises: valid characters kept, each invalid byte replaced by
// U+FFFD, an unfinished tail at the end replaced by one U+FFFD.
std::string sanitize(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    const auto r = tokenizer::utf8::scan(s.substr(i), &n);
    if (r == tokenizer::utf8::Scan::complete) out.append(s.substr(i, n));
    else out += tokenizer::utf8::kReplacement;
    i += n;
  }
  return out;
}

std::string spaces_for_markers(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, 3) == tokenizer::utf8::kSpaceMarker) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

void check_ids(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) check(id >= 0 && id < tok.n_vocab());
}

// Arbitrary ids from the input bytes: whole-sequence decode and streaming agree.
void check_decode(const tokenizer::Tokenizer& tok, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | (data[i + 1] << 8)) % tok.n_vocab());
  for (bool render : {false, true}) {
    const std::string whole = tok.decode(ids, render);
    tokenizer::StreamDecoder dec(tok, render);
    std::string streamed;
    for (int32_t id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    check(tokenizer::utf8::is_valid(streamed));
    check(streamed == sanitize(whole));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto spm = fuzz::make_spm_tokenizer();
  static const auto bpe = [] {
    std::array<std::unique_ptr<tokenizer::Tokenizer>, fuzz::kNumBpePre> t;
    for (int i = 0; i < fuzz::kNumBpePre; ++i)
      t[static_cast<size_t>(i)] = fuzz::make_bpe_tokenizer(fuzz::kBpePreNames[i]);
    return t;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  for (bool special : {false, true}) {
    const auto ids = spm->encode(text, true, special);
    check_ids(*spm, ids);
    if (!special && text.find("<|user|>") == std::string_view::npos) {
      check(spm->decode(ids) == spaces_for_markers(text));
    }
  }
  check_decode(*spm, data, size);

  for (const auto& tok : bpe) {
    for (bool special : {false, true}) {
      const auto ids = tok->encode(text, false, special);
      check_ids(*tok, ids);
      check(tok->decode(ids, special) == text);
    }
    check_decode(*tok, data, size);
  }
  return 0;
}
