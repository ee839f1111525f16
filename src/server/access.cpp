#include "server/access.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/files.h"
#include "treespec/status.h"

namespace treespec::server {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace

std::vector<std::string> read_api_key_file(const std::string& path) {
  std::istringstream in(core::read_text_file(path, "API key file"));
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string k = trim(line);
    if (k.empty() || k[0] == '#') continue;
    for (char c : k) {
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
        throw InvalidArgument(
            fmt::format("--api-key-file '{}': the key on line {} contains a space or a control character", path, n));
      }
    }
    keys.push_back(k);
  }
  if (keys.empty())
    throw InvalidArgument(fmt::format("--api-key-file '{}' holds no key (one per line; '#' starts a comment)", path));
  return keys;
}

bool bearer_key_matches(const std::vector<std::string>& keys, const std::string& authorization) {
  const std::string prefix = "Bearer ";
  if (authorization.size() <= prefix.size() || authorization.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string given = authorization.substr(prefix.size());
  bool ok = false;
  for (const std::string& k : keys) ok |= constant_time_equal(given, k);  // no early exit: same time for every key
  return ok;
}

CorsPolicy CorsPolicy::parse(const std::string& spec) {
  CorsPolicy p;
  const std::string s = trim(spec);
  if (s == "*") return p;
  p.any_ = false;
  if (s == "none") return p;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::string o = trim(item);
    const auto scheme = o.find("://");
    const bool ok = scheme != std::string::npos && scheme > 0 && o.size() > scheme + 3 &&
                    o.find('/', scheme + 3) == std::string::npos && o.find_first_of(" \t*") == std::string::npos;
    if (!ok) {
      throw InvalidArgument(
          fmt::format("--cors-origins: '{}' is not an origin (scheme://host[:port], e.g. http://localhost:3000; or '*' "
                      "/ 'none' alone)",
                      o));
    }
    p.origins_.push_back(o);
  }
  if (p.origins_.empty()) throw InvalidArgument("--cors-origins is empty (give '*', 'none' or a list of origins)");
  return p;
}

std::string CorsPolicy::allow_origin(const std::string& origin) const {
  if (any_) return "*";
  if (!origin.empty() && std::find(origins_.begin(), origins_.end(), origin) != origins_.end()) return origin;
  return {};
}

}  // namespace treespec::server
