// The server's request path from the HTTP body to what the scheduler receives: any bytes
// as a request body to parse_body, then to the completions and chat request parsers, the
// tokenize and detokenize parsers, chat-template rendering in every family, tokenization,
// and the TextStream (stop strings, UTF-8 hold-back) over the encoded prompt.
//
// Properties checked on every input:
//   - every rejection is an ApiError with HTTP status 400, a type, a message and an error
//     body the server can serialise (its dump_json replaces invalid UTF-8); nothing else
//     escapes (any other exception is a 500 "internal error" in the server, and a crash
//     here);
//   - an accepted request is in range: max_tokens -1 or >= 1, sampling parameters that
//     SamplingParams::validate() accepts (the engine validates them again), at most 16
//     non-empty stop strings of at most 1024 bytes, token ids >= 0, known roles;
//   - detokenize ids lie inside the vocabulary;
//   - every chat family renders the messages, and its extra stops are non-empty;
//   - TextStream, fed the prompt's tokens one by one with the request's stop strings:
//     without a stop its text equals the stream decoder's whole output; with one, its
//     text followed by the stop word is a prefix of that output and contains no stop
//     string before the stop word.
// First byte: bit 0 picks the tokenizer (SPM / byte-level BPE) used for the prompt.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "chat/builtin_formats.h"
#include "fuzz_common.h"
#include "sampling/sampling.h"
#include "server/api.h"
#include "tokenizer/text_stream.h"
#include "treespec/status.h"

namespace {

using namespace treespec;
using nlohmann::json;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_error(const server::ApiError& e) {
  check(e.status() == 400);
  check(!e.type().empty());
  check(e.what()[0] != '\0');
  // As the server's dump_json does.
  const std::string s = e.body().dump(-1, ' ', false, json::error_handler_t::replace);
  check(!s.empty());
}

void check_request(const server::GenerationRequest& r, server::Endpoint ep) {
  check(r.endpoint == ep);
  check(r.max_tokens == -1 || r.max_tokens >= 1);
  try {
    r.sampling.validate();
  } catch (const InvalidArgument&) {
    check(false);  // the parser accepted what the engine will refuse
  }
  check(r.stops.size() <= 16);
  for (const auto& s : r.stops) check(!s.empty() && s.size() <= 1024);
  if (ep == server::Endpoint::chat) {
    check(!r.messages.empty());
    for (const auto& m : r.messages) check(m.role == "system" || m.role == "user" || m.role == "assistant");
  } else {
    check(r.prompt_is_tokens || r.prompt_tokens.empty());
    for (int32_t t : r.prompt_tokens) check(t >= 0);
  }
}

// Feeds `tokens` (after `prev`) through a TextStream and checks it against the decoder.
void check_text_stream(const tokenizer::Tokenizer& tok, int32_t prev, const std::vector<int32_t>& tokens,
                       const std::vector<std::string>& stops) {
  tokenizer::StreamDecoder ref(tok);
  if (prev >= 0) ref.prime(prev);
  std::string full;
  for (int32_t t : tokens) full += ref.push(t);
  full += ref.flush();

  tokenizer::TextStream ts(tok, prev, stops);
  std::string out;
  for (int32_t t : tokens) out += ts.push(t);
  out += ts.finish();
  check(ts.n_tokens() <= static_cast<int32_t>(tokens.size()));
  if (!ts.stopped()) {
    check(ts.n_tokens() == static_cast<int32_t>(tokens.size()));
    check(out == full);
    for (const auto& s : stops) check(full.find(s) == std::string::npos);
    return;
  }
  const std::string& w = ts.stop_word();
  check(!w.empty());
  bool listed = false;
  for (const auto& s : stops) listed = listed || s == w;
  check(listed);
  check(full.compare(0, out.size() + w.size(), out + w) == 0);
  for (const auto& s : stops) check(out.find(s) == std::string::npos);
}

struct Tokenizers {
  std::unique_ptr<tokenizer::Tokenizer> spm = fuzz::make_spm_tokenizer();
  std::unique_ptr<tokenizer::Tokenizer> bpe = fuzz::make_bpe_tokenizer("qwen2");
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizers toks;
  if (size < 1) return 0;
  const tokenizer::Tokenizer& tok = (data[0] & 1) ? *toks.bpe : *toks.spm;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);

  json body;
  try {
    body = server::parse_body(text);
  } catch (const server::ApiError& e) {
    check_error(e);
    return 0;
  }
  check(body.is_object());

  try {
    const server::TokenizeRequest t = server::parse_tokenize_request(body);
    for (int32_t id : tok.encode(t.content, t.add_special, true)) check(id >= 0 && id < tok.n_vocab());
  } catch (const server::ApiError& e) {
    check_error(e);
  }
  try {
    for (int32_t id : server::parse_detokenize_request(body, tok.n_vocab())) check(id >= 0 && id < tok.n_vocab());
  } catch (const server::ApiError& e) {
    check_error(e);
  }

  // The constrained-output fields (grammar, json_schema, response_format) as the server
  // reads them: from the body as sent, keys in the client's order.
  try {
    (void)server::parse_request_grammar(nlohmann::ordered_json::parse(text));
  } catch (const server::ApiError& e) {
    check_error(e);
  }

  sampling::SamplingParams defaults;
  for (const auto ep : {server::Endpoint::completions, server::Endpoint::chat}) {
    server::GenerationRequest r;
    try {
      r = server::parse_generation_request(body, ep, defaults);
    } catch (const server::ApiError& e) {
      check_error(e);
      continue;
    }
    check_request(r, ep);
    std::vector<std::string> prompts;
    std::vector<std::vector<std::string>> stops;
    if (ep == server::Endpoint::chat) {
      const std::string bos = tok.token_to_piece(tok.bos_id(), true), eos = tok.token_to_piece(tok.eos_id(), true);
      for (const std::string& name : chat::chat_family_names()) {
        const chat::ChatFamily f = chat::chat_family_from_name(name);
        check(name == chat::chat_family_name(f));
        chat::RenderedChat rc = chat::render_builtin(f, r.messages, bos, eos);
        for (const auto& s : rc.stops) check(!s.empty());
        std::vector<std::string> all = r.stops;
        all.insert(all.end(), rc.stops.begin(), rc.stops.end());
        prompts.push_back(std::move(rc.prompt));
        stops.push_back(std::move(all));
      }
    } else if (!r.prompt_is_tokens) {
      prompts.push_back(r.prompt);
      stops.push_back(r.stops);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t> ids = tok.encode(prompts[i], true, true);
      for (int32_t id : ids) check(id >= 0 && id < tok.n_vocab());
      // The stream starts after the first token (the server primes it with the
      // prompt's last token and streams only generated ones).
      if (ids.empty()) continue;
      check_text_stream(tok, ids[0], std::vector<int32_t>(ids.begin() + 1, ids.end()), stops[i]);
    }
  }
  return 0;
}
