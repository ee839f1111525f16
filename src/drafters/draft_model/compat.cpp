#include "drafters/draft_model/compat.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

namespace {

// Shows a token text safely in one line.
std::string shown(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out.size() > 40 ? out.substr(0, 40) + "..." : out;
}

}  // namespace

void check_draft_compatible(const model::Model& target, const model::Model& draft) {
  const gguf::GgufFile& t = target.gguf();
  const gguf::GgufFile& d = draft.gguf();
  const auto fail = [&](const std::string& what) {
    throw InvalidArgument(fmt::format("draft model '{}' cannot draft for '{}': {}", d.path(), t.path(), what));
  };
  if (draft.hparams().n_vocab != target.hparams().n_vocab) {
    fail(fmt::format("vocabulary size differs (draft {} tokens, target {})", draft.hparams().n_vocab,
                     target.hparams().n_vocab));
  }
  const std::string tm = t.get_string("tokenizer.ggml.model", "");
  const std::string dm = d.get_string("tokenizer.ggml.model", "");
  if (tm != dm) fail(fmt::format("tokenizer.ggml.model differs (draft '{}', target '{}')", dm, tm));
  const bool t_has = t.has("tokenizer.ggml.tokens");
  const bool d_has = d.has("tokenizer.ggml.tokens");
  if (t_has != d_has) {
    fail(fmt::format("only the {} has tokenizer.ggml.tokens, so the vocabularies cannot be compared",
                     t_has ? "target" : "draft"));
  }
  if (t_has) {
    const std::vector<std::string> tt = t.get_string_array("tokenizer.ggml.tokens");
    const std::vector<std::string> dt = d.get_string_array("tokenizer.ggml.tokens");
    if (tt.size() != dt.size()) {
      fail(fmt::format("tokenizer.ggml.tokens has {} entries in the draft, {} in the target", dt.size(), tt.size()));
    }
    for (size_t i = 0; i < tt.size(); ++i) {
      if (tt[i] != dt[i]) {
        fail(fmt::format("token {} is '{}' in the draft but '{}' in the target (tokenizer.ggml.tokens)", i,
                         shown(dt[i]), shown(tt[i])));
      }
    }
  }
  for (const auto& [key, label] : {std::pair<const char*, const char*>{"tokenizer.ggml.bos_token_id", "BOS"},
                                   {"tokenizer.ggml.eos_token_id", "EOS"}}) {
    const int64_t tv = t.get_int(key, -1);
    const int64_t dv = d.get_int(key, -1);
    if (tv != dv) {
      const auto id = [](int64_t v) { return v < 0 ? std::string("none") : fmt::format("{}", v); };
      fail(fmt::format("{} token id differs (draft {}, target {}; {})", label, id(dv), id(tv), key));
    }
  }
}

std::shared_ptr<const model::Model> load_draft_model(const std::string& path, const model::Model& target) {
  // Cache by (file, size, mtime): one mapping per process while drafters use it. The
  // compatibility check is cheap next to loading but runs per target.
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const model::Model>> cache;
  std::string key = path;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) {
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (!ec) key += fmt::format("|{}|{}", size, mtime.time_since_epoch().count());
  }
  static std::map<std::string, std::weak_ptr<const model::Model>> checked;  // key|target -> draft checked
  const std::string checked_key = fmt::format("{}|{}|{}", key, target.gguf().path(), static_cast<const void*>(&target));
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const model::Model> m = cache[key].lock();
  if (!m) {
    m = model::Model::load(path);
    cache[key] = m;
  }
  // The newest draft model stays loaded between sequences even when no drafter holds it
  // (the CLI, the bench and the server make one drafter per sequence, back to back).
  static std::shared_ptr<const model::Model> newest;
  newest = m;
  if (checked[checked_key].lock() != m) {
    check_draft_compatible(target, *m);
    checked[checked_key] = m;
  }
  return m;
}

}  // namespace treespec::drafters
