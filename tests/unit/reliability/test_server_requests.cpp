// Regression tests for fuzz_server findings: request bodies the server's parsers let
// through as something other than a 400 naming the problem.
#include <gtest/gtest.h>

#include <string>

#include "sampling/sampling.h"
#include "server/api.h"
#include "treespec/status.h"

using namespace treespec;
using namespace treespec::server;

namespace {

// HTTP status the parsers give a body (200 = accepted), and the message of a rejection.
int status_of(const std::string& text, Endpoint ep, std::string* message = nullptr) {
  try {
    const GenerationRequest r = parse_generation_request(parse_body(text), ep, sampling::SamplingParams{});
    r.sampling.validate();  // what the engine does once the request is scheduled
  } catch (const ApiError& e) {
    if (message) *message = e.what();
    return e.status();
  }
  return 200;
}

}  // namespace

// Finding 1: a number beyond double range makes nlohmann throw out_of_range (406), not
// parse_error; it escaped parse_body and the server answered 500 "internal error".
TEST(ServerRequests, NumberOverflowIsA400) {
  std::string msg;
  EXPECT_EQ(status_of(R"({"prompt": "x", "temperature": 1e340})", Endpoint::completions, &msg), 400);
  EXPECT_NE(msg.find("number out of range"), std::string::npos) << msg;
  EXPECT_EQ(status_of(R"({"messages": [], "max_tokens": -1e999})", Endpoint::chat), 400);
}

// Finding 2: a finite double beyond float range (temperature 1e300) became temp = inf; the
// parser accepted it and the engine's SamplingParams::validate() refused it after the
// request was queued, so the client got a 500 "server_error" instead of a 400.
TEST(ServerRequests, FloatFieldOutOfFloatRangeIsA400NamingTheField) {
  for (const char* field : {"temperature", "top_p", "min_p"}) {
    std::string msg;
    const std::string body = std::string(R"({"prompt": "x", ")") + field + R"(": 1e300})";
    EXPECT_EQ(status_of(body, Endpoint::completions, &msg), 400) << field;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
    EXPECT_EQ(status_of(std::string(R"({"prompt": "x", ")") + field + R"(": -1e300})", Endpoint::completions), 400);
  }
  // In-range values are still accepted.
  EXPECT_EQ(status_of(R"({"prompt": "x", "temperature": 2.0, "top_p": 1e-50, "min_p": 0})", Endpoint::completions), 400)
      << "top_p 1e-50 rounds to 0 in float and is refused by the (0, 1] check";
  EXPECT_EQ(status_of(R"({"prompt": "x", "temperature": 1e30, "top_p": 0.5, "min_p": 0})", Endpoint::completions), 200);
}
