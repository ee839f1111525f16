#include "treespec/status.h"

namespace treespec {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::context_full: return "context_full";
    case StatusCode::cancelled: return "cancelled";
    case StatusCode::invalid: return "invalid";
    case StatusCode::no_slot: return "no_slot";
    case StatusCode::kv_full: return "kv_full";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s = status_code_name(code_);
  if (!message_.empty()) s += ": " + message_;
  return s;
}

}  // namespace treespec
