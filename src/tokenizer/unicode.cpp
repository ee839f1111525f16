// Code point classes (libutf8proc) and GPT-2's byte mapping. See unicode.h.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace treespec::tokenizer::unicode {

namespace {

// Unicode's White_Space property (PropList.txt); utf8proc has categories, not this
// property, and the list has been stable since Unicode 6.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> from_unicode{};  // mapped code points are < 0x144
};

ByteTables make_byte_tables() {
  ByteTables t;
  t.from_unicode.fill(-1);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(next++);
    // Every mapped code point is below U+0800: one or two UTF-8 bytes.
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    t.to_unicode[static_cast<size_t>(b)] = s;
    t.from_unicode[cp] = static_cast<int16_t>(b);
  }
  return t;
}

const ByteTables& byte_tables() {
  static const ByteTables t = make_byte_tables();
  return t;
}

}  // namespace

uint8_t classify(uint32_t cp) {
  if (cp >= 0x110000) return kOther;  // invalid-byte markers
  if (is_white_space(cp)) return kWhitespace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return kNumber;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return kPunct;
    default: return kOther;
  }
}

CodePoints decode_utf8(std::string_view text) {
  CodePoints out;
  out.cp.reserve(text.size());
  out.offsets.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    uint32_t cp;
    if (utf8::scan(text.substr(i), &n) == utf8::Scan::complete) {
      const auto* s = reinterpret_cast<const uint8_t*>(text.data() + i);
      if (n == 1) cp = s[0];
      else if (n == 2) cp = (s[0] & 0x1Fu) << 6 | (s[1] & 0x3Fu);
      else if (n == 3) cp = (s[0] & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu);
      else cp = (s[0] & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
    } else {
      n = 1;
      cp = kInvalidBase + static_cast<uint8_t>(text[i]);
    }
    out.cp.push_back(cp);
    out.offsets.push_back(i);
    i += n;
  }
  out.offsets.push_back(text.size());
  return out;
}

const std::array<std::string, 256>& byte_to_unicode() { return byte_tables().to_unicode; }

int unicode_to_byte(uint32_t cp) {
  if (cp >= byte_tables().from_unicode.size()) return -1;
  return byte_tables().from_unicode[cp];
}

const char* tables_version() { return utf8proc_unicode_version(); }

}  // namespace treespec::tokenizer::unicode
