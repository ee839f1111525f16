// Byte pieces of SentencePiece-style vocabularies: the token "<0xNN>" stands for the raw
// byte NN (two hex digits; llama.cpp and SentencePiece write them upper case). One parser
// and one formatter for the llama2.c converter and the tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace treespec::gguf {

// "<0xNN>" -> NN (0..255; either case of hex digit), anything else -> -1.
int parse_byte_piece(std::string_view piece);

// NN -> "<0xNN>" with upper-case digits.
std::string byte_piece(uint8_t byte);

}  // namespace treespec::gguf
