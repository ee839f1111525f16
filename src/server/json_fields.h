// Field getters the request parsers share (api.cpp, request_fields.cpp): each throws
// ApiError 400 naming the field for a wrong type or a value out of its type's range.
// Not a public header.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "server/api.h"

namespace treespec::server {

// The field, or null when it is absent or JSON null.
const nlohmann::json* field(const nlohmann::json& body, const char* name);
ApiError wrong_type(const char* name, const char* expected, const nlohmann::json& v);
double get_number(const nlohmann::json& body, const char* name, double fallback);
// A number stored in a float field; beyond the float range is a 400.
float get_float(const nlohmann::json& body, const char* name, float fallback);
// An integer, or a float with an integral value.
bool is_integral(const nlohmann::json& v);
int64_t get_integer(const nlohmann::json& body, const char* name, int64_t fallback);
bool get_bool(const nlohmann::json& body, const char* name, bool fallback);
std::string get_string(const nlohmann::json& body, const char* name, const std::string& fallback);
// "<what> is not supported by this server", a 400 naming the field.
ApiError unsupported(const std::string& what, const char* name);

// The sampling fields of request_fields.cpp: typical_p, logit_bias (ids into
// r.sampling.logit_bias, text keys into r.logit_bias_text), logprobs / top_logprobs /
// n_probs, n and best_of.
void parse_sampling_fields(const nlohmann::json& body, Endpoint ep, GenerationRequest& r);

}  // namespace treespec::server
