#include "llama_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string_view>

#include "treespec/status.h"

namespace treespec::cli {

namespace {

enum class Kind { alias, ignored, chat };
enum class Value { none, required, optional_on_off };

struct LlamaFlag {
  std::initializer_list<std::string_view> names;
  Kind kind;
  Value value;
  std::string_view text;  // alias: the long form; ignored: why it does not apply
};

constexpr std::string_view kGpu = "GPU offload does not apply to this CPU engine";

const LlamaFlag kFlags[] = {
    {{"-np"}, Kind::alias, Value::none, "--parallel"},
    {{"-md"}, Kind::alias, Value::none, "--model-draft"},
    {{"-ub"}, Kind::alias, Value::none, "--ubatch-size"},
    {{"-ctk"}, Kind::alias, Value::none, "--cache-type-k"},
    {{"-ctv"}, Kind::alias, Value::none, "--cache-type-v"},
    {{"-sys"}, Kind::alias, Value::none, "--system-prompt"},
    {{"-jf"}, Kind::alias, Value::none, "--json-schema-file"},
    {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, Kind::ignored, Value::required, kGpu},
    {{"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"}, Kind::ignored, Value::required, kGpu},
    {{"-fa", "--flash-attn"},
     Kind::ignored,
     Value::optional_on_off,
     "flash attention is a GPU kernel; this CPU engine has its own"},
    {{"-sm", "--split-mode"}, Kind::ignored, Value::required, "there are no GPUs to split the model across"},
    {{"-mg", "--main-gpu"}, Kind::ignored, Value::required, "there is no GPU to choose"},
    {{"-ts", "--tensor-split"}, Kind::ignored, Value::required, "there are no GPUs to split tensors across"},
    {{"-dev", "--device"}, Kind::ignored, Value::required, "the CPU is the only device"},
    {{"-nkvo", "--no-kv-offload"}, Kind::ignored, Value::none, "the KV cache always lives in RAM"},
    {{"--mlock"}, Kind::ignored, Value::none, "the model is not locked in RAM"},
    {{"--no-mmap", "--mmap"}, Kind::ignored, Value::none, "the model file is always memory-mapped"},
    {{"-cb", "--cont-batching"}, Kind::ignored, Value::none, "continuous batching is always on"},
    {{"-cnv", "--conversation", "-i", "--interactive", "-if", "--interactive-first"}, Kind::chat, Value::none, ""},
};

const LlamaFlag* find_flag(std::string_view name) {
  for (const auto& f : kFlags) {
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
  }
  return nullptr;
}

bool is_on_off(std::string_view v) {
  for (std::string_view w : {"on", "off", "auto", "1", "0", "true", "false"}) {
    if (v == w) return true;
  }
  return false;
}

// "-xy..." with letters only: CLI11 would read it as the flags -x -y ... (or -x with the
// value "y..."); "-n128" and "-1" stay as they are.
bool is_multi_letter_short(std::string_view a) {
  if (a.size() < 3 || a[0] != '-' || a[1] == '-') return false;
  return std::all_of(a.begin() + 1, a.end(),
                     [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '-'; });
}

}  // namespace

std::vector<std::string> rewrite_llama_flags(int argc, char** argv, std::FILE* warn) {
  std::vector<std::string> out;
  bool literal = false;  // after "--"
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i == 0 || literal || a.empty() || a[0] != '-') {
      out.push_back(std::move(a));
      continue;
    }
    if (a == "--") literal = true;
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const LlamaFlag* f = find_flag(name);
    if (f == nullptr) {
      if (is_multi_letter_short(name)) {
        throw InvalidArgument(
            fmt::format("unknown option '{}' (one dash takes one letter; see --help for the options)", name));
      }
      out.push_back(std::move(a));
      continue;
    }
    if (f->kind == Kind::chat) {
      // llama-cli's conversation mode: `run -cnv ...` is `chat ...`.
      if (out.size() >= 2 && (out[1] == "run" || out[1] == "chat")) {
        out[1] = "chat";
        continue;
      }
      throw InvalidArgument(
          fmt::format("{} starts a conversation: use `treespec chat -m MODEL` (or `treespec run -cnv`)", name));
    }
    if (f->kind == Kind::alias) {
      out.push_back(std::string(f->text) + (eq == std::string::npos ? "" : a.substr(eq)));
      continue;
    }
    std::string shown = a;
    const bool next_is_value =
        eq == std::string::npos && i + 1 < argc &&
        (f->value == Value::required || (f->value == Value::optional_on_off && is_on_off(argv[i + 1])));
    if (next_is_value) shown += std::string(" ") + argv[++i];
    if (warn != nullptr)
      std::fprintf(warn, "treespec: warning: %s ignored: %s\n", shown.c_str(), std::string(f->text).c_str());
  }
  return out;
}

}  // namespace treespec::cli
