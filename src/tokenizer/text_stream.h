// TextStream: turns one request's generated tokens into text that is safe to send.
//
// - complete UTF-8 only (tokenizer::StreamDecoder holds back partial characters);
// - stop strings: generation stops at the first occurrence of any of them; the stop
//   string and everything after it is dropped;
// - text that could be the beginning of a stop string is held back until it either
//   completes the stop string (dropped) or cannot anymore (released).
// Deterministic in the token sequence: the same tokens give the same text and the same
// token count whether they arrive one per step or several per step (speculation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace treespec::tokenizer {

class TextStream {
 public:
  // prev_token: the prompt's last token (SentencePiece drops the leading space of the
  // first piece after BOS; the decoder needs to know what came before).
  // stops: non-empty, valid UTF-8 strings (the request parser checks).
  TextStream(const tokenizer::Tokenizer& tok, int32_t prev_token, std::vector<std::string> stops);

  // Feeds one generated token; returns newly releasable text (may be empty). Ignored
  // (returns "") once a stop string was found.
  std::string push(int32_t token);
  // End of generation: releases held-back text and any partial UTF-8 (as U+FFFD).
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& stop_word() const { return stop_word_; }
  // Tokens consumed: all pushed tokens, or up to the one that completed a stop string.
  int32_t n_tokens() const { return n_tokens_; }

  // Longest suffix of `text` that is a proper prefix of one of `stops` (bytes).
  static size_t partial_stop_suffix(const std::string& text, const std::vector<std::string>& stops);

 private:
  std::string release();  // stop search + hold-back on held_

  tokenizer::StreamDecoder dec_;
  std::vector<std::string> stops_;
  std::string held_;  // decoded text not yet released
  bool stopped_ = false;
  bool finished_ = false;
  std::string stop_word_;
  int32_t n_tokens_ = 0;
};

}  // namespace treespec::tokenizer
