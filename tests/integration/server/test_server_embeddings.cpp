// POST /v1/embeddings on `treespec serve`: OpenAI's request and answer shapes (string,
// list, token-id inputs; float and base64 encodings; usage), deterministic vectors of
// unit length, --pooling, and bad input answered by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "common/server_process.h"
#include "common/test_util.h"

using namespace treespec::test;
using nlohmann::json;

namespace {

std::vector<float> from_base64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string bytes;
  uint32_t w = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    w = (w << 6) | static_cast<uint32_t>(val(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((w >> bits) & 0xff);
    }
  }
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}
}  // namespace

TEST(ServerEmbeddings, OpenAiShapesDeterministicUnitVectors) {
  ServerProcess srv(kKjvModel, {"-t", "1"});
  auto c = srv.client();
  const HttpReply r =
      post_json(c, "/v1/embeddings",
                json{{"input", {"And it came to pass", "In the beginning"}}, {"model", "kjv-5m"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json();
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "kjv-5m");
  ASSERT_EQ(j["data"].size(), 2u);
  const std::vector<float> a = j["data"][0]["embedding"], b = j["data"][1]["embedding"];
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][0]["object"], "embedding");
  ASSERT_EQ(a.size(), 256u);  // kjv-5m's n_embd
  double na = 0.0;
  for (float x : a) na += static_cast<double>(x) * x;
  EXPECT_NEAR(na, 1.0, 1e-5);
  EXPECT_NE(a, b);
  // usage counts the tokens as /tokenize does with BOS.
  const size_t n0 = post_json(c, "/tokenize", json{{"content", "And it came to pass"}, {"add_special", true}}.dump())
                        .json()["tokens"]
                        .size();
  const size_t n1 = post_json(c, "/tokenize", json{{"content", "In the beginning"}, {"add_special", true}}.dump())
                        .json()["tokens"]
                        .size();
  EXPECT_EQ(j["usage"]["prompt_tokens"], n0 + n1);
  // The same text alone, as token ids, and base64 (what the OpenAI clients ask for): the same vector.
  EXPECT_EQ(post_json(c, "/v1/embeddings", json{{"input", "And it came to pass"}}.dump())
                .json()["data"][0]["embedding"]
                .get<std::vector<float>>(),
            a);
  const json ids = post_json(c, "/tokenize", json{{"content", "And it came to pass"}, {"add_special", true}}.dump())
                       .json()["tokens"];
  EXPECT_EQ(
      post_json(c, "/embeddings", json{{"input", ids}}.dump()).json()["data"][0]["embedding"].get<std::vector<float>>(),
      a);
  const json b64 =
      post_json(c, "/v1/embeddings", json{{"input", "And it came to pass"}, {"encoding_format", "base64"}}.dump())
          .json();
  EXPECT_EQ(from_base64(b64["data"][0]["embedding"].get<std::string>()), a);

  for (const json& bad :
       {json{{"input", json::array()}}, json{{"input", ""}}, json{{"input", {1, -3}}}, json{{"input", {1, 999999}}},
        json{{"input", 3}}, json{{"input", "x"}, {"encoding_format", "int8"}}, json{{"input", "x"}, {"dimensions", 64}},
        json::object()}) {
    const HttpReply e = post_json(c, "/v1/embeddings", bad.dump());
    EXPECT_EQ(e.status, 400) << bad.dump() << " " << e.body;
  }
  EXPECT_EQ(post_json(c, "/v1/embeddings", json{{"input", "x"}, {"model", "other"}}.dump()).status, 404);
  std::string longer;
  for (int i = 0; i < 400; ++i) longer += "and the king ";
  const HttpReply too_long = post_json(c, "/v1/embeddings", json{{"input", longer}}.dump());
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.json()["error"]["code"], "context_length_exceeded") << too_long.body;
}

TEST(ServerEmbeddings, PoolingFlag) {
  std::vector<float> mean, last;
  {
    ServerProcess srv(kKjvModel, {"-t", "1"});
    auto c = srv.client();
    mean = post_json(c, "/v1/embeddings", json{{"input", "And it came to pass"}}.dump())
               .json()["data"][0]["embedding"]
               .get<std::vector<float>>();
  }
  {
    ServerProcess srv(kKjvModel, {"-t", "1", "--pooling", "last"});
    auto c = srv.client();
    last = post_json(c, "/v1/embeddings", json{{"input", "And it came to pass"}}.dump())
               .json()["data"][0]["embedding"]
               .get<std::vector<float>>();
  }
  ASSERT_EQ(mean.size(), last.size());
  EXPECT_NE(mean, last);
  const CliResult r = run_treespec("serve -m " + kKjvModel + " --port 0 --pooling none");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--pooling 'none'"), std::string::npos) << r.err;
}
