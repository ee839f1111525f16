// POST /v1/embeddings (OpenAI's shape): one embedding per input, each the L2-normalised
// pooling (--pooling) of the model's final-norm hidden states (engine/embedding.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "server/server_impl.h"

namespace treespec::server {

using nlohmann::json;

namespace {

// Little-endian float32 bytes in base64 (what OpenAI's encoding_format "base64" sends).
std::string base64_floats(const std::vector<float>& v) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // x86 and every target we build for are little-endian
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    out += kAlphabet[(w >> 18) & 63];
    out += kAlphabet[(w >> 12) & 63];
    out += n > 1 ? kAlphabet[(w >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[w & 63] : '=';
  }
  return out;
}

}  // namespace

void Server::Impl::handle_embeddings(const httplib::Request& req, httplib::Response& res) {
  require_ready();
  const EmbeddingRequest r = parse_embedding_request(parse_body(req.body));
  require_model(r.model);
  // Tokenized as llama-server does (BOS added, special-token text parsed).
  std::vector<std::vector<int32_t>> tokens;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const EmbeddingInput& in = r.inputs[i];
    std::vector<int32_t> t = in.is_tokens ? in.tokens : tok->encode(in.text, true, true);
    for (int32_t id : t) {
      if (id >= tok->n_vocab()) {
        throw invalid_request(fmt::format("'input[{}]' holds token id {}, outside the vocabulary (0..{})", i, id,
                                          tok->n_vocab() - 1),
                              "input");
      }
    }
    if (static_cast<int64_t>(t.size()) > n_ctx) {
      throw ApiError(400, "invalid_request_error",
                     fmt::format("'input[{}]' has {} tokens but the context holds {} per request", i, t.size(), n_ctx),
                     "context_length_exceeded", "input");
    }
    tokens.push_back(std::move(t));
  }
  engine::EmbeddingParams p;
  p.pooling = pooling;
  p.n_batch = cfg.n_batch;
  p.type_k = cfg.type_k;
  p.type_v = cfg.type_v;
  json data = json::array();
  int64_t n_tokens = 0;
  {
    std::lock_guard<std::mutex> lock(embed_mu);
    if (!embed_ctx) embed_ctx = std::make_unique<model::ForwardContext>(*model, cfg.n_threads);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::vector<float> e = engine::embed_tokens(*model, *embed_ctx, tokens[i], p, n_ctx);
      n_tokens += static_cast<int64_t>(tokens[i].size());
      data.push_back(
          {{"object", "embedding"}, {"index", i}, {"embedding", r.base64 ? json(base64_floats(e)) : json(e)}});
    }
  }
  send_json(res, 200,
            json{{"object", "list"},
                 {"data", data},
                 {"model", model_id},
                 {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
}

}  // namespace treespec::server
