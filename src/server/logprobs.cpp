// Log-probability entries (engine::Sequence::logprobs()) in the shapes of OpenAI's
// completions and chat answers and of llama-server's completion_probabilities.
#include <fmt/format.h>

#include <algorithm>

#include "server/responses.h"
#include "tokenizer/utf8.h"

namespace treespec::server {

using nlohmann::json;

namespace {

// JSON has no -infinity: a banned token's log-probability is OpenAI's -9999.
double reported(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

LogprobWriter::LogprobWriter(const tokenizer::Tokenizer& tok, int32_t prev_token) : tok_(tok), dec_(tok) {
  if (prev_token >= 0) dec_.prime(prev_token);
}

// The token's piece (special tokens spelled out); a piece that is not valid UTF-8 (a
// byte of a longer character) as "bytes:\xNN...", vLLM's spelling.
std::string LogprobWriter::token_text(int32_t id) const {
  std::string piece = tok_.token_to_piece(id, true);
  if (tokenizer::utf8::is_valid(piece)) return piece;
  std::string out = "bytes:";
  for (unsigned char c : piece) out += fmt::format("\\x{:02x}", c);
  return out;
}

json LogprobWriter::token_bytes(int32_t id) const {
  json b = json::array();
  for (unsigned char c : tok_.token_to_piece(id, true)) b.push_back(static_cast<int>(c));
  return b;
}

json LogprobWriter::completions(std::span<const sampling::TokenLogprob> entries) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const sampling::TokenLogprob& e : entries) {
    tokens.push_back(token_text(e.token));
    token_logprobs.push_back(reported(e.logprob));
    // The N most likely, and the chosen token when it is not among them (OpenAI: up to
    // logprobs + 1 entries); the more likely of two tokens spelled alike is kept.
    json d = json::object();
    for (const sampling::TokenProb& t : e.top) {
      const std::string k = token_text(t.token);
      if (!d.contains(k)) d[k] = reported(t.logprob);
    }
    if (const std::string k = token_text(e.token); !d.contains(k)) d[k] = reported(e.logprob);
    top.push_back(std::move(d));
    offsets.push_back(offset_);
    offset_ += code_points(dec_.push(e.token));
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json LogprobWriter::chat(std::span<const sampling::TokenLogprob> entries) const {
  json content = json::array();
  for (const sampling::TokenLogprob& e : entries) {
    json top = json::array();
    for (const sampling::TokenProb& t : e.top) {
      top.push_back(
          {{"token", token_text(t.token)}, {"logprob", reported(t.logprob)}, {"bytes", token_bytes(t.token)}});
    }
    content.push_back({{"token", token_text(e.token)},
                       {"logprob", reported(e.logprob)},
                       {"bytes", token_bytes(e.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json LogprobWriter::native(std::span<const sampling::TokenLogprob> entries) const {
  json out = json::array();
  auto one = [&](int32_t id, float lp) {
    return json{{"id", id}, {"token", token_text(id)}, {"bytes", token_bytes(id)}, {"logprob", reported(lp)}};
  };
  for (const sampling::TokenLogprob& e : entries) {
    json j = one(e.token, e.logprob);
    json top = json::array();
    for (const sampling::TokenProb& t : e.top) top.push_back(one(t.token, t.logprob));
    j["top_logprobs"] = std::move(top);
    out.push_back(std::move(j));
  }
  return out;
}

json LogprobWriter::of(Endpoint ep, std::span<const sampling::TokenLogprob> entries) {
  if (ep == Endpoint::completions) return completions(entries);
  if (ep == Endpoint::chat) return chat(entries);
  return native(entries);
}

}  // namespace treespec::server
