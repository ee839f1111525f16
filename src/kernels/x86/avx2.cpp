// AVX2 + FMA + F16C kernels: the float path of simd.h with 8-wide vectors, then the
// int8 kernels of avx2_int8.cpp for every quantised type but Q4_1 / Q5_0 / Q5_1 (those
// are dequantised per tile and multiplied in f32).
#include "kernels/x86/attention.h"

namespace treespec::kernels::impl {

void register_avx2(KernelTable& t) {
  register_float_path<Avx2>(t);
  register_attention<Avx2>(t);
  register_avx2_int8(t);
}

}  // namespace treespec::kernels::impl
