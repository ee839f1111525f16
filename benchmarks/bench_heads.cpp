// What Medusa heads cost per step at realistic vocabulary sizes (issue 20 item 1;
// docs/medusa.md "Shared output matrix"). Synthetic weights of a 1 B model's width
// (n_embd 2048), 4 heads of 1 residual block, one hidden state per step, 2 threads:
//
//   BM_HeadsShared/vocab:V/blocks:T: the heads' blocks (T = 0: f32 as `expand` writes
//     them, 1: q8_0 after `treespec quantize`), then all 4 heads' logits in one call of the
//     model's Q8_0 output matrix [V, 2048] (MedusaHeads::forward_all, shared output).
//   BM_HeadsDraftVocab/vocab:V/draft:D: shared heads (q8_0 blocks) with a draft vocabulary
//     of D tokens: the output matrix's D rows, copied at bind (model::RowSubset).
//   BM_HeadsOwnF32/vocab:V: the same f32 blocks, each head with its own f32 projection
//     [V, 2048] (the layout before the shared output; 32,000 only: 1 GiB of projections).
//   BM_LmHead/vocab:V: the Q8_0 output matrix on one row: what a decode step of a model
//     with that vocabulary reads for its LM head (add it to a 512-vocabulary expansion's
//     step to get the step of the same model with V entries).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "drafters/medusa/medusa_heads.h"
#include "model/linear.h"
#include "model/quantize.h"

using namespace treespec;

namespace {

constexpr int32_t kEmbd = 2048;
constexpr int32_t kHeads = 4;

std::vector<float> random_f32(size_t n, float sd, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal()) * sd;
  return v;
}

// The model's output matrix [V, kEmbd] in Q8_0 (kept alive for the process).
const model::Linear& q8_output(int32_t V) {
  static std::vector<std::unique_ptr<std::vector<uint8_t>>> keep;
  static std::vector<std::pair<int32_t, model::Linear>> made;
  for (const auto& [v, l] : made) {
    if (v == V) return l;
  }
  const auto w = random_f32(static_cast<size_t>(V) * kEmbd, 0.02f, 7);
  keep.push_back(std::make_unique<std::vector<uint8_t>>(model::f32_to_tensor(tensor::DType::q8_0, w.data(), V, kEmbd)));
  made.emplace_back(V, model::Linear::typed(keep.back()->data(), tensor::DType::q8_0, kEmbd, V));
  return made.back().second;
}

std::shared_ptr<drafters::MedusaHeads> make_heads(int32_t V, bool shared, bool q8_blocks, int32_t draft = 0) {
  drafters::MedusaHeadsInfo info;
  info.n_heads = kHeads;
  info.n_blocks = 1;
  info.n_embd = kEmbd;
  info.n_vocab = V;
  info.hidden_layer = info.base_n_layer = 22;
  info.base_output_hash = "fnv1a64:0000000000000000";
  info.shared_output = shared;
  for (int32_t i = 0; i < draft; ++i) info.draft_vocab.push_back(i * (V / draft));
  std::vector<std::vector<std::vector<float>>> bw(kHeads), bb(kHeads);
  std::vector<std::vector<float>> out;
  for (int32_t k = 0; k < kHeads; ++k) {
    bw[static_cast<size_t>(k)].push_back(random_f32(static_cast<size_t>(kEmbd) * kEmbd, 0.02f, 11 + k));
    bb[static_cast<size_t>(k)].push_back(random_f32(kEmbd, 0.01f, 21 + k));
    if (!shared) out.push_back(random_f32(static_cast<size_t>(V) * kEmbd, 0.02f, 31 + k));
  }
  auto h = drafters::MedusaHeads::from_f32(info, std::move(bw), std::move(bb), std::move(out));
  if (q8_blocks) {  // through the file and `treespec quantize`'s code path
    const std::string dir = std::filesystem::temp_directory_path() / "treespec_bench_heads";
    std::filesystem::create_directories(dir);
    h->write(dir + "/f32.gguf");
    model::quantize_gguf(dir + "/f32.gguf", dir + "/q8.gguf", tensor::DType::q8_0);
    h = drafters::MedusaHeads::load(dir + "/q8.gguf");
  }
  if (shared) h->bind_output(q8_output(V));
  return h;
}

void run_heads(benchmark::State& st, const drafters::MedusaHeads& h) {
  core::ThreadPool pool(2);
  const auto x = random_f32(kEmbd, 1.0f, 3);
  std::vector<float> work(static_cast<size_t>(kHeads + 1) * kEmbd),
      logits(static_cast<size_t>(kHeads) * static_cast<size_t>(h.n_vocab()));
  for (auto _ : st) {
    h.forward_all(x.data(), work.data(), logits.data(), &pool);
    benchmark::DoNotOptimize(logits.data());
  }
}

void BM_HeadsShared(benchmark::State& st) {
  const auto h = make_heads(static_cast<int32_t>(st.range(0)), true, st.range(1) != 0);
  run_heads(st, *h);
}

void BM_HeadsDraftVocab(benchmark::State& st) {
  const auto h = make_heads(static_cast<int32_t>(st.range(0)), true, true, static_cast<int32_t>(st.range(1)));
  run_heads(st, *h);
}

void BM_HeadsOwnF32(benchmark::State& st) {
  const auto h = make_heads(static_cast<int32_t>(st.range(0)), false, false);
  run_heads(st, *h);
}

void BM_LmHead(benchmark::State& st) {
  const model::Linear& out = q8_output(static_cast<int32_t>(st.range(0)));
  core::ThreadPool pool(2);
  const auto x = random_f32(kEmbd, 1.0f, 3);
  std::vector<float> logits(static_cast<size_t>(out.n_out()));
  for (auto _ : st) {
    out.apply(x.data(), 1, logits.data(), &pool);
    benchmark::DoNotOptimize(logits.data());
  }
}

}  // namespace

BENCHMARK(BM_LmHead)->ArgName("vocab")->Arg(512)->Arg(32000)->Arg(128256)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HeadsShared)
    ->ArgNames({"vocab", "q8_blocks"})
    ->Args({512, 0})
    ->Args({32000, 0})
    ->Args({32000, 1})
    ->Args({128256, 0})
    ->Args({128256, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_HeadsDraftVocab)
    ->ArgNames({"vocab", "draft"})
    ->Args({128256, 32768})
    ->Args({128256, 16384})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_HeadsOwnF32)->ArgName("vocab")->Arg(512)->Arg(32000)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
