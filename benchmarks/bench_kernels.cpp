// Kernel microbenchmarks. Counters: bytes_per_second = weight bytes streamed (matmul) or
// K/V bytes read (attention); FLOPS = 2 * n_in * n_out * M (matmul).
//
//   BM_Matmul/<type>/<isa>/M/threads   weights of about 96 MB (well beyond the 32 MB L3),
//                                      so M = 1 measures DRAM streaming and M = 16 / 64
//                                      shows what extra tree rows cost.
//   BM_MatmulL2/<type>/<isa>/M/1      ~0.5 MB of weights (in L2): compute rate alone.
//                                      Every level gets the load-time packed copy (the
//                                      best level's layout; a kernel of another layout
//                                      reads the GGUF rows).
//   BM_Attention/<tree>/threads/softcap  8 KV heads x group 2, head_dim 128, 1024
//                                      committed cells, a random tree of 1 / 16 / 64 rows;
//                                      softcap 50: Gemma 2's attention soft-capping.
//   BM_ReadBandwidth/threads           kernels::measure_read_bandwidth (1 GiB).
//
// Filter with --benchmark_filter, e.g. 'BM_Matmul/q8_0/avx512_vnni'.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "tensor/quant.h"

using namespace treespec;
using tensor::DType;

namespace {

constexpr int64_t kNIn = 4096;
constexpr int64_t kWeightBytes = int64_t{96} << 20;

struct BenchWeights {
  std::vector<uint8_t> bytes;
  core::AlignedBuffer<uint8_t> packed_bytes;
  kernels::WeightView view;
  kernels::WeightView packed;  // with the load-time packed copy, as Model::load makes it
};

// One weight matrix per type and size, built on first use (quantising ~100M values
// takes a while). small: ~0.5 MB, stays in L2 (compute-bound view of the kernel).
const BenchWeights& weights(DType t, bool small = false) {
  static std::map<std::pair<DType, bool>, std::unique_ptr<BenchWeights>> cache;
  auto& w = cache[{t, small}];
  if (!w) {
    w = std::make_unique<BenchWeights>();
    const int64_t rb = tensor::row_bytes(t, kNIn);
    const int64_t n_out = small ? 128 : kWeightBytes / rb / 16 * 16;
    w->bytes.resize(static_cast<size_t>(rb * n_out));
    core::Rng rng(1);
    std::vector<float> row(static_cast<size_t>(kNIn));
    for (int64_t r = 0; r < n_out; ++r) {
      for (auto& v : row) v = static_cast<float>(rng.uniform() - 0.5);
      tensor::quantize_row(t, row.data(), w->bytes.data() + r * rb, kNIn);
    }
    w->view = kernels::WeightView{w->bytes.data(), t, kNIn, n_out};
    w->packed = w->view;
    if (const int64_t nb = kernels::packed_bytes(w->view); nb > 0) {
      w->packed_bytes.resize(static_cast<size_t>(nb), "bench packed weights");
      kernels::pack_weights(w->view, w->packed_bytes.data());
      w->packed.packed = w->packed_bytes.data();
    }
  }
  return *w;
}

core::ThreadPool& pool(int n) {
  static std::map<int, std::unique_ptr<core::ThreadPool>> pools;
  auto& p = pools[n];
  if (!p) p = std::make_unique<core::ThreadPool>(n);
  return *p;
}

void BM_Matmul(benchmark::State& st, DType t, kernels::Isa isa, bool small) {
  if (!kernels::isa_supported(isa)) {
    st.SkipWithError((std::string("CPU lacks ") + kernels::isa_name(isa)).c_str());
    return;
  }
  const int64_t M = st.range(0);
  const int n_threads = static_cast<int>(st.range(1));
  const auto& w = weights(t, small);
  core::Rng rng(2);
  std::vector<float> x(static_cast<size_t>(M * kNIn)), y(static_cast<size_t>(M * w.view.n_out));
  for (auto& v : x) v = static_cast<float>(rng.normal());
  const kernels::Isa saved = kernels::active_isa();
  kernels::set_active_isa(isa);
  core::ThreadPool* p = n_threads > 1 ? &pool(n_threads) : nullptr;
  // With the load-time packed copy, as in a loaded model (a kernel reads it only when it
  // is its own level's layout: the best level's, or avx2's Q8_0 on a CPU without VNNI).
  const kernels::WeightView& view = w.packed;
  for (auto _ : st) {
    kernels::matmul(view, x.data(), M, y.data(), p);
    benchmark::DoNotOptimize(y.data());
  }
  kernels::set_active_isa(saved);
  const double bytes = static_cast<double>(w.bytes.size());
  st.SetBytesProcessed(static_cast<int64_t>(bytes) * st.iterations());
  st.counters["FLOPS"] =
      benchmark::Counter(2.0 * static_cast<double>(kNIn * w.view.n_out * M) * static_cast<double>(st.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_Attention(benchmark::State& st) {
  const int64_t n_rows = st.range(0);
  const int n_threads = static_cast<int>(st.range(1));
  const float softcap = static_cast<float>(st.range(2));  // Gemma 2's attention soft-cap (0: none)
  const int64_t n_kv = 8, group = 2, hd = 128, n_committed = 1024, n_cells = n_committed + 64;
  core::Rng rng(3);
  std::vector<float> q(static_cast<size_t>(n_rows * n_kv * group * hd)), out(q.size());
  std::vector<float> k(static_cast<size_t>(n_kv * n_cells * hd)), v(k.size());
  for (auto* vec : {&q, &k, &v})
    for (auto& x : *vec) x = static_cast<float>(rng.normal());
  std::vector<std::vector<int32_t>> extra(static_cast<size_t>(n_rows));
  std::vector<int32_t> parent(static_cast<size_t>(n_rows), -1);
  for (int64_t i = 0; i < n_rows; ++i) {
    if (i > 0) parent[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(i)));
    std::vector<int32_t> anc;
    for (int64_t a = i; a >= 0; a = parent[static_cast<size_t>(a)])
      anc.insert(anc.begin(), static_cast<int32_t>(n_committed + a));
    extra[static_cast<size_t>(i)] = anc;
  }
  std::vector<const int32_t*> ptr;
  std::vector<int32_t> len;
  for (auto& e : extra) {
    ptr.push_back(e.data());
    len.push_back(static_cast<int32_t>(e.size()));
  }
  const int64_t chunk = 16;
  const int64_t scratch_per = kernels::attention_scratch_floats(chunk, group, n_cells);
  std::vector<float> scratch(static_cast<size_t>(scratch_per * n_threads));
  core::ThreadPool* p = n_threads > 1 ? &pool(n_threads) : nullptr;
  const int64_t n_chunks = (n_rows + chunk - 1) / chunk;
  auto task = [&](int64_t t, int thread) {
    const int64_t g = t % n_kv, r0 = (t / n_kv) * chunk;
    kernels::AttentionRows a;
    a.q = q.data() + r0 * n_kv * group * hd + g * group * hd;
    a.ldq = n_kv * group * hd;
    a.out = out.data() + r0 * n_kv * group * hd + g * group * hd;
    a.ldo = a.ldq;
    a.n_rows = std::min(chunk, n_rows - r0);
    a.n_head = group;
    a.head_dim = hd;
    a.k = kernels::KvRows::contiguous(k.data() + g * n_cells * hd, hd);
    a.v = kernels::KvRows::contiguous(v.data() + g * n_cells * hd, hd);
    a.n_committed = n_committed;
    a.extra = ptr.data() + r0;
    a.n_extra = len.data() + r0;
    a.scale = 0.088f;
    a.softcap = softcap;
    a.scratch = scratch.data() + static_cast<size_t>(thread) * static_cast<size_t>(scratch_per);
    kernels::attention_rows(a);
  };
  for (auto _ : st) {
    if (p) {
      p->parallel_for(n_kv * n_chunks, 1, [&](int64_t b, int64_t e, int thread) {
        for (int64_t t = b; t < e; ++t) task(t, thread);
      });
    } else {
      for (int64_t t = 0; t < n_kv * n_chunks; ++t) task(t, 0);
    }
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(2 * n_kv * n_committed * hd * 4) * st.iterations());
  st.counters["FLOPS"] = benchmark::Counter(4.0 * static_cast<double>(n_rows * n_kv * group * n_committed * hd) *
                                                static_cast<double>(st.iterations()),
                                            benchmark::Counter::kIsRate);
}

void BM_ReadBandwidth(benchmark::State& st) {
  const int n_threads = static_cast<int>(st.range(0));
  double gbs = 0;
  for (auto _ : st)
    gbs = kernels::measure_read_bandwidth(n_threads > 1 ? &pool(n_threads) : nullptr, size_t{1} << 30, 3);
  st.counters["GB_per_s"] = gbs;
}

int register_all() {
  const DType types[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,  DType::q4_0,
                         DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_xs};
  const kernels::Isa isas[] = {kernels::Isa::scalar, kernels::Isa::avx2, kernels::Isa::avx512,
                               kernels::Isa::avx512_vnni};
  const int n = core::hardware_threads();
  for (DType t : types) {
    for (kernels::Isa isa : isas) {
      const std::string name = std::string("BM_Matmul/") + tensor::dtype_name(t) + "/" + kernels::isa_name(isa);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, isa, false)
                    ->ArgNames({"M", "threads"})
                    ->UseRealTime();
      for (int64_t M : {1, 16, 64}) {
        if (isa == kernels::Isa::scalar && M > 1) continue;  // minutes per call
        b->Args({M, 1});
        if (n > 1) b->Args({M, n});
      }
      // In-cache weights, one thread: the kernel's compute rate without DRAM.
      const std::string name2 = std::string("BM_MatmulL2/") + tensor::dtype_name(t) + "/" + kernels::isa_name(isa);
      auto* c = benchmark::RegisterBenchmark(name2.c_str(), BM_Matmul, t, isa, true)->ArgNames({"M", "threads"});
      for (int64_t M : {1, 16, 64}) c->Args({M, 1});
    }
  }
  auto* a = benchmark::RegisterBenchmark("BM_Attention", BM_Attention)
                ->ArgNames({"tree", "threads", "softcap"})
                ->UseRealTime();
  for (int64_t rows : {1, 16, 64}) {
    for (int64_t cap : {0, 50}) {
      a->Args({rows, 1, cap});
      if (n > 1) a->Args({rows, n, cap});
    }
  }
  auto* bw = benchmark::RegisterBenchmark("BM_ReadBandwidth", BM_ReadBandwidth)
                 ->ArgNames({"threads"})
                 ->Iterations(1)
                 ->UseRealTime();
  bw->Arg(1);
  if (n > 1) bw->Arg(n);
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
