// Shared helpers for the libFuzzer targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tokenizer/tokenizer.h"

namespace treespec::fuzz {

// A small SentencePiece-style vocabulary (control tokens, 256 byte tokens, characters
// and merged pieces, one user-defined token) built in memory, so the fuzzers need no
// third-party files.
std::unique_ptr<tokenizer::Tokenizer> make_spm_tokenizer();

// A small byte-level BPE vocabulary (GPT-2's 256 byte characters, hand-written merges
// including one whose result is deliberately missing from the vocabulary, two control
// tokens and one user-defined token) with the given pre-tokenizer (tokenizer.ggml.pre).
std::unique_ptr<tokenizer::Tokenizer> make_bpe_tokenizer(const char* pre);

// The pre-tokenizer names the BPE fuzzing cycles through (one per PreTokenizer).
constexpr const char* kBpePreNames[] = {"default", "gpt-2", "llama-bpe", "qwen2", "smollm", "gpt-4o"};
constexpr int kNumBpePre = 6;

}  // namespace treespec::fuzz
