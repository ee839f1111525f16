// Run-time ISA selection and the public entry points that route to the kernel tables.
#include <atomic>
#include <cstring>

#include "core/assert.h"
#include "kernels/impl.h"

namespace treespec::kernels {

namespace impl {
// ISA files override these; without them the reference kernels are used.
__attribute__((weak)) void register_avx2(KernelTable&) {}
__attribute__((weak)) void register_avx512(KernelTable&) {}

namespace {
KernelTable build_table(Isa isa) {
  KernelTable t;
  register_ref(t);
  if (isa >= Isa::avx2) register_avx2(t);
  if (isa >= Isa::avx512) register_avx512(t);
  return t;
}
}  // namespace

const KernelTable& table_for(Isa isa) {
  static const KernelTable tables[] = {build_table(Isa::scalar), build_table(Isa::avx2), build_table(Isa::avx512),
                                       build_table(Isa::avx512_vnni)};
  return tables[static_cast<int>(isa)];
}
}  // namespace impl

namespace {
std::atomic<int> g_active{-1};

bool detect(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::avx512:
      return detect(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Isa::avx512_vnni: return detect(Isa::avx512) && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::scalar;
#endif
}
}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_vnni: return "avx512_vnni";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  static const bool supported[] = {detect(Isa::scalar), detect(Isa::avx2), detect(Isa::avx512),
                                   detect(Isa::avx512_vnni)};
  return supported[static_cast<int>(isa)];
}

Isa best_isa() {
  for (int i = static_cast<int>(Isa::avx512_vnni); i > 0; --i) {
    if (isa_supported(static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return Isa::scalar;
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a < 0) {
    a = static_cast<int>(best_isa());
    g_active.store(a, std::memory_order_relaxed);
  }
  return static_cast<Isa>(a);
}

void set_active_isa(Isa isa) {
  while (static_cast<int>(isa) > 0 && !isa_supported(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
}

bool dtype_supported(tensor::DType type) {
  const auto id = static_cast<uint32_t>(type);
  return id < impl::kMaxTypeId && impl::table_for(Isa::scalar).matmul_rows[id] != nullptr;
}

void matmul(const WeightView& w, const float* x, int64_t M, float* y, core::ThreadPool* pool) {
  const auto id = static_cast<uint32_t>(w.type);
  TREESPEC_ASSERT(id < impl::kMaxTypeId, "matmul: dtype id out of range");
  const auto fn = impl::table_for(active_isa()).matmul_rows[id];
  TREESPEC_ASSERT(fn != nullptr, "matmul: unsupported dtype (loader must reject it)");
  if (M <= 0 || w.n_out <= 0) return;
  if (pool == nullptr || pool->n_threads() == 1) {
    fn(w, x, M, y, w.n_out, 0, w.n_out);
    return;
  }
  // Split output rows; keep chunks a multiple of 16 rows for the vector kernels.
  const int64_t grain = 16;
  pool->parallel_for((w.n_out + grain - 1) / grain, 1, [&](int64_t b, int64_t e, int) {
    const int64_t r0 = b * grain;
    const int64_t r1 = e * grain < w.n_out ? e * grain : w.n_out;
    fn(w, x, M, y, w.n_out, r0, r1);
  });
}

void to_float(tensor::DType type, const void* src, float* dst, int64_t n) {
  const auto id = static_cast<uint32_t>(type);
  TREESPEC_ASSERT(id < impl::kMaxTypeId && impl::table_for(Isa::scalar).to_float[id], "to_float: unsupported dtype");
  impl::table_for(active_isa()).to_float[id](src, dst, n);
}

void get_row(const WeightView& w, int64_t r, float* out) {
  TREESPEC_ASSERT(r >= 0 && r < w.n_out, "get_row: row out of range");
  to_float(w.type, static_cast<const uint8_t*>(w.data) + r * w.row_bytes(), out, w.n_in);
}

}  // namespace treespec::kernels
