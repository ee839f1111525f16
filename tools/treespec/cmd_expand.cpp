// treespec expand -m SMALL.gguf -o BIG.gguf --dim D --ffn F --layers L [--heads H]
//                 [--head-dim HD] [--type q8_0] [--seed S]
// Function-preserving expansion for memory-bound benchmarks (docs/expand.md).
#include <fmt/format.h>

#include <cstdio>

#include "command.h"
#include "model/expand.h"
#include "tensor/dtype.h"
#include "treespec/status.h"

namespace {

struct ExpandArgs {
  std::string in, out, type;
  treespec::model::ExpandOptions opts;
};

std::function<int()> setup_expand(CLI::App& sub) {
  auto a = std::make_shared<ExpandArgs>();
  sub.add_option("-m,--model", a->in, "source GGUF (llama)")->required();
  sub.add_option("-o,--output", a->out, "expanded GGUF")->required();
  sub.add_option("--dim", a->opts.n_embd, "new embedding width")->required();
  sub.add_option("--ffn", a->opts.n_ff, "new feed-forward width")->required();
  sub.add_option("--layers", a->opts.n_layer, "new number of layers")->required();
  sub.add_option("--heads", a->opts.n_head, "new number of attention heads (default dim / head-dim)");
  sub.add_option("--head-dim", a->opts.head_dim, "new head dimension, a multiple of the source's (default: keep)");
  sub.add_option("--type", a->type, "weight type of all matrices (default: keep each source tensor's type)");
  sub.add_option("--seed", a->opts.seed, "seed of the random filler")->capture_default_str();
  return [a]() -> int {
    using namespace treespec;
    if (!a->type.empty()) {
      const auto t = tensor::dtype_from_name(a->type);
      if (!t) throw InvalidArgument("--type: unknown type '" + a->type + "'");
      a->opts.type = *t;
    }
    const auto s = model::expand_gguf(a->in, a->out, a->opts);
    std::string pos;
    for (size_t i = 0; i < s.real_layer_pos.size(); ++i) pos += (i ? "," : "") + std::to_string(s.real_layer_pos[i]);
    std::printf("wrote %s: dim %d, ffn %d, %d layers (source layers at %s), %d heads / %d kv heads of %d; "
                "%llu parameters, %llu bytes of tensor data\n",
                a->out.c_str(), s.n_embd, s.n_ff, s.n_layer, pos.c_str(), s.n_head, s.n_head_kv, s.head_dim,
                static_cast<unsigned long long>(s.n_params), static_cast<unsigned long long>(s.tensor_bytes));
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("expand", "Function-preserving expansion of a model to a larger size (memory-bound benchmarks)",
                 setup_expand);
