// AVX-512 (F/BW/VL/DQ) kernels: the float path of simd.h with 16-wide vectors. Compiled
// without -mavx512vnni so nothing here can emit VNNI instructions (see CMakeLists.txt).
#include "kernels/x86/simd.h"

namespace treespec::kernels::impl {

void register_avx512(KernelTable& t) { register_float_path<Avx512>(t); }

}  // namespace treespec::kernels::impl
