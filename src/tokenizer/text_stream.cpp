#include "tokenizer/text_stream.h"

#include <algorithm>

namespace treespec::tokenizer {

TextStream::TextStream(const tokenizer::Tokenizer& tok, int32_t prev_token, std::vector<std::string> stops)
    : dec_(tok), stops_(std::move(stops)) {
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
               stops_.end());
  if (prev_token >= 0) dec_.prime(prev_token);
}

size_t TextStream::partial_stop_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops) {
    const size_t max_len = std::min(text.size(), s.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

std::string TextStream::release() {
  // Earliest occurrence of any stop string wins (then the longest at that position).
  size_t at = std::string::npos;
  for (const auto& s : stops_) {
    const size_t p = held_.find(s);
    if (p != std::string::npos && (at == std::string::npos || p < at || (p == at && s.size() > stop_word_.size()))) {
      at = p;
      stop_word_ = s;
    }
  }
  if (at != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, at);
    held_.clear();
    return out;
  }
  const size_t keep = finished_ ? 0 : partial_stop_suffix(held_, stops_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TextStream::push(int32_t token) {
  if (stopped_ || finished_) return {};
  ++n_tokens_;
  held_ += dec_.push(token);
  return release();
}

std::string TextStream::finish() {
  if (stopped_ || finished_) return {};
  held_ += dec_.flush();
  finished_ = true;
  return release();
}

}  // namespace treespec::tokenizer
