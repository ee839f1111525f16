// Errors and statuses shared by every module.
//
// Setup and I/O problems (bad file, missing tensor, bad option) throw a subclass of
// treespec::Error whose message names the culprit (file, key, tensor, field, limit).
// Expected runtime conditions in per-token loops (context full, cancelled, stop reached)
// are returned as a Status instead.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace treespec {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A file is not what it claims to be (corrupt, truncated, inconsistent).
class FormatError : public Error {
 public:
  using Error::Error;
};

// A caller-supplied value is out of range or inconsistent (flag, tree, request field).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Well-formed input that treespec does not handle (architecture, tensor type, ...).
class Unsupported : public Error {
 public:
  using Error::Error;
};

// The operating system refused (open, mmap, read).
class IoError : public Error {
 public:
  using Error::Error;
};

enum class StatusCode {
  ok = 0,
  context_full,  // the sequence's KV cache cannot hold the requested rows
  cancelled,     // the caller asked to stop
  invalid,       // a request-level argument is invalid
  no_slot,       // no free sequence slot
  kv_full,       // the shared KV cache pool has no free block for the rows
};

const char* status_code_name(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

}  // namespace treespec
