// Strict UTF-8 helpers for the tokenizers and the stream decoder (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace treespec::tokenizer::utf8 {

// Bytes the sequence led by `lead` should have (1-4), or 0 if `lead` cannot start one.
inline int expected_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether byte k (1-based, k >= 1) of a sequence led by `lead` may be `b`.
inline bool continuation_ok(uint8_t lead, int k, uint8_t b) {
  if (k == 1) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  }
  return b >= 0x80 && b <= 0xBF;
}

enum class Scan { complete, incomplete, invalid };

// Classifies the bytes at the start of s: a complete valid character (its length in
// *len), a valid but unfinished prefix running to the end of s (*len = s.size()), or an
// invalid first byte (*len = 1).
inline Scan scan(std::string_view s, size_t* len) {
  const auto lead = static_cast<uint8_t>(s[0]);
  const int need = expected_length(lead);
  if (need == 0) {
    *len = 1;
    return Scan::invalid;
  }
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= s.size()) {
      *len = s.size();
      return Scan::incomplete;
    }
    if (!continuation_ok(lead, k, static_cast<uint8_t>(s[static_cast<size_t>(k)]))) {
      *len = 1;
      return Scan::invalid;
    }
  }
  *len = static_cast<size_t>(need);
  return Scan::complete;
}

inline bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n = 0;
    if (scan(s.substr(i), &n) != Scan::complete) return false;
    i += n;
  }
  return true;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace treespec::tokenizer::utf8
