#include "train/prune_train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/assert.h"
#include "core/rng.h"
#include "core/timer.h"
#include "drafters/medusa/medusa_heads.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "sampling/top_k.h"
#include "train/medusa_backprop.h"
#include "treespec/status.h"

namespace treespec::train {

using drafters::output_matrix_hash;
using drafters::PruneCalibration;
using drafters::PruneHead;
using drafters::PruneHeadSet;

int32_t PruneTrainParams::blocks_for(int32_t n_embd) const {
  return n_blocks >= 0 ? n_blocks : default_head_blocks(n_embd, own_output);
}

void PruneTrainParams::validate() const {
  auto bad = [](const std::string& msg) { throw InvalidArgument(msg); };
  if (steps < 0 || steps > 10'000'000) bad(fmt::format("--prune-steps must be in 0..10000000, got {}", steps));
  if (!(lr > 0.0f && lr < 1.0f)) bad(fmt::format("prune head learning rate must be in (0, 1), got {}", lr));
  if (!(warmup >= 0.0f && warmup < 1.0f))
    bad(fmt::format("prune head warm-up fraction must be in [0, 1), got {}", warmup));
  if (batch < 1 || batch > 65536) bad(fmt::format("prune head batch must be in 1..65536, got {}", batch));
  if (n_blocks < -1 || n_blocks > 64)
    bad(fmt::format("prune head blocks must be in 0..64 (or -1: auto), got {}", n_blocks));
  if (!(soft_weight >= 0.0f && soft_weight <= 1.0f))
    bad(fmt::format("prune head soft-target weight must be in [0, 1], got {}", soft_weight));
  if (eval_top_k < 1 || eval_top_k > 1024)
    bad(fmt::format("prune recall table width must be in 1..1024, got {}", eval_top_k));
  if (!(recall_target > 0.0f && recall_target <= 1.0f))
    bad(fmt::format("--prune-recall must be in (0, 1], got {}", recall_target));
  if (default_k < 1 || default_k > eval_top_k)
    bad(fmt::format("--prune-k must be in 1..{} (the recall table width), got {}", eval_top_k, default_k));
}

namespace {

// The lens table for every layer, from the generation pass (none if it kept no lens hits).
void fill_lens_recall(const PruneTaps& taps, int32_t n_layer, int32_t K, PruneCalibration& c) {
  if (taps.lens_rows <= 0 || taps.lens_top_k <= 0) return;
  c.n_positions = taps.lens_rows;
  c.lens_recall.assign(static_cast<size_t>(n_layer) * K, 0.0f);
  for (int32_t l = 0; l < n_layer; ++l) {
    int64_t acc = 0;
    for (int32_t k = 0; k < K; ++k) {
      if (k < taps.lens_top_k) acc += taps.lens_hits[static_cast<size_t>(l * taps.lens_top_k + k)];
      c.lens_recall[static_cast<size_t>(l * K + k)] =
          static_cast<float>(static_cast<double>(acc) / static_cast<double>(taps.lens_rows));
    }
  }
}

}  // namespace

std::vector<float> prune_head_recall(const model::Model& m, const PruneHead& head, const PruneTaps& taps, size_t ti,
                                     int32_t top_k, core::ThreadPool& pool, double* loss) {
  const int32_t E = m.hparams().n_embd, V = m.hparams().n_vocab;
  constexpr int32_t chunk = 256;
  std::vector<int32_t> rows;
  std::vector<float> h(static_cast<size_t>(chunk) * E), work(2 * static_cast<size_t>(chunk) * E),
      lg(static_cast<size_t>(chunk) * V);
  std::vector<int64_t> hits(static_cast<size_t>(top_k), 0);
  int64_t n = 0;
  double ce = 0.0;
  auto flush = [&] {
    const auto M = static_cast<int32_t>(rows.size());
    if (M == 0) return;
    for (int32_t i = 0; i < M; ++i) {
      std::memcpy(h.data() + static_cast<size_t>(i) * E,
                  taps.h[ti].data() + static_cast<size_t>(rows[static_cast<size_t>(i)]) * E,
                  static_cast<size_t>(E) * sizeof(float));
    }
    head.logits_normed(m, h.data(), M, work.data(), lg.data(), &pool);
    for (int32_t i = 0; i < M; ++i) {
      const float* l = lg.data() + static_cast<size_t>(i) * V;
      const int32_t y = taps.argmax[static_cast<size_t>(rows[static_cast<size_t>(i)])];
      const int32_t rk = sampling::rank_of(l, V, y);
      if (rk < top_k) ++hits[static_cast<size_t>(rk)];
      float mx = l[0];
      for (int32_t v = 1; v < V; ++v) mx = std::max(mx, l[v]);
      double sum = 0.0;
      for (int32_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v] - mx));
      ce += std::log(sum) - static_cast<double>(l[y] - mx);
      ++n;
    }
    rows.clear();
  };
  for (int64_t r = 0; r < taps.n_rows; ++r) {
    if (!taps.heldout[static_cast<size_t>(r)]) continue;
    rows.push_back(static_cast<int32_t>(r));
    if (static_cast<int32_t>(rows.size()) == chunk) flush();
  }
  flush();
  std::vector<float> recall(static_cast<size_t>(top_k), 0.0f);
  int64_t acc = 0;
  for (int32_t k = 0; k < top_k; ++k) {
    acc += hits[static_cast<size_t>(k)];
    recall[static_cast<size_t>(k)] = n ? static_cast<float>(static_cast<double>(acc) / static_cast<double>(n)) : 0.0f;
  }
  if (loss) *loss = n ? ce / static_cast<double>(n) : 0.0;
  return recall;
}

std::shared_ptr<PruneHeadSet> train_prune_heads(const model::Model& m, const PruneTaps& taps, const PruneTrainParams& p,
                                                core::ThreadPool& pool, PruneTrainReport* report,
                                                const TrainProgressFn& progress) {
  p.validate();
  const auto& hp = m.hparams();
  const int32_t E = hp.n_embd, V = hp.n_vocab, R = p.blocks_for(hp.n_embd);
  const int32_t K = std::min(p.eval_top_k, V);
  PruneTrainReport local;
  PruneTrainReport& rep = report ? *report : local;
  rep.layers = taps.layers;
  const double t0 = core::now_s();

  std::vector<int64_t> train_rows;
  for (int64_t r = 0; r < taps.n_rows; ++r) {
    if (!taps.heldout[static_cast<size_t>(r)]) train_rows.push_back(r);
    else ++rep.heldout_rows;
  }
  if (train_rows.empty() || rep.heldout_rows == 0)
    throw InvalidArgument("train-heads --prune-layer: no training or held-out positions were recorded");

  auto set = std::make_shared<PruneHeadSet>();
  set->n_embd = E;
  set->n_vocab = V;
  set->base_n_layer = hp.n_layer;
  set->base_output_hash = output_matrix_hash(m);
  set->source = "<trained>";
  PruneCalibration& c = set->calib;
  c.top_k = K;
  c.n_positions = rep.heldout_rows;
  c.recall_target = p.recall_target;
  c.default_k = std::min(p.default_k, K);
  fill_lens_recall(taps, hp.n_layer, K, c);

  std::vector<float> base_out(static_cast<size_t>(V) * E);
  m.output().dequantize(base_out.data());
  const bool soft = taps.kl_top > 0 && p.soft_weight > 0.0f;
  const int64_t M = p.batch;
  const int64_t warm = std::max<int64_t>(1, std::llround(p.warmup * static_cast<float>(p.steps)));
  const int64_t total_steps = static_cast<int64_t>(p.steps) * static_cast<int64_t>(taps.layers.size());

  for (size_t ti = 0; ti < taps.layers.size(); ++ti) {
    const int32_t layer = taps.layers[ti];
    TREESPEC_ASSERT(taps.h[ti].size() == static_cast<size_t>(taps.n_rows) * E, "prune taps: one row per position");
    HeadTensors params;
    params.w.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(E) * E, 0.0f));
    params.b.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(E), 0.0f));
    params.out = base_out;
    params.out_frozen = !p.own_output;
    HeadTensors grad = params.like(0.0f);
    AdamState adam(params);
    HeadScratch scratch;
    double loss0 = 0.0;
    const auto lens = PruneHead::logit_lens(layer);
    const auto before = prune_head_recall(m, *lens, taps, ti, K, pool, &loss0);
    rep.recall_before.insert(rep.recall_before.end(), before.begin(), before.end());
    rep.loss_before.push_back(loss0);

    core::Rng rng(core::derive_seed(p.seed, static_cast<uint64_t>(layer)));
    std::vector<float> hbuf(static_cast<size_t>(M) * E);
    std::vector<int32_t> tgt(static_cast<size_t>(M));
    std::vector<int32_t> sid(soft ? static_cast<size_t>(M) * taps.kl_top : 0);
    std::vector<float> sp(sid.size());
    const double tl0 = core::now_s();
    double smooth = 0.0;
    for (int32_t step = 0; step < p.steps; ++step) {
      const double prog = p.steps > 1 ? static_cast<double>(step) / static_cast<double>(p.steps - 1) : 1.0;
      const double cosine = 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * prog));
      const float lr =
          static_cast<float>(p.lr * std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warm)) * cosine);
      for (int64_t i = 0; i < M; ++i) {
        const int64_t r = train_rows[static_cast<size_t>(rng.uniform_int(train_rows.size()))];
        std::memcpy(hbuf.data() + i * E, taps.h[ti].data() + r * E, static_cast<size_t>(E) * sizeof(float));
        tgt[static_cast<size_t>(i)] = taps.argmax[static_cast<size_t>(r)];
        if (soft) {
          std::memcpy(sid.data() + i * taps.kl_top, taps.kl_ids.data() + r * taps.kl_top,
                      static_cast<size_t>(taps.kl_top) * sizeof(int32_t));
          std::memcpy(sp.data() + i * taps.kl_top, taps.kl_p.data() + r * taps.kl_top,
                      static_cast<size_t>(taps.kl_top) * sizeof(float));
        }
      }
      const SoftTargets st{soft ? sid.data() : nullptr, soft ? sp.data() : nullptr, soft ? taps.kl_top : 0,
                           soft ? p.soft_weight : 0.0f};
      const double l = head_forward_backward(params, E, V, hbuf.data(), M, tgt.data(), st, grad, scratch, pool);
      adam_update(params, grad, adam, lr, step + 1, pool);
      smooth = step == 0 ? l : 0.95 * smooth + 0.05 * l;
      if (progress && (step % 20 == 0 || step + 1 == p.steps)) {
        const int64_t done = static_cast<int64_t>(ti) * p.steps + step + 1;
        const double el = core::now_s() - tl0;
        progress({fmt::format("prune@{}", layer), done, total_steps, smooth,
                  static_cast<double>(M) * (step + 1) / std::max(el, 1e-9), core::now_s() - t0,
                  el / (step + 1) * (p.steps - step - 1)});
      }
    }
    auto head = PruneHead::from_f32(layer, E, V, std::move(params.w), std::move(params.b),
                                    p.own_output ? std::move(params.out) : std::vector<float>{});
    double loss1 = 0.0;
    const auto after = prune_head_recall(m, *head, taps, ti, K, pool, &loss1);
    rep.recall_after.insert(rep.recall_after.end(), after.begin(), after.end());
    rep.loss_after.push_back(loss1);
    c.head_layers.push_back(layer);
    c.head_recall.insert(c.head_recall.end(), after.begin(), after.end());
    set->heads[layer] = std::move(head);
  }
  // Default layer: the smallest trained layer whose recall at default_k reaches the target.
  c.default_layer = 0;
  std::vector<int32_t> sorted = c.head_layers;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t l : sorted) {
    if (c.head(l, c.default_k) >= c.recall_target) {
      c.default_layer = l;
      break;
    }
  }
  rep.seconds = core::now_s() - t0;
  return set;
}

}  // namespace treespec::train
