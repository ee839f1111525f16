// Run-time ISA selection and the public entry points that route to the kernel tables.
#include <cpuid.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/assert.h"
#include "kernels/impl.h"

namespace treespec::kernels {

namespace impl {
// The x86/ files define the register functions. They must be strong references from
// here: with weak fallbacks in this file the linker would never pull the ISA objects
// out of the static library, and every level would silently run the reference kernels
// (the IsaTablesAreLinked test guards this).
#if !defined(__x86_64__)
void register_avx2(KernelTable&) {}
void register_avx512(KernelTable&) {}
void register_avx512_vnni(KernelTable&) {}
#endif

namespace {
KernelTable build_table(Isa isa) {
  KernelTable t;
  register_ref(t);
  if (isa >= Isa::avx2) register_avx2(t);
  if (isa >= Isa::avx512) register_avx512(t);
  if (isa >= Isa::avx512_vnni) register_avx512_vnni(t);
  return t;
}
}  // namespace

float* thread_scratch(int slot, size_t n) {
  thread_local core::AlignedBuffer<float> bufs[4];
  TREESPEC_ASSERT(slot >= 0 && slot < 4, "thread_scratch: slot out of range");
  auto& b = bufs[slot];
  if (b.size() < n) b.resize(n < 1024 ? 1024 : n + n / 4, "kernel scratch");
  return b.data();
}

// Only the levels the CPU has are built: the x86/ register functions are compiled with
// their level's flags, so even filling a table may use its instructions (GCC fills the
// AVX-512 one with EVEX broadcasts), and calling register_avx512 on an AVX2-only CPU
// dies with SIGILL. A level the CPU lacks gets the table of the best level below it (as
// set_active_isa clamps). Built once; every kernel call then only indexes the array.
const KernelTable& table_for(Isa isa) {
  static std::array<KernelTable, 4> built;
  static const std::array<const KernelTable*, 4> tables = [] {
    std::array<const KernelTable*, 4> t{};
    for (int level = 0; level < 4; ++level) {
      if (level > 0 && !isa_supported(static_cast<Isa>(level))) {
        t[level] = t[level - 1];
      } else {
        built[level] = build_table(static_cast<Isa>(level));
        t[level] = &built[level];
      }
    }
    return t;
  }();
  return *tables[static_cast<size_t>(isa)];
}
}  // namespace impl

namespace {
std::atomic<int> g_active{-1};

#if defined(__x86_64__)
// CPUID + XGETBV instead of __builtin_cpu_supports, which clang 14 (the fuzz build)
// rejects for "f16c". A feature counts only if the CPU has it AND the OS saves the
// register state it needs (XCR0), as __builtin_cpu_supports also checks.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
};

CpuFeatures read_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
  if (!osxsave || !avx) return f;
  uint32_t xcr0 = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0 & 0x6u) != 0x6u) return f;             // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xE0u) == 0xE0u;  // opmask, ZMM_Hi256, Hi16_ZMM
  f.fma = (c >> 12) & 1u;
  f.f16c = (c >> 29) & 1u;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b >> 5) & 1u;
  if (os_avx512) {
    f.avx512f = (b >> 16) & 1u;
    f.avx512dq = (b >> 17) & 1u;
    f.avx512bw = (b >> 30) & 1u;
    f.avx512vl = (b >> 31) & 1u;
    f.avx512vnni = (c >> 11) & 1u;
  }
  return f;
}
#endif

bool detect(Isa isa) {
#if defined(__x86_64__)
  static const CpuFeatures f = read_cpu_features();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::avx512: return detect(Isa::avx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    case Isa::avx512_vnni: return detect(Isa::avx512) && f.avx512vnni;
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

bool cpu_has_amx() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ((d >> 24) & 1u) && ((d >> 25) & 1u);  // AMX-TILE, AMX-INT8
#else
  return false;
#endif
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

namespace {
// Quantised activations of the current matmul, owned by the calling thread and read by
// the pool's workers while that call runs.
struct ActBuffers {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s;
};
}  // namespace

void matmul(const WeightView& w, const float* x, int64_t M, float* y, core::ThreadPool* pool) {
  const WeightView* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_multi(ws, ys, 1, x, M, pool);
}

void matmul_multi(const WeightView* const* ws, float* const* ys, int n, const float* x, int64_t M,
                  core::ThreadPool* pool) {
  const impl::KernelTable& t = impl::table_for(active_isa());
  if (M <= 0 || n <= 0) return;
  const int64_t n_in = ws[0]->n_in;
  bool need_q8 = false;
  constexpr int kMaxJobs = 8;
  TREESPEC_ASSERT(n <= kMaxJobs, "matmul_multi: too many matrices");
  impl::MatmulRowsFn fns[kMaxJobs];
  int64_t grain[kMaxJobs], first_tile[kMaxJobs + 1];
  first_tile[0] = 0;
  for (int j = 0; j < n; ++j) {
    const auto id = static_cast<uint32_t>(ws[j]->type);
    TREESPEC_ASSERT(id < impl::kMaxTypeId, "matmul: dtype id out of range");
    TREESPEC_ASSERT(ws[j]->n_in == n_in, "matmul_multi: matrices must share n_in");
    fns[j] = t.matmul_rows[id];
    TREESPEC_ASSERT(fns[j] != nullptr, "matmul: unsupported dtype (loader must reject it)");
    need_q8 |= t.act[id] == impl::ActFormat::q8;
    grain[j] = t.row_grain[id] > 0 ? t.row_grain[id] : 16;
    first_tile[j + 1] = first_tile[j] + (ws[j]->n_out + grain[j] - 1) / grain[j];
  }
  const int n_threads = pool == nullptr ? 1 : pool->n_threads();

  impl::ActQ8 act;
  const impl::ActQ8* xq = nullptr;
  if (need_q8) {
    TREESPEC_ASSERT(n_in % impl::kActBlock == 0, "matmul: q8 activations need n_in % 32 == 0");
    thread_local ActBuffers buf;
    const int64_t nb = n_in / impl::kActBlock;
    buf.q.resize(static_cast<size_t>(M * n_in));
    buf.d.resize(static_cast<size_t>(M * nb));
    buf.s.resize(static_cast<size_t>(M * nb));
    // Plain pointers: inside the lambda `buf` would name the *worker's* thread_local.
    int8_t* q = buf.q.data();
    float* d = buf.d.data();
    int32_t* s = buf.s.data();
    auto quant = [&](int64_t b, int64_t e, int) {
      for (int64_t m = b; m < e; ++m) t.quantize_act(x + m * n_in, n_in, q + m * n_in, d + m * nb, s + m * nb);
    };
    if (n_threads > 1 && M * n_in >= 32768) {
      pool->parallel_for(M, 1, quant);
    } else {
      quant(0, M, 0);
    }
    act = {q, d, s};
    xq = &act;
  }
  // Tiles [b, e) of the concatenated tile list -> row ranges of each matrix. Ranges are
  // whole tiles (16 rows), so no two threads write one cache line of a y.
  auto run_tiles = [&](int64_t b, int64_t e, int) {
    for (int j = 0; j < n && b < e; ++j) {
      const int64_t tb = std::max(b, first_tile[j]), te = std::min(e, first_tile[j + 1]);
      if (tb >= te) continue;
      const WeightView& w = *ws[j];
      const int64_t r0 = (tb - first_tile[j]) * grain[j];
      const int64_t r1 = std::min((te - first_tile[j]) * grain[j], w.n_out);
      fns[j](w, x, xq, M, ys[j], w.n_out, r0, r1);
    }
  };
  if (n_threads == 1) {
    run_tiles(0, first_tile[n], 0);
    return;
  }
  // About 4 chunks per thread so a descheduled thread (shared machine) does not hold
  // everyone up; the pool gives each chunk a contiguous tile range.
  pool->parallel_for(first_tile[n], 1, run_tiles);
}

int64_t packed_bytes(const WeightView& w) {
  const auto id = static_cast<uint32_t>(w.type);
  if (id >= impl::kMaxTypeId) return 0;
  const impl::PackFn fn = impl::table_for(best_isa()).pack[id];
  return fn == nullptr ? 0 : fn(w, nullptr);
}

void pack_weights(const WeightView& w, void* dst) {
  const auto id = static_cast<uint32_t>(w.type);
  TREESPEC_ASSERT(id < impl::kMaxTypeId && impl::table_for(best_isa()).pack[id], "pack_weights: no packed layout");
  TREESPEC_ASSERT((reinterpret_cast<uintptr_t>(dst) & 63) == 0, "pack_weights: dst must be 64-byte aligned");
  impl::table_for(best_isa()).pack[id](w, dst);
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

void rmsnorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  impl::table_for(active_isa()).rmsnorm(x, weight, y, n, eps);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  impl::table_for(active_isa()).swiglu(gate, up, out, n);
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  impl::table_for(active_isa()).geglu(gate, up, out, n);
}

void softmax(float* x, int64_t n) { impl::table_for(active_isa()).softmax(x, n); }
void softcap(float* x, int64_t n, float cap) { impl::table_for(active_isa()).softcap(x, n, cap); }

int64_t attention_scratch_floats(int64_t n_rows, int64_t n_head, int64_t max_visible) {
  return n_rows * n_head * max_visible;
}

bool kv_type_supported(tensor::DType t) {
  using tensor::DType;
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::q8_0;
}

void attention_rows(const AttentionRows& a) {
  if (a.n_rows <= 0) return;
  TREESPEC_ASSERT(kv_type_supported(a.k.type) && kv_type_supported(a.v.type), "attention: unsupported KV element type");
  TREESPEC_ASSERT((a.k.type != tensor::DType::q8_0 && a.v.type != tensor::DType::q8_0) ||
                      a.head_dim % tensor::kQK8_0 == 0,
                  "attention: q8_0 KV rows need a head size that is a multiple of 32");
  impl::table_for(active_isa()).attention_rows(a);
}

void attention_row(const float* q, const float* k, const float* v, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                   int64_t n_cells, int64_t n_committed, const int32_t* extra, int64_t n_extra, float scale,
                   float* scratch, float* out) {
  // One query head at a time so `scratch` needs only n_committed + n_extra floats (the
  // documented contract); results equal the multi-head call bit for bit.
  const int64_t group = n_head / n_head_kv;
  const int32_t n_ex = static_cast<int32_t>(n_extra);
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t g = h / group;
    AttentionRows a;
    a.q = q + h * head_dim;
    a.out = out + h * head_dim;
    a.n_rows = 1;
    a.n_head = 1;
    a.head_dim = head_dim;
    a.k = KvRows::contiguous(k + g * n_cells * head_dim, head_dim);
    a.v = KvRows::contiguous(v + g * n_cells * head_dim, head_dim);
    a.n_committed = n_committed;
    a.extra = &extra;
    a.n_extra = &n_ex;
    a.scale = scale;
    a.scratch = scratch;
    impl::table_for(active_isa()).attention_rows(a);
  }
}

}  // namespace treespec::kernels
