// Who may call the server: API keys (--api-key, --api-key-file) and the browser origins
// CORS allows (--cors-origins). Pure functions of the configuration; server.cpp applies
// them to every request. docs/server.md, "Authentication and CORS".
#pragma once

#include <string>
#include <vector>

namespace treespec::server {

// The keys of an --api-key-file: one per line, surrounding whitespace trimmed, blank
// lines and lines starting with '#' skipped. IoError when the file cannot be read,
// InvalidArgument when it holds no key or a key contains a space or a control character.
std::vector<std::string> read_api_key_file(const std::string& path);

// Whether an Authorization header value is "Bearer <one of keys>" (constant time per key).
bool bearer_key_matches(const std::vector<std::string>& keys, const std::string& authorization);

// --cors-origins: "*" (any origin; the default), "none" (no CORS headers: browsers on
// other origins cannot read answers), or a comma-separated list of origins such as
// "https://app.example,http://localhost:3000" (scheme://host[:port], no path).
class CorsPolicy {
 public:
  CorsPolicy() = default;
  // InvalidArgument naming the entry that is not an origin.
  static CorsPolicy parse(const std::string& spec);
  // The Access-Control-Allow-Origin value for a request with this Origin header ("" when
  // the response gets none).
  std::string allow_origin(const std::string& origin) const;
  bool enabled() const { return any_ || !origins_.empty(); }
  bool any() const { return any_; }

 private:
  bool any_ = true;
  std::vector<std::string> origins_;
};

}  // namespace treespec::server
