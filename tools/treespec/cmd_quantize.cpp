// treespec quantize IN.gguf OUT.gguf --type RECIPE (model::quant_recipe: llama.cpp file types or one type)
// Thin wrapper over model::quantize_gguf (rules: src/model/quantize.h).
#include <cstdio>

#include "command.h"
#include "model/quantize.h"
#include "tensor/dtype.h"
#include "treespec/status.h"

namespace {

std::function<int()> setup_quantize(CLI::App& sub) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto type = std::make_shared<std::string>();
  sub.add_option("input", *in, "source GGUF")->required();
  sub.add_option("output", *out, "output GGUF")->required();
  sub.add_option("--type", *type,
                 "llama.cpp's file types with llama-quantize's per-tensor choices (q4_k_m, q5_k_m, q8_0, q6_k, q2_k, "
                 "q3_k_s/m/l, q4_k_s, q5_k_s, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, f16, bf16, f32), or q3_k, q4_k, "
                 "q5_k for one type in every matrix; norms and 1-D tensors stay f32")
      ->required();
  return [in, out, type]() -> int {
    using namespace treespec;
    const auto r = model::quant_recipe(*type);
    if (!r) throw InvalidArgument("--type: unknown type '" + *type + "' (known: " + model::quant_recipe_names() + ")");
    const auto s = model::quantize_gguf(*in, *out, *r);
    std::printf(
        "wrote %s (%s): %zu tensors, %zu %s, %zu with more bits by llama.cpp's rules, %zu fallback (row length "
        "not a multiple of the block), %zu f32; %llu -> %llu bytes\n",
        out->c_str(), r->name.c_str(), s.n_tensors, s.n_quantized, tensor::dtype_name(r->base), s.n_upgraded,
        s.n_fallback, s.n_tensors - s.n_quantized - s.n_upgraded - s.n_fallback,
        static_cast<unsigned long long>(s.bytes_in), static_cast<unsigned long long>(s.bytes_out));
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("quantize", "Convert a GGUF model's weight matrices to another type", setup_quantize);
