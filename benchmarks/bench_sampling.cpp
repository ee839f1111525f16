// Sampling microbenchmarks (docs/sampling.md): the cost of coupled sampling's noise at a
// real vocabulary size, against the filtering it follows and a 1 B model's step.
//   build/benchmarks/bench_sampling --benchmark_filter=Coupled
// BM_CoupledNoise/V: coupled_choice over an already filtered distribution of V tokens
// (no filters: every token gets noise; the cost issue 27 bounds). BM_Warp/V/top_k: the
// filtering itself. BM_CoupledSample/V/top_k: both, as the verifier runs them.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/rng.h"
#include "sampling/sampling.h"

using namespace treespec;

namespace {

std::vector<float> random_logits(int32_t n) {
  core::Rng rng(1);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& x : l) x = static_cast<float>(3.0 * rng.normal());
  return l;
}

sampling::SamplingParams params(int32_t top_k) {
  sampling::SamplingParams p;
  p.temp = 0.8f;
  p.top_k = top_k;
  p.top_p = top_k > 0 ? 0.95f : 1.0f;
  p.min_p = top_k > 0 ? 0.05f : 0.0f;
  return p;
}

void BM_CoupledNoise(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  const auto logits = random_logits(n);
  const auto d = sampling::warp(logits.data(), n, params(0));
  int64_t pos = 0;
  for (auto _ : state) benchmark::DoNotOptimize(sampling::coupled_choice(d, sampling::noise_key(7, pos++)));
  state.counters["tokens"] = static_cast<double>(d.ids.size());
}
BENCHMARK(BM_CoupledNoise)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

void BM_Warp(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  const auto logits = random_logits(n);
  const auto p = params(static_cast<int32_t>(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(sampling::warp(logits.data(), n, p));
}
BENCHMARK(BM_Warp)->Args({128256, 0})->Args({128256, 40})->Unit(benchmark::kMicrosecond);

void BM_CoupledSample(benchmark::State& state) {
  const auto n = static_cast<int32_t>(state.range(0));
  const auto logits = random_logits(n);
  auto p = params(static_cast<int32_t>(state.range(1)));
  p.seed = 7;
  int64_t pos = 0;
  for (auto _ : state) benchmark::DoNotOptimize(sampling::coupled_sample(logits.data(), n, p, pos++));
}
BENCHMARK(BM_CoupledSample)->Args({128256, 0})->Args({128256, 40})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
