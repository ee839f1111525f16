#include "drafters/propd/prune_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/assert.h"
#include "core/log.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::drafters {

void PruneParams::validate() const {
  if (layer < 0 || layer > 4096)
    throw InvalidArgument(fmt::format("--prune-layer must be in 1..n_layer-1 (0 = default), got {}", layer));
  if (top_k < 0 || top_k > 4096)
    throw InvalidArgument(fmt::format("--prune-k must be in 1..4096 (0 = default), got {}", top_k));
  if (!(recall_target > 0.0f && recall_target <= 1.0f)) {
    throw InvalidArgument(fmt::format("--prune-recall must be in (0, 1], got {}", recall_target));
  }
}

namespace {

std::string file_key(const std::string& path) {
  std::error_code ec;
  std::string key = path;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) {
    const auto mtime = std::filesystem::last_write_time(path, ec);
    if (!ec) key += fmt::format("|{}|{}", size, mtime.time_since_epoch().count());
  }
  return key;
}

}  // namespace

PruneCalibration calibrate_logit_lens(const model::Model& m, int32_t k, float target, core::ThreadPool* pool,
                                      int32_t n_seqs, int32_t n_tokens) {
  const auto& hp = m.hparams();
  const int32_t L = hp.n_layer, E = hp.n_embd, V = hp.n_vocab;
  k = std::clamp(k, 1, V);
  const double t0 = core::now_s();
  model::ForwardContext ctx(m, pool ? pool->n_threads() : 1);
  kv::KvCache kv(m.kv_shape(n_seqs, n_tokens + 1));
  int64_t bos = m.gguf().get_int("tokenizer.ggml.bos_token_id", 1);
  if (bos < 0 || bos >= V) bos = 0;
  // hidden[l]: residual after l layers for every position [n_rows, E]; final argmax per row.
  std::vector<std::vector<float>> hidden(static_cast<size_t>(L));
  std::vector<int32_t> final_argmax;
  std::vector<int32_t> last(static_cast<size_t>(n_seqs), static_cast<int32_t>(bos));
  std::vector<sampling::Sampler> samplers;
  for (int32_t s = 0; s < n_seqs; ++s) {
    sampling::SamplingParams sp;
    sp.temp = 0.8f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = 0x9e3779b9u + static_cast<uint64_t>(s);
    samplers.emplace_back(sp);
  }
  std::vector<float> logits(static_cast<size_t>(n_seqs) * V), normed(static_cast<size_t>(n_seqs) * E);
  model::Batch batch;
  for (int32_t step = 0; step < n_tokens; ++step) {
    batch.clear();
    for (int32_t s = 0; s < n_seqs; ++s)
      batch.add_chain(s, kv.n_past(s), std::span<const int32_t>(&last[static_cast<size_t>(s)], 1));
    ctx.reserve(n_seqs, kv.n_cells());
    float* x = ctx.x();
    m.embed(batch, x);
    for (int32_t l = 0; l < L; ++l) {
      hidden[static_cast<size_t>(l)].insert(hidden[static_cast<size_t>(l)].end(), x,
                                            x + static_cast<size_t>(n_seqs) * E);
      Status st = m.run_layers(ctx, batch, l, l + 1, x, kv);
      TREESPEC_ASSERT(st.ok(), "lens calibration: rows fit");
    }
    m.final_norm(x, n_seqs, {}, normed.data());
    m.lm_head(ctx, normed.data(), n_seqs, logits.data());
    for (int32_t s = 0; s < n_seqs; ++s) {
      const float* lg = logits.data() + static_cast<size_t>(s) * V;
      final_argmax.push_back(sampling::argmax(lg, V));
      last[static_cast<size_t>(s)] = samplers[static_cast<size_t>(s)].sample(lg, V);
      const int32_t zero = 0;
      Status st = kv.commit(s, std::span<const int32_t>(&zero, 1));
      TREESPEC_ASSERT(st.ok(), "lens calibration: commit fits");
    }
  }
  const auto n_rows = static_cast<int32_t>(final_argmax.size());
  PruneCalibration c;
  c.top_k = k;
  c.n_positions = n_rows;
  c.recall_target = target;
  c.default_k = k;
  c.lens_recall.assign(static_cast<size_t>(L) * k, -1.0f);
  std::vector<float> xn(static_cast<size_t>(n_rows) * E), lg(static_cast<size_t>(n_rows) * V);
  auto measure = [&](int32_t l) {
    if (c.lens_recall[static_cast<size_t>(l) * k] >= 0.0f) return c.lens(l, k);
    m.final_norm(hidden[static_cast<size_t>(l)].data(), n_rows, {}, xn.data());
    m.output().apply(xn.data(), n_rows, lg.data(), &ctx.pool());  // the logit lens (no soft-cap or scale)
    std::vector<int64_t> hits(static_cast<size_t>(k), 0);
    for (int32_t r = 0; r < n_rows; ++r) {
      const int32_t rk =
          sampling::rank_of(lg.data() + static_cast<size_t>(r) * V, V, final_argmax[static_cast<size_t>(r)]);
      if (rk < k) ++hits[static_cast<size_t>(rk)];
    }
    int64_t acc = 0;
    for (int32_t j = 0; j < k; ++j) {
      acc += hits[static_cast<size_t>(j)];
      c.lens_recall[static_cast<size_t>(l * k + j)] =
          static_cast<float>(static_cast<double>(acc) / std::max(1, n_rows));
    }
    return c.lens(l, k);
  };
  // Binary search for the smallest layer meeting the target (recall rises with depth).
  int32_t lo = 1, hi = L - 1, found = 0;
  while (lo <= hi) {
    const int32_t mid = (lo + hi) / 2;
    if (measure(mid) >= target) {
      found = mid;
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  c.default_layer = found;
  TS_LOG_INFO(
      "prune: logit-lens calibration on {} positions in {:.2f} s: smallest layer with top-{} recall >= {:.2f}: {}",
      n_rows, core::now_s() - t0, k, static_cast<double>(target), found);
  return c;
}

std::shared_ptr<const PruneHeadSet> load_prune_heads(const std::string& path_in, const model::Model& m) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const PruneHeadSet>> cache;  // null entries: no heads there
  const std::string path = path_in.empty() ? m.gguf().path() : path_in;
  const std::string key = fmt::format("{}|{}|{}", file_key(path), m.gguf().path(), static_cast<const void*>(&m));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::shared_ptr<const PruneHeadSet> set;
  if (path_in.empty()) {
    if (PruneHeadSet::present_in(m.gguf())) set = PruneHeadSet::from_gguf(m.gguf_shared());
  } else {
    std::shared_ptr<const gguf::GgufFile> f(gguf::GgufFile::open(path));
    if (PruneHeadSet::present_in(*f)) set = PruneHeadSet::from_gguf(f);
  }
  if (set) set->check_fits(m);
  cache[key] = set;
  return set;
}

PruneSpec resolve_prune_spec(const PruneParams& p, const std::string& heads_path, const model::Model& m,
                             core::ThreadPool* pool) {
  p.validate();
  const int32_t L = m.hparams().n_layer;
  if (L < 2)
    throw InvalidArgument(fmt::format("early pruning needs at least 2 layers; model '{}' has {}", m.gguf().path(), L));
  if (p.layer >= L)
    throw InvalidArgument(fmt::format("--prune-layer {} must be below the model's {} layers", p.layer, L));
  const auto set = load_prune_heads(heads_path, m);
  PruneSpec spec;
  const PruneCalibration* calib = set ? &set->calib : nullptr;
  spec.top_k = p.top_k > 0 ? p.top_k : (calib && calib->default_k > 0 ? calib->default_k : kDefaultPruneK);
  spec.top_k = std::min(spec.top_k, m.hparams().n_vocab);
  const bool heads_ok = set && !p.lens && !set->heads.empty();
  spec.layer = p.layer;
  if (spec.layer == 0 && calib) {
    if (heads_ok && calib->default_layer > 0 && calib->default_k == spec.top_k &&
        calib->recall_target == p.recall_target && set->heads.count(calib->default_layer)) {
      spec.layer = calib->default_layer;
    } else {
      // From the tables: a trained head's recall where one exists, else the lens'.
      spec.layer = smallest_layer_meeting(L, spec.top_k, p.recall_target, [&](int32_t l, int32_t k) {
        if (heads_ok && set->heads.count(l)) return calib->head(l, k);
        return calib->lens(l, k);
      });
    }
  }
  if (spec.layer == 0) {
    static std::mutex mu;
    static std::map<std::string, PruneCalibration> cache;
    const std::string key =
        fmt::format("{}|{}|{}|{}", static_cast<const void*>(&m), m.gguf().path(), spec.top_k, p.recall_target);
    PruneCalibration lens;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (auto it = cache.find(key); it != cache.end()) {
        lens = it->second;
      } else {
        lens = calibrate_logit_lens(m, spec.top_k, p.recall_target, pool);
        cache[key] = lens;
      }
    }
    spec.layer = lens.default_layer;
    if (spec.layer == 0) {
      spec.layer = L - 1;
      TS_LOG_WARN(
          "prune: no layer reaches top-{} recall {:.2f} of the final argmax with the logit lens; pruning after layer "
          "{} of {}",
          spec.top_k, static_cast<double>(p.recall_target), spec.layer, L);
    }
  }
  bool trained = false;
  if (heads_ok) {
    if (auto it = set->heads.find(spec.layer); it != set->heads.end()) {
      spec.head = it->second;
      trained = true;
    }
  }
  if (!trained) spec.head = PruneHead::logit_lens(spec.layer);
  TS_LOG_INFO("prune: after layer {} of {}, keep children in the parent's top-{} ({})", spec.layer, L, spec.top_k,
              trained ? "trained prune head" : "logit lens");
  return spec;
}

}  // namespace treespec::drafters
