// AVX-512 (F/BW/VL/DQ) kernels: the float path of simd.h with 16-wide vectors. Compiled
// without -mavx512vnni so nothing here can emit VNNI instructions (see CMakeLists.txt).
// The quantised types of avx2_int8.cpp keep their AVX2 int8 kernels at this level (an
// AVX-512 CPU without VNNI, e.g. Skylake-X): the float path dequantises every weight,
// several times the work of the int8 dot at M = 1 (not measured on such a CPU).
#include "kernels/x86/attention.h"

namespace treespec::kernels::impl {

void register_avx512(KernelTable& t) {
  register_float_path<Avx512>(t);
  register_attention<Avx512>(t);
  register_avx2_int8(t);
}

}  // namespace treespec::kernels::impl
