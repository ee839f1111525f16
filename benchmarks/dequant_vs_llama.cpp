// dequant_vs_llama A.gguf B.gguf: compares treespec's dequantisation of every tensor of
// A with the F32 tensors of B, where B was written by llama.cpp's own dequantiser
// (`llama-quantize --allow-requantize A B F32`; benchmarks/dequant_vs_llama.sh makes
// both). Prints, per weight type, the tensors compared and the values that differ in
// any bit; exits 1 if any does. A conformance check against the anchor, run by hand
// (never a build or test dependency): docs/kernels.md, "Weight types".
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/quant.h"

using namespace treespec;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s QUANTISED.gguf LLAMA_F32.gguf\n", argv[0]);
    return 2;
  }
  try {
    const auto a = gguf::GgufFile::open(argv[1]);
    const auto b = gguf::GgufFile::open(argv[2]);
    std::map<std::string, const gguf::TensorInfo*> ref;
    for (const auto& t : b->tensors()) ref[t.name] = &t;
    std::map<std::string, std::pair<long, long>> per_type;  // type -> (tensors, differing values)
    long total_bad = 0;
    for (const auto& t : a->tensors()) {
      const auto it = ref.find(t.name);
      if (it == ref.end() || it->second->type != tensor::DType::f32) {
        std::fprintf(stderr, "%s: no F32 tensor '%s'\n", argv[2], t.name.c_str());
        return 2;
      }
      if (!tensor::quant_supported(t.type)) {
        std::fprintf(stderr, "%s: type %s is not one treespec reads\n", t.name.c_str(), tensor::dtype_name(t.type));
        return 2;
      }
      const int64_t n = t.ne[0];
      int64_t rows = 1;
      for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
      const int64_t rb = tensor::row_bytes(t.type, n);
      std::vector<float> y(static_cast<size_t>(n));
      long bad = 0;
      for (int64_t row = 0; row < rows; ++row) {
        tensor::dequantize_row(t.type, t.data + row * rb, y.data(), n);
        const auto* r = reinterpret_cast<const float*>(it->second->data) + row * n;
        for (int64_t i = 0; i < n; ++i) {
          if (std::memcmp(&y[static_cast<size_t>(i)], &r[i], 4) == 0) continue;
          if (bad++ < 3) {
            std::printf("  %s row %lld col %lld: treespec %.9g, llama.cpp %.9g\n", t.name.c_str(),
                        static_cast<long long>(row), static_cast<long long>(i), y[static_cast<size_t>(i)], r[i]);
          }
        }
      }
      auto& p = per_type[tensor::dtype_name(t.type)];
      ++p.first;
      p.second += bad;
      total_bad += bad;
    }
    for (const auto& [type, v] : per_type)
      std::printf("%-7s %3ld tensors, %ld values differ\n", type.c_str(), v.first, v.second);
    return total_bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
