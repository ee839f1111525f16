// Internal kernel tables shared by ref/ and x86/ (not part of the public kernel API).
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace treespec::kernels::impl {

// Computes y[m, r] for rows r in [r0, r1) of W and all m in [0, M); y has row stride ldy.
using MatmulRowsFn = void (*)(const WeightView& w, const float* x, int64_t M, float* y, int64_t ldy, int64_t r0,
                              int64_t r1);
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);

constexpr int kMaxTypeId = 40;

struct KernelTable {
  MatmulRowsFn matmul_rows[kMaxTypeId] = {};
  ToFloatFn to_float[kMaxTypeId] = {};
};

// Fills `t` with the scalar reference kernels.
void register_ref(KernelTable& t);
// Overrides entries with ISA-specific kernels where they exist (defined in x86/*.cpp;
// weak no-op fallbacks when a file is absent).
void register_avx2(KernelTable& t);
void register_avx512(KernelTable& t);

const KernelTable& table_for(Isa isa);

}  // namespace treespec::kernels::impl
