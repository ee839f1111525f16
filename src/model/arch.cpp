#include "model/arch.h"

#include <iterator>

namespace treespec::model {

namespace {

// Read from llama.cpp's graphs for each family (docs/models.md, "Architectures").
//   name      neox   qkv bias             qk_norm post   act                 emb    qkv    gate_up swa nope
constexpr ArchTraits kArchs[] = {
    {"llama", false, BiasRule::optional, false, false, FfnAct::silu, false, false, false, 0},
    {"qwen2", true, BiasRule::required, false, false, FfnAct::silu, false, false, false, 0},
    {"qwen3", true, BiasRule::none, true, false, FfnAct::silu, false, false, false, 0},
    {"gemma2", true, BiasRule::none, false, true, FfnAct::gelu_tanh, true, false, false, 2},
    {"gemma3", true, BiasRule::none, true, true, FfnAct::gelu_tanh, true, false, false, 6},
    {"phi3", true, BiasRule::none, false, false, FfnAct::silu, false, true, true, 1},
    {"smollm3", false, BiasRule::none, false, false, FfnAct::silu, false, false, false, 0, 4},
    {"ernie4_5", false, BiasRule::optional, false, false, FfnAct::silu, false, false, false, 0},
    {"granite", false, BiasRule::optional, false, false, FfnAct::silu, false, false, false, 0, 0, true},
};

}  // namespace

const ArchTraits* find_arch(const std::string& arch) {
  for (const ArchTraits& t : kArchs) {
    if (arch == t.name) return &t;
  }
  return nullptr;
}

bool is_swa_layer(const ArchTraits& t, int64_t il) {
  return t.swa_period == 1 || (t.swa_period > 1 && il % t.swa_period < t.swa_period - 1);
}

bool uses_rope(const ArchTraits& t, int64_t il) { return t.nope_period == 0 || (il + 1) % t.nope_period != 0; }

int64_t query_scale_dim(const std::string& arch, int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t head_dim) {
  if ((arch == "gemma2" && n_layer == 46) || (arch == "gemma3" && n_layer == 62)) return n_embd / n_head;
  return head_dim;
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
