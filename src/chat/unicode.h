// UTF-8 helpers with Python str semantics: code-point indexing, str.isspace(),
// simple case mapping, str.isprintable() (for repr). Python strings are sequences of
// code points while ours are UTF-8 bytes, so every length, index and slice goes through
// these. Invalid UTF-8 decodes byte by byte as U+FFFD-free "raw" code points 0xDC80+b
// (Python's surrogateescape), so nothing is lost and nothing crashes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace treespec::chat {

// Decodes the code point at s[i] and advances i.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
std::vector<char32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<char32_t>& cps);
size_t utf8_length(std::string_view s);

bool py_isspace(char32_t c);      // str.isspace / re's \s
bool py_isprintable(char32_t c);  // str.isprintable (approximate beyond the BMP's common ranges)
bool py_isalnum(char32_t c);      // \w minus '_' (letters and digits; approximate beyond ASCII/Latin)
char32_t py_upper(char32_t c);    // single-code-point mappings (ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic)
char32_t py_lower(char32_t c);
bool py_islower_cased(char32_t c);  // has an uppercase mapping (a cased lowercase letter)
bool py_isupper_cased(char32_t c);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// Python's str.strip(chars) / lstrip / rstrip; `chars` empty-and-absent means whitespace.
std::string py_strip(std::string_view s, bool left, bool right, const std::string* chars);

}  // namespace treespec::chat
