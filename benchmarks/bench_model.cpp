// End-to-end forward-step benchmark on a real GGUF model (for the memory-bound
// measurements: docs/kernels.md "Results"). Set TREESPEC_BENCH_MODEL=/path/model.gguf;
// without it every benchmark is skipped.
//
//   BM_Step/rows:{1,16,64}/threads:{1,N}: one forward pass (embed, all layers, final
//   norm, lm_head for every row) of a token tree with that many rows on top of a
//   128-token committed context; rows = 1 is a plain decode step. Counters: bytes_per_second
//   = weight bytes a plain step must read (Model::weight_bytes) per step.
//   BM_StepCpu/rows/threads:1: the same, rates per CPU-second of the (only) thread: the
//   rate while the step actually ran, for a machine shared with other jobs.
//   BM_StepRatio/rows:{16,64}/threads: 20 interleaved pairs of a 1-row and an R-row step;
//   medians (ms_1row, ms_rows), their ratio, and the 1-row step's weight GB/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tree/token_tree.h"

using namespace treespec;

namespace {

const model::Model* bench_model() {
  static std::unique_ptr<model::Model> m;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (const char* p = std::getenv("TREESPEC_BENCH_MODEL")) m = model::Model::load(p);
  }
  return m.get();
}

// Random tokens [n_ctx] prefilled into slot 0 of kv and committed: the context every
// step benchmark decodes on top of. Returns the tokens.
std::vector<int32_t> prefill_random(benchmark::State& st, const model::Model& m, model::ForwardContext& ctx,
                                    kv::KvCache& kv, int32_t n_ctx, core::Rng& rng) {
  const int32_t V = m.hparams().n_vocab;
  std::vector<int32_t> toks(static_cast<size_t>(n_ctx));
  for (auto& t : toks) t = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  model::Batch b;
  b.add_chain(0, 0, toks);
  std::vector<float> logits(static_cast<size_t>(V));
  const int32_t last = n_ctx - 1;
  if (!m.forward(ctx, b, kv, {&last, 1}, logits.data()).ok()) st.SkipWithError("prefill failed");
  std::vector<int32_t> path(static_cast<size_t>(n_ctx));
  for (int32_t i = 0; i < n_ctx; ++i) path[static_cast<size_t>(i)] = i;
  if (!kv.commit(0, path).ok()) st.SkipWithError("commit failed");
  return toks;
}

void BM_Step(benchmark::State& st) {
  const model::Model* m = bench_model();
  if (!m) {
    st.SkipWithError("set TREESPEC_BENCH_MODEL to a GGUF model");
    return;
  }
  const int32_t rows = static_cast<int32_t>(st.range(0));
  const int32_t n_threads = static_cast<int32_t>(st.range(1));
  const int32_t n_ctx = 128;
  model::ForwardContext ctx(*m, n_threads);
  kv::KvCache kv(m->kv_shape(1, n_ctx + 64 + 1));
  const int32_t V = m->hparams().n_vocab;
  core::Rng rng(1);
  prefill_random(st, *m, ctx, kv, n_ctx, rng);  // committed context
  tree::TokenTree tree(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))));
  while (tree.size() < rows) {
    const auto parent = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(tree.size())));
    tree.add(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))), parent);
  }
  model::Batch b;
  b.add_tree(0, n_ctx, tree);
  std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(V));
  for (auto _ : st) {
    if (!m->forward(ctx, b, kv, {}, logits.data()).ok()) st.SkipWithError("forward failed");
    benchmark::DoNotOptimize(logits.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(m->weight_bytes()) * st.iterations());
  st.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}

// Alternates a 1-row step and an R-row step, 20 pairs, and reports the median of each
// and their ratio: on a shared machine whose load drifts, interleaving keeps the two
// measurements comparable.
void BM_StepRatio(benchmark::State& st) {
  const model::Model* m = bench_model();
  if (!m) {
    st.SkipWithError("set TREESPEC_BENCH_MODEL to a GGUF model");
    return;
  }
  const int32_t rows = static_cast<int32_t>(st.range(0));
  const int32_t n_threads = static_cast<int32_t>(st.range(1));
  const int32_t n_ctx = 128;
  model::ForwardContext ctx(*m, n_threads);
  kv::KvCache kv(m->kv_shape(1, n_ctx + rows + 1));
  const int32_t V = m->hparams().n_vocab;
  core::Rng rng(1);
  const std::vector<int32_t> toks = prefill_random(st, *m, ctx, kv, n_ctx, rng);
  tree::TokenTree one(toks[0]);
  tree::TokenTree tree(toks[1]);
  while (tree.size() < rows) {
    tree.add(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))),
             static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(tree.size()))));
  }
  model::Batch b1, bt;
  b1.add_tree(0, n_ctx, one);
  bt.add_tree(0, n_ctx, tree);
  std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(V));
  std::vector<double> t1, tr;
  for (auto _ : st) {
    for (int rep = 0; rep < 20; ++rep) {
      double a = core::now_s();
      if (!m->forward(ctx, b1, kv, {}, logits.data()).ok()) st.SkipWithError("forward failed");
      double b = core::now_s();
      if (!m->forward(ctx, bt, kv, {}, logits.data()).ok()) st.SkipWithError("forward failed");
      double c = core::now_s();
      t1.push_back(b - a);
      tr.push_back(c - b);
    }
  }
  std::sort(t1.begin(), t1.end());
  std::sort(tr.begin(), tr.end());
  const double m1 = t1[t1.size() / 2], mr = tr[tr.size() / 2];
  st.counters["ms_1row"] = m1 * 1e3;
  st.counters["ms_rows"] = mr * 1e3;
  st.counters["ratio"] = mr / m1;
  st.counters["GBps_1row"] = static_cast<double>(m->weight_bytes()) / m1 / 1e9;
}

int register_all() {
  const int n = core::hardware_threads();
  auto* b = benchmark::RegisterBenchmark("BM_Step", BM_Step)->ArgNames({"rows", "threads"})->UseRealTime();
  // Same with rates per CPU-second (Google Benchmark counters use CPU time unless UseRealTime).
  auto* c = benchmark::RegisterBenchmark("BM_StepCpu", BM_Step)->ArgNames({"rows", "threads"});
  for (int64_t rows : {1, 16, 64}) c->Args({rows, 1});
  for (int64_t rows : {1, 16, 64}) {
    b->Args({rows, 1});
    if (n > 1) b->Args({rows, n});
  }
  auto* r = benchmark::RegisterBenchmark("BM_StepRatio", BM_StepRatio)
                ->ArgNames({"rows", "threads"})
                ->Iterations(1)
                ->UseRealTime();
  for (int64_t rows : {16, 64}) {
    r->Args({rows, 1});
    if (n > 1) r->Args({rows, n});
  }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
