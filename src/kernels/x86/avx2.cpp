// AVX2 + FMA + F16C kernels: the float path of simd.h with 8-wide vectors. Integer
// (VNNI) kernels need AVX-512 here; on an AVX2-only CPU quantised weights are
// dequantised per tile and multiplied in f32.
#include "kernels/x86/simd.h"

namespace treespec::kernels::impl {

void register_avx2(KernelTable& t) { register_float_path<Avx2>(t); }

}  // namespace treespec::kernels::impl
