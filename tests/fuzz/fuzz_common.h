// Shared helpers for the libFuzzer targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace treespec::fuzz {

// A small SentencePiece-style vocabulary (control tokens, 256 byte tokens, characters
// and merged pieces) built in memory, so the fuzzers need no third-party files.
std::unique_ptr<tokenizer::Tokenizer> make_spm_tokenizer();

}  // namespace treespec::fuzz
