// treespec quantize IN.gguf OUT.gguf --type TYPE (every type tensor::quant_supported writes)
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
  sub.add_option("--type", *type, "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k or iq4_xs (one type for every matrix; norms and 1-D tensors stay f32)")->required();
  return [in, out, type]() -> int {
    using namespace treespec;
    const auto t = tensor::dtype_from_name(*type);
    if (!t) throw InvalidArgument("--type: unknown type '" + *type + "'");
    const auto s = model::quantize_gguf(*in, *out, *t);
    std::printf("wrote %s: %zu tensors, %zu %s, %zu fallback (row length not a multiple of the block), %zu f32; "
                "%llu -> %llu bytes\n",
                out->c_str(), s.n_tensors, s.n_quantized, tensor::dtype_name(*t), s.n_fallback,
                s.n_tensors - s.n_quantized - s.n_fallback, static_cast<unsigned long long>(s.bytes_in),
                static_cast<unsigned long long>(s.bytes_out));
    return 0;
  };
}

}  // namespace

TREESPEC_COMMAND("quantize", "Convert a GGUF model's weight matrices to another type", setup_quantize);
