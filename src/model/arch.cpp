#include "model/arch.h"

#include <iterator>

namespace treespec::model {

namespace {

// Read from llama.cpp's graphs for each family (docs/models.md, "Architectures").
//   name      neox   qkv bias             qk_norm post   act                 emb    qkv    gate_up swa
constexpr ArchTraits kArchs[] = {
    {"llama", false, BiasRule::optional, false, false, FfnAct::silu, false, false, false, 0},
    {"qwen2", true, BiasRule::required, false, false, FfnAct::silu, false, false, false, 0},
    {"qwen3", true, BiasRule::none, true, false, FfnAct::silu, false, false, false, 0},
    {"gemma2", true, BiasRule::none, false, true, FfnAct::gelu_tanh, true, false, false, 2},
    {"gemma3", true, BiasRule::none, true, true, FfnAct::gelu_tanh, true, false, false, 6},
    {"phi3", true, BiasRule::none, false, false, FfnAct::silu, false, true, true, 1},
};

}  // namespace

const ArchTraits* find_arch(const std::string& arch) {
  for (const ArchTraits& t : kArchs) {
    if (arch == t.name) return &t;
  }
  return nullptr;
}

std::string supported_archs() {
  std::string out;
  for (const ArchTraits& t : kArchs) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

}  // namespace treespec::model
