// Unicode helpers for byte-level BPE: code point classes for the pre-tokenizers (letter,
// number, whitespace; from libutf8proc's category tables) and GPT-2's byte <-> character
// mapping.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::tokenizer::unicode {

// Classes the pre-tokenizer regexes ask about: \p{L} = general category L*, \p{N} = N*,
// \s = the White_Space property, \p{P} = P*. A code point with none of kLetter, kNumber,
// kWhitespace (marks, punctuation, symbols, controls, unassigned, and bytes that are not
// valid UTF-8) is "other": [^\s\p{L}\p{N}]. kPunct is set on top of that for P*.
enum CpClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kWhitespace = 4, kPunct = 8 };

uint8_t classify(uint32_t cp);

// Marker for a byte that does not start a valid UTF-8 character: kInvalidBase + byte.
// It classifies as kOther and keeps its original byte in the text.
constexpr uint32_t kInvalidBase = 0x110000;

// Text as code points with the byte offset where each starts; offsets has one extra
// entry, text.size(), so code point i spans [offsets[i], offsets[i + 1]).
struct CodePoints {
  std::vector<uint32_t> cp;     // [n]
  std::vector<size_t> offsets;  // [n + 1]
};
CodePoints decode_utf8(std::string_view text);

// GPT-2's reversible byte -> printable character mapping (bytes that are printable
// Latin-1 map to themselves, the other 68 to U+0100.. in byte order), as UTF-8.
const std::array<std::string, 256>& byte_to_unicode();
// Inverse: the byte a mapped code point stands for, or -1.
int unicode_to_byte(uint32_t cp);

// Unicode version of the category tables (utf8proc's), for docs and `treespec info`.
const char* tables_version();

}  // namespace treespec::tokenizer::unicode
