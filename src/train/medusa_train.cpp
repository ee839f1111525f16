#include "train/medusa_train.h"

#include "train/medusa_backprop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "core/assert.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::train {

using drafters::MedusaHeads;
using drafters::MedusaHeadsInfo;

int32_t MedusaTrainParams::blocks_for(int32_t n_embd) const {
  return n_blocks >= 0 ? n_blocks : default_head_blocks(n_embd, own_output);
}

int32_t MedusaTrainParams::draft_vocab_for(int32_t n_vocab) const {
  constexpr int32_t kAutoDraftVocab = 16384;
  if (own_output) return 0;
  const int32_t n = draft_vocab > 0 ? draft_vocab : kAutoDraftVocab;
  return n >= n_vocab ? 0 : n;
}

void MedusaTrainParams::validate() const {
  auto bad = [](const std::string& msg) { throw InvalidArgument(msg); };
  if (n_heads < 1 || n_heads > 64) bad(fmt::format("--heads must be in 1..64, got {}", n_heads));
  if (draft_vocab < 0) bad(fmt::format("--draft-vocab must be at least 1 (or 0: auto), got {}", draft_vocab));
  if (draft_vocab > 0 && own_output)
    bad("--draft-vocab needs heads that share the model's output matrix (drop --own-lm-head)");
  if (n_blocks < -1 || n_blocks > 64) bad(fmt::format("--blocks must be in 0..64 (or -1: auto), got {}", n_blocks));
  if (steps < 0 || steps > 10'000'000) bad(fmt::format("--steps must be in 0..10000000, got {}", steps));
  if (!(lr > 0.0f && lr < 1.0f)) bad(fmt::format("--lr must be in (0, 1), got {}", lr));
  if (!(warmup >= 0.0f && warmup < 1.0f)) bad(fmt::format("warm-up fraction must be in [0, 1), got {}", warmup));
  if (batch < 1 || batch > 65536) bad(fmt::format("--batch must be in 1..65536, got {}", batch));
  if (samples < 2 || samples > 1'000'000)
    bad(fmt::format("--samples must be in 2..1000000 (some are held out), got {}", samples));
  if (seq_len < n_heads + 2 || seq_len > 1'000'000) {
    bad(fmt::format("--seq-len must be at least heads + 2 = {} (head k predicts k + 2 ahead), got {}", n_heads + 2,
                    seq_len));
  }
  if (!(holdout > 0.0f && holdout < 1.0f)) bad(fmt::format("--holdout must be in (0, 1), got {}", holdout));
  if (!(temp > 0.0f) || !std::isfinite(temp))
    bad(fmt::format("--temp must be > 0 (the training text is sampled), got {}", temp));
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad(fmt::format("--top-p must be in (0, 1], got {}", top_p));
  if (!(kl_weight >= 0.0f && kl_weight <= 1.0f)) bad(fmt::format("--kl must be in [0, 1], got {}", kl_weight));
  if (kl_top < 1 || kl_top > 4096) bad(fmt::format("--kl-top must be in 1..4096, got {}", kl_top));
  if (eval_top_k < 1 || eval_top_k > 1024) bad(fmt::format("calibration top-k must be in 1..1024, got {}", eval_top_k));
  if (n_threads < 1) bad(fmt::format("-t/--threads must be >= 1, got {}", n_threads));
  if (gen_batch < 1 || gen_batch > 1024) bad(fmt::format("generation batch must be in 1..1024, got {}", gen_batch));
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) bad(fmt::format("prompt {} has no tokens", i + 1));
  }
  for (int32_t l : tap_layers) {
    if (l < 1) bad(fmt::format("--prune-layer must be >= 1 (an early layer), got {}", l));
  }
}

double MedusaEval::mean_loss() const {
  double s = 0.0;
  for (double l : loss) s += l;
  return loss.empty() ? 0.0 : s / static_cast<double>(loss.size());
}

namespace {

using Sample = TrainingSample;

// The base model writes the training text, gen_batch sequences per forward pass.
class TrainingTextWriter {
 public:
  // Checks prompts, BOS, the context and the tapped layers; allocates the KV cache.
  TrainingTextWriter(const model::Model& m, const MedusaTrainParams& p, model::ForwardContext& ctx,
                     MedusaTrainReport& rep)
      : m_(m), p_(p), ctx_(ctx), rep_(rep), hp_(m.hparams()), E_(hp_.n_embd), V_(hp_.n_vocab) {
    size_t max_prompt = 1;
    for (const auto& pr : p.prompts) {
      max_prompt = std::max(max_prompt, pr.size());
      for (int32_t t : pr) {
        if (t < 0 || t >= V_)
          throw InvalidArgument(fmt::format("prompt token {} is outside the vocabulary (0..{})", t, V_ - 1));
      }
    }
    if (p.bos_id < 0 || p.bos_id >= V_)
      throw InvalidArgument(fmt::format("BOS id {} is outside the vocabulary", p.bos_id));
    n_cells_ = static_cast<int64_t>(max_prompt) + p.seq_len;
    if (n_cells_ > hp_.n_ctx_train) {
      throw InvalidArgument(
          fmt::format("--seq-len {} plus the longest prompt ({} tokens) exceeds the model's training context of {}",
                      p.seq_len, max_prompt, hp_.n_ctx_train));
    }
    B_ = std::min(p.gen_batch, p.samples);
    kv_ = std::make_unique<kv::KvCache>(m.kv_shape(B_, static_cast<int32_t>(n_cells_)));
    samples_.resize(static_cast<size_t>(p.samples));
    kl_ = p.kl_weight > 0.0f;
    kl_top_ = std::min(p.kl_top, V_);
    logits_.resize(static_cast<size_t>(B_) * V_);
    normed_.resize(static_cast<size_t>(B_) * E_);
    // ProPD taps: residual after every layer of the rows of one forward, normed taps, lens logits.
    taps_ = !p.tap_layers.empty();
    for (int32_t l : p.tap_layers) {
      if (l >= hp_.n_layer)
        throw InvalidArgument(fmt::format("--prune-layer {} must be below the model's {} layers", l, hp_.n_layer));
    }
    first_heldout_ =
        p.samples - static_cast<int32_t>(
                        std::clamp<int64_t>(std::llround(p.holdout * static_cast<float>(p.samples)), 1, p.samples - 1));
    layer_x_.resize(taps_ ? static_cast<size_t>(hp_.n_layer) * B_ * E_ : 0);
    tap_n_.resize(taps_ ? static_cast<size_t>(B_) * E_ : 0);
    lens_logits_.resize(taps_ ? static_cast<size_t>(B_) * V_ : 0);
    if (taps_) {
      rep.taps.lens_top_k = std::clamp(p.tap_top_k, 1, V_);
      rep.taps.lens_hits.assign(static_cast<size_t>(hp_.n_layer) * rep.taps.lens_top_k, 0);
    }
  }

  std::vector<Sample> run(const TrainProgressFn& progress) {
    const double t0 = core::now_s();
    const int64_t total = static_cast<int64_t>(p_.samples) * p_.seq_len;
    int64_t generated = 0;
    double last_report = 0.0;
    for (int32_t w = 0; w < p_.samples; w += B_) {
      const int32_t nb = std::min(B_, p_.samples - w);
      std::vector<sampling::Sampler> samplers = start_window(w, nb);
      std::vector<bool> active(static_cast<size_t>(nb), true);
      for (;;) {
        batch_.clear();
        std::vector<int32_t> rows;  // sample slot of each row
        for (int32_t s = 0; s < nb; ++s) {
          if (!active[static_cast<size_t>(s)]) continue;
          const int32_t last = samples_[static_cast<size_t>(w + s)].tokens.back();
          batch_.add_chain(s, kv_->n_past(s), std::span<const int32_t>(&last, 1));
          rows.push_back(s);
        }
        if (rows.empty()) break;
        if (!taps_) {
          const Status st = m_.forward(ctx_, batch_, *kv_, {}, logits_.data(), normed_.data());
          TREESPEC_ASSERT(st.ok(), "train-heads: generation fits (context checked)");
        } else {
          forward_with_taps(w, rows);
        }
        for (size_t r = 0; r < rows.size(); ++r) {
          const int32_t s = rows[r];
          if (!take_row(w, s, r, samplers[static_cast<size_t>(s)])) active[static_cast<size_t>(s)] = false;
          ++generated;
        }
        const double el = core::now_s() - t0;
        if (progress && el - last_report > 0.2) {
          last_report = el;
          const double rate = static_cast<double>(generated) / std::max(el, 1e-9);
          // Every sample running to seq_len is the upper bound (EOG ends some early).
          const int64_t est_total = std::max<int64_t>(total, generated);
          progress({"generate", generated, est_total, 0.0, rate, el,
                    static_cast<double>(est_total - generated) / std::max(rate, 1e-9)});
        }
      }
    }
    rep_.generated_tokens = generated;
    rep_.gen_seconds = core::now_s() - t0;
    if (progress)
      progress({"generate", generated, generated, 0.0,
                static_cast<double>(generated) / std::max(rep_.gen_seconds, 1e-9), rep_.gen_seconds, 0.0});
    return std::move(samples_);
  }

 private:
  // Samples w .. w + nb - 1 start: a sampler each, their prompts prefilled but for the last
  // token, which becomes tokens[0].
  std::vector<sampling::Sampler> start_window(int32_t w, int32_t nb) {
    std::vector<sampling::Sampler> samplers;
    for (int32_t s = 0; s < nb; ++s) {
      const int32_t i = w + s;
      const std::vector<int32_t> prompt =
          p_.prompts.empty() ? std::vector<int32_t>{p_.bos_id} : p_.prompts[static_cast<size_t>(i) % p_.prompts.size()];
      sampling::SamplingParams sp;
      sp.temp = p_.temp;
      sp.top_k = 0;
      sp.top_p = p_.top_p;
      sp.min_p = 0.0f;
      sp.seed = core::derive_seed(p_.seed, static_cast<uint64_t>(i));
      samplers.emplace_back(sp);
      kv_->clear(s);
      if (prompt.size() > 1) {  // prefill all but the last prompt token
        batch_.clear();
        const std::span<const int32_t> pre(prompt.data(), prompt.size() - 1);
        batch_.add_chain(s, 0, pre);
        ctx_.reserve(batch_.n_rows(), static_cast<int32_t>(n_cells_));
        m_.embed(batch_, ctx_.x());
        Status st = m_.run_layers(ctx_, batch_, 0, hp_.n_layer, ctx_.x(), *kv_);
        TREESPEC_ASSERT(st.ok(), "train-heads: prefill fits (context checked)");
        std::vector<int32_t> chain(pre.size());
        for (size_t j = 0; j < chain.size(); ++j) chain[j] = static_cast<int32_t>(j);
        st = kv_->commit(s, chain);
        TREESPEC_ASSERT(st.ok(), "train-heads: prefill commit fits");
      }
      samples_[static_cast<size_t>(i)].tokens.push_back(prompt.back());
    }
    return samplers;
  }

  // Layer by layer, keeping the residual after each one (ProPD taps and lens table).
  void forward_with_taps(int32_t w, const std::vector<int32_t>& rows) {
    const auto nr = static_cast<int32_t>(rows.size());
    ctx_.reserve(nr, static_cast<int32_t>(n_cells_));
    float* x = ctx_.x();
    m_.embed(batch_, x);
    for (int32_t l = 0; l < hp_.n_layer; ++l) {
      std::copy(x, x + static_cast<size_t>(nr) * E_, layer_x_.data() + static_cast<size_t>(l) * B_ * E_);
      const Status st = m_.run_layers(ctx_, batch_, l, l + 1, x, *kv_);
      TREESPEC_ASSERT(st.ok(), "train-heads: generation fits (context checked)");
    }
    m_.final_norm(x, nr, {}, normed_.data());
    m_.lm_head(ctx_, normed_.data(), nr, logits_.data());
    // Tapped layers: the final norm of each row's residual.
    for (size_t ti = 0; ti < p_.tap_layers.size(); ++ti) {
      const int32_t l = p_.tap_layers[ti];
      m_.final_norm(layer_x_.data() + static_cast<size_t>(l) * B_ * E_, nr, {}, tap_n_.data());
      for (int32_t r = 0; r < nr; ++r) {
        auto& dst = samples_[static_cast<size_t>(w + rows[static_cast<size_t>(r)])].taps;
        if (dst.size() < p_.tap_layers.size()) dst.resize(p_.tap_layers.size());
        dst[ti].insert(dst[ti].end(), tap_n_.data() + static_cast<size_t>(r) * E_,
                       tap_n_.data() + static_cast<size_t>(r + 1) * E_);
      }
    }
    // Logit lens after every layer, on held-out rows only.
    std::vector<int32_t> held;
    for (int32_t r = 0; r < nr; ++r) {
      if (w + rows[static_cast<size_t>(r)] >= first_heldout_) held.push_back(r);
    }
    if (held.empty()) return;
    for (int32_t l = 0; l < hp_.n_layer; ++l) {
      m_.final_norm(layer_x_.data() + static_cast<size_t>(l) * B_ * E_, nr, held, tap_n_.data());
      m_.lm_head(ctx_, tap_n_.data(), static_cast<int32_t>(held.size()), lens_logits_.data());
      for (size_t h = 0; h < held.size(); ++h) {
        const float* fl = logits_.data() + static_cast<size_t>(held[h]) * V_;
        const int32_t rk =
            sampling::rank_of(lens_logits_.data() + h * static_cast<size_t>(V_), V_, sampling::argmax(fl, V_));
        if (rk < rep_.taps.lens_top_k) ++rep_.taps.lens_hits[static_cast<size_t>(l * rep_.taps.lens_top_k + rk)];
      }
    }
    rep_.taps.lens_rows += static_cast<int64_t>(held.size());
  }

  // Row r of the forward (sample slot s): records its hidden state (argmax, KL targets),
  // samples and commits the next token. False when the sample has ended.
  bool take_row(int32_t w, int32_t s, size_t r, sampling::Sampler& sampler) {
    Sample& smp = samples_[static_cast<size_t>(w + s)];
    const float* lg = logits_.data() + r * static_cast<size_t>(V_);
    smp.hidden.insert(smp.hidden.end(), normed_.data() + r * static_cast<size_t>(E_),
                      normed_.data() + (r + 1) * static_cast<size_t>(E_));
    if (taps_) smp.argmax.push_back(sampling::argmax(lg, V_));
    if (kl_) record_kl_targets(smp, lg);
    const int32_t next = sampler.sample(lg, V_);
    const int32_t path0 = 0;
    const Status st = kv_->commit(s, std::span<const int32_t>(&path0, 1));
    TREESPEC_ASSERT(st.ok(), "train-heads: commit fits");
    smp.tokens.push_back(next);
    const bool eog = std::find(p_.eog_ids.begin(), p_.eog_ids.end(), next) != p_.eog_ids.end();
    return !(eog || static_cast<int32_t>(smp.tokens.size()) > p_.seq_len);
  }

  // Base distribution (temperature 1), its top entries renormalised.
  void record_kl_targets(Sample& smp, const float* lg) const {
    float mx = lg[0];
    for (int32_t v = 1; v < V_; ++v) mx = std::max(mx, lg[v]);
    std::vector<int32_t> idx(static_cast<size_t>(kl_top_));
    sampling::top_k_ids(lg, V_, kl_top_, idx.data());
    double sum = 0.0;
    for (int32_t j = 0; j < kl_top_; ++j) sum += std::exp(static_cast<double>(lg[idx[static_cast<size_t>(j)]] - mx));
    for (int32_t j = 0; j < kl_top_; ++j) {
      smp.kl_ids.push_back(idx[static_cast<size_t>(j)]);
      smp.kl_p.push_back(static_cast<float>(std::exp(static_cast<double>(lg[idx[static_cast<size_t>(j)]] - mx)) / sum));
    }
  }

  const model::Model& m_;
  const MedusaTrainParams& p_;
  model::ForwardContext& ctx_;
  MedusaTrainReport& rep_;
  const model::Hparams& hp_;
  const int32_t E_, V_;
  int64_t n_cells_ = 0;
  int32_t B_ = 1;
  std::unique_ptr<kv::KvCache> kv_;
  std::vector<Sample> samples_;
  bool kl_ = false, taps_ = false;
  int32_t kl_top_ = 0, first_heldout_ = 0;
  std::vector<float> logits_, normed_, layer_x_, tap_n_, lens_logits_;
  model::Batch batch_;
};

std::vector<Sample> generate_samples(const model::Model& m, const MedusaTrainParams& p, model::ForwardContext& ctx,
                                     const TrainProgressFn& progress, MedusaTrainReport& rep) {
  return TrainingTextWriter(m, p, ctx, rep).run(progress);
}

}  // namespace

std::vector<TrainingSample> generate_training_text(const model::Model& m, const MedusaTrainParams& p,
                                                   model::ForwardContext& ctx, const TrainProgressFn& progress,
                                                   MedusaTrainReport& rep) {
  return generate_samples(m, p, ctx, progress, rep);
}

namespace {

std::shared_ptr<MedusaHeads> to_heads(const MedusaHeadsInfo& info, const std::vector<HeadTensors>& params) {
  std::vector<std::vector<std::vector<float>>> bw, bb;
  std::vector<std::vector<float>> out;
  for (const auto& hp : params) {
    bw.push_back(hp.w);
    bb.push_back(hp.b);
    if (!info.shared_output) out.push_back(hp.out);
  }
  return MedusaHeads::from_f32(info, std::move(bw), std::move(bb), std::move(out));
}

// Held-out rows of a sample set as one matrix with per-head targets.
struct EvalSet {
  std::vector<float> h;                      // [n, E]
  std::vector<std::vector<int32_t>> target;  // [K][n]
  int64_t n = 0;
};

EvalSet make_eval_set(const std::vector<Sample>& samples, size_t first, int32_t K, int32_t E) {
  EvalSet es;
  es.target.resize(static_cast<size_t>(K));
  for (size_t s = first; s < samples.size(); ++s) {
    const Sample& smp = samples[s];
    for (int64_t t = 0; t + 2 < static_cast<int64_t>(smp.tokens.size()); ++t) {  // head 0 has a target
      es.h.insert(es.h.end(), smp.hidden.begin() + t * E, smp.hidden.begin() + (t + 1) * E);
      for (int32_t k = 0; k < K; ++k) {
        const int64_t tgt = t + k + 2;
        es.target[static_cast<size_t>(k)].push_back(
            tgt < static_cast<int64_t>(smp.tokens.size()) ? smp.tokens[static_cast<size_t>(tgt)] : -1);
      }
      ++es.n;
    }
  }
  return es;
}

}  // namespace

MedusaEval evaluate_heads(const MedusaHeads& heads, const float* h, int64_t n,
                          const std::vector<std::vector<int32_t>>& targets, int32_t top_k, core::ThreadPool* pool) {
  const int32_t K = heads.n_heads(), E = heads.n_embd(), V = heads.n_vocab();
  TREESPEC_ASSERT(targets.size() == static_cast<size_t>(K), "evaluate_heads: one target row per head");
  MedusaEval ev;
  ev.top_k = top_k;
  ev.loss.assign(static_cast<size_t>(K), 0.0);
  ev.topk_acc.assign(static_cast<size_t>(K) * static_cast<size_t>(top_k), 0.0f);
  ev.n.assign(static_cast<size_t>(K), 0);
  constexpr int64_t chunk = 256;
  std::vector<float> work(static_cast<size_t>(2 * chunk * E)), logits(static_cast<size_t>(chunk) * V);
  std::vector<int64_t> hits(static_cast<size_t>(top_k));
  // The target's rank among what the heads can propose: with a draft vocabulary, among its
  // tokens (a target outside it is never a hit), so the table auto trees are built from
  // is what decoding will see.
  const std::vector<int32_t>& dv = heads.info().draft_vocab;
  std::vector<float> sub(dv.size());
  auto draft_rank = [&](const float* lg, int32_t V_, int32_t y) {
    if (dv.empty()) return sampling::rank_of(lg, V_, y);
    const auto it = std::lower_bound(dv.begin(), dv.end(), y);
    if (it == dv.end() || *it != y) return std::numeric_limits<int32_t>::max();
    for (size_t i = 0; i < dv.size(); ++i) sub[i] = lg[dv[i]];
    return sampling::rank_of(sub.data(), static_cast<int32_t>(sub.size()), static_cast<int32_t>(it - dv.begin()));
  };
  for (int32_t k = 0; k < K; ++k) {
    const auto& tg = targets[static_cast<size_t>(k)];
    double loss = 0.0;
    int64_t cnt = 0;
    std::fill(hits.begin(), hits.end(), 0);
    for (int64_t b = 0; b < n; b += chunk) {
      const int64_t M = std::min(chunk, n - b);
      heads.forward(k, h + b * E, M, work.data(), logits.data(), pool);
      for (int64_t m = 0; m < M; ++m) {
        const int32_t y = tg[static_cast<size_t>(b + m)];
        if (y < 0) continue;
        const float* lg = logits.data() + m * V;
        float mx = lg[0];
        for (int32_t v = 1; v < V; ++v) mx = std::max(mx, lg[v]);
        double sum = 0.0;
        for (int32_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(lg[v] - mx));
        const int32_t rank = draft_rank(lg, V, y);
        loss += std::log(sum) - static_cast<double>(lg[y] - mx);
        if (rank < top_k) ++hits[static_cast<size_t>(rank)];
        ++cnt;
      }
    }
    ev.loss[static_cast<size_t>(k)] = cnt ? loss / static_cast<double>(cnt) : 0.0;
    ev.n[static_cast<size_t>(k)] = cnt;
    int64_t acc = 0;
    for (int32_t j = 0; j < top_k; ++j) {
      acc += hits[static_cast<size_t>(j)];
      ev.topk_acc[static_cast<size_t>(k * top_k + j)] =
          cnt ? static_cast<float>(static_cast<double>(acc) / static_cast<double>(cnt)) : 0.0f;
    }
  }
  return ev;
}

namespace {

// The n most frequent token ids of the first n_train samples (ties: lower id), ascending.
std::vector<int32_t> frequent_tokens(const std::vector<Sample>& samples, size_t n_train, int32_t V, int32_t n) {
  std::vector<int64_t> count(static_cast<size_t>(V), 0);
  for (size_t s = 0; s < n_train; ++s) {
    for (int32_t t : samples[s].tokens) {
      if (t >= 0 && t < V) ++count[static_cast<size_t>(t)];
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int32_t i = 0; i < V; ++i) ids[static_cast<size_t>(i)] = i;
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return count[static_cast<size_t>(a)] > count[static_cast<size_t>(b)]; });
  ids.resize(static_cast<size_t>(n));
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Training rows: (sample, t) for the first n_train samples where head 0 has a target.
std::vector<std::pair<int32_t, int32_t>> medusa_training_rows(const std::vector<Sample>& samples, size_t n_train) {
  std::vector<std::pair<int32_t, int32_t>> rows;
  for (size_t s = 0; s < n_train; ++s) {
    for (int64_t t = 0; t + 2 < static_cast<int64_t>(samples[s].tokens.size()); ++t)
      rows.emplace_back(static_cast<int32_t>(s), static_cast<int32_t>(t));
  }
  return rows;
}

// Moves the samples' per-layer taps (and argmax, KL targets, held-out flags) into one
// PruneTaps table for the prune-head trainer.
void collect_prune_taps(PruneTaps& tp, std::vector<Sample>& samples, size_t n_train, const MedusaTrainParams& p,
                        int32_t V) {
  tp.layers = p.tap_layers;
  tp.h.assign(p.tap_layers.size(), {});
  tp.kl_top = p.kl_weight > 0.0f ? std::min(p.kl_top, V) : 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    const Sample& smp = samples[s];
    const int64_t n = smp.n_rows();
    for (size_t ti = 0; ti < tp.layers.size(); ++ti) {
      if (n > 0 && ti < smp.taps.size()) tp.h[ti].insert(tp.h[ti].end(), smp.taps[ti].begin(), smp.taps[ti].end());
    }
    tp.argmax.insert(tp.argmax.end(), smp.argmax.begin(), smp.argmax.end());
    tp.heldout.insert(tp.heldout.end(), static_cast<size_t>(n), s >= n_train ? 1 : 0);
    if (tp.kl_top > 0) {
      tp.kl_ids.insert(tp.kl_ids.end(), smp.kl_ids.begin(), smp.kl_ids.end());
      tp.kl_p.insert(tp.kl_p.end(), smp.kl_p.begin(), smp.kl_p.end());
    }
    tp.n_rows += n;
  }
  // Free the per-sample copies early (the Medusa training below needs the rest).
  for (auto& smp : samples) std::vector<std::vector<float>>().swap(smp.taps);
}

// K heads of R blocks: W, b zero; each vocab projection a copy of the base output matrix
// (frozen when the heads share it).
std::vector<HeadTensors> initial_head_params(const model::Model& m, int32_t K, int32_t R, bool frozen_out) {
  const int32_t E = m.hparams().n_embd, V = m.hparams().n_vocab;
  std::vector<HeadTensors> params(static_cast<size_t>(K));
  std::vector<float> base_out(static_cast<size_t>(V) * static_cast<size_t>(E));
  m.output().dequantize(base_out.data());
  for (auto& hp : params) {
    hp.w.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(E) * static_cast<size_t>(E), 0.0f));
    hp.b.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(E), 0.0f));
    hp.out = base_out;
    hp.out_frozen = frozen_out;
  }
  return params;
}

// Adam on minibatches of random training rows (one RNG stream: deterministic for a seed),
// warm-up then cosine decay to 0.1 lr. Sets rep.train_seconds and rep.final_train_loss.
void run_head_adam(std::vector<HeadTensors>& params, const std::vector<Sample>& samples,
                   const std::vector<std::pair<int32_t, int32_t>>& rows, const MedusaTrainParams& p, int32_t E,
                   int32_t V, core::ThreadPool& pool, const TrainProgressFn& progress, MedusaTrainReport& rep) {
  const auto K = static_cast<int32_t>(params.size());
  std::vector<HeadTensors> grads;
  std::vector<AdamState> adam;
  for (const auto& hp : params) {
    grads.push_back(hp.like(0.0f));
    adam.emplace_back(hp);
  }
  const int64_t M = p.batch;
  const bool kl = p.kl_weight > 0.0f;
  const int32_t kl_top = std::min(p.kl_top, V);
  core::Rng rng(core::derive_seed(p.seed, 0x5eed));
  std::vector<float> hbuf(static_cast<size_t>(M) * static_cast<size_t>(E));
  std::vector<int32_t> tgt(static_cast<size_t>(M));
  std::vector<int32_t> sid(kl ? static_cast<size_t>(M) * static_cast<size_t>(kl_top) : 0);
  std::vector<float> sp(sid.size());
  std::vector<int32_t> pick(static_cast<size_t>(M));
  HeadScratch scratch;
  const int64_t warm = std::max<int64_t>(1, std::llround(p.warmup * static_cast<float>(p.steps)));
  const double t_train0 = core::now_s();
  double smooth = 0.0, last_report = -1.0;
  for (int32_t step = 0; step < p.steps; ++step) {
    const double prog = p.steps > 1 ? static_cast<double>(step) / static_cast<double>(p.steps - 1) : 1.0;
    const double cosine = 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * prog));
    const float lr =
        static_cast<float>(p.lr * std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warm)) * cosine);
    for (int64_t i = 0; i < M; ++i) {
      pick[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform_int(rows.size()));
      const auto [s, t] = rows[static_cast<size_t>(pick[static_cast<size_t>(i)])];
      const Sample& smp = samples[static_cast<size_t>(s)];
      std::memcpy(hbuf.data() + i * E, smp.hidden.data() + static_cast<size_t>(t) * E,
                  static_cast<size_t>(E) * sizeof(float));
    }
    double step_loss = 0.0;
    for (int32_t k = 0; k < K; ++k) {
      for (int64_t i = 0; i < M; ++i) {
        const auto [s, t] = rows[static_cast<size_t>(pick[static_cast<size_t>(i)])];
        const Sample& smp = samples[static_cast<size_t>(s)];
        const int64_t at = static_cast<int64_t>(t) + k + 2;
        const bool ok = at < static_cast<int64_t>(smp.tokens.size());
        tgt[static_cast<size_t>(i)] = ok ? smp.tokens[static_cast<size_t>(at)] : -1;
        if (kl && ok) {  // base distribution that produced tokens[at] sits at row at - 1
          std::memcpy(sid.data() + i * kl_top, smp.kl_ids.data() + (at - 1) * kl_top,
                      static_cast<size_t>(kl_top) * sizeof(int32_t));
          std::memcpy(sp.data() + i * kl_top, smp.kl_p.data() + (at - 1) * kl_top,
                      static_cast<size_t>(kl_top) * sizeof(float));
        }
      }
      const SoftTargets soft{kl ? sid.data() : nullptr, kl ? sp.data() : nullptr, kl_top, p.kl_weight};
      const auto ks = static_cast<size_t>(k);
      step_loss += head_forward_backward(params[ks], E, V, hbuf.data(), M, tgt.data(), soft, grads[ks], scratch, pool);
      adam_update(params[ks], grads[ks], adam[ks], lr, step + 1, pool);
    }
    step_loss /= K;
    smooth = step == 0 ? step_loss : 0.95 * smooth + 0.05 * step_loss;
    const double el = core::now_s() - t_train0;
    if (progress && (el - last_report > 0.2 || step + 1 == p.steps)) {
      last_report = el;
      const double rate = static_cast<double>(M) * (step + 1) / std::max(el, 1e-9);
      progress({"train", step + 1, p.steps, smooth, rate, el, el / (step + 1) * (p.steps - step - 1)});
    }
  }
  rep.train_seconds = core::now_s() - t_train0;
  rep.final_train_loss = smooth;
}

// The held-out calibration and the training summary, into the heads' metadata.
void record_medusa_calibration(MedusaHeadsInfo& out, const MedusaTrainParams& p, const MedusaTrainReport& rep) {
  out.calib_top_k = p.eval_top_k;
  out.calibration = rep.after.topk_acc;
  out.calib_loss.assign(rep.after.loss.begin(), rep.after.loss.end());
  out.calib_tokens = rep.after.n.empty() ? 0 : rep.after.n[0];
  using gguf::Value;
  std::vector<float> loss_before(rep.before.loss.begin(), rep.before.loss.end());
  out.train_meta = {
      {"medusa.train.method", Value::string("self-distillation (treespec train-heads)")},
      {"medusa.train.steps", Value::u32(static_cast<uint32_t>(p.steps))},
      {"medusa.train.lr", Value::f32(p.lr)},
      {"medusa.train.batch", Value::u32(static_cast<uint32_t>(p.batch))},
      {"medusa.train.samples", Value::u32(static_cast<uint32_t>(p.samples))},
      {"medusa.train.seq_len", Value::u32(static_cast<uint32_t>(p.seq_len))},
      {"medusa.train.temp", Value::f32(p.temp)},
      {"medusa.train.top_p", Value::f32(p.top_p)},
      {"medusa.train.kl_weight", Value::f32(p.kl_weight)},
      {"medusa.train.seed", Value::u64(p.seed)},
      {"medusa.train.n_prompts", Value::u32(static_cast<uint32_t>(p.prompts.size()))},
      {"medusa.train.positions", Value::u64(static_cast<uint64_t>(rep.train_positions))},
      {"medusa.train.heldout_loss_before", Value::f32_array(loss_before)},
      {"medusa.train.final_train_loss", Value::f32(static_cast<float>(rep.final_train_loss))},
  };
}

}  // namespace

std::shared_ptr<MedusaHeads> train_medusa_heads(const model::Model& m, const MedusaTrainParams& p,
                                                MedusaTrainReport* report, const TrainProgressFn& progress) {
  p.validate();
  const auto& hpm = m.hparams();
  const int32_t E = hpm.n_embd, V = hpm.n_vocab, K = p.n_heads, R = p.blocks_for(hpm.n_embd);
  if (p.eval_top_k > V)
    throw InvalidArgument(fmt::format("calibration top-k {} exceeds the vocabulary ({})", p.eval_top_k, V));
  MedusaTrainReport local;
  MedusaTrainReport& rep = report ? *report : local;
  model::ForwardContext ctx(m, p.n_threads);
  core::ThreadPool& pool = ctx.pool();

  // 1. The base model writes its own training text.
  std::vector<Sample> samples = generate_samples(m, p, ctx, progress, rep);
  const auto n_hold = static_cast<size_t>(
      std::clamp<int64_t>(std::llround(p.holdout * static_cast<float>(p.samples)), 1, p.samples - 1));
  const size_t n_train = samples.size() - n_hold;
  const auto rows = medusa_training_rows(samples, n_train);
  rep.train_positions = static_cast<int64_t>(rows.size());
  if (rows.empty())
    throw InvalidArgument(
        "train-heads: the generated training text is too short (every sample ended at once); raise --seq-len or use "
        "prompts");
  if (!p.tap_layers.empty()) collect_prune_taps(rep.taps, samples, n_train, p, V);
  const EvalSet eval = make_eval_set(samples, n_train, K, E);
  rep.heldout_positions = eval.n;
  if (eval.n == 0)
    throw InvalidArgument(
        "train-heads: the held-out samples have no positions to evaluate; raise --samples or --holdout");

  // 2. Initialise: W, b zero; the vocab projection the base output matrix (shared and
  // frozen, or a trained copy per head).
  auto init = MedusaHeads::init_from_model(m, K, R, !p.own_output);
  MedusaHeadsInfo info = init->info();
  {
    const double t0 = core::now_s();
    rep.before = evaluate_heads(*init, eval.h.data(), eval.n, eval.target, p.eval_top_k, &pool);
    rep.eval_seconds += core::now_s() - t0;
  }
  std::vector<HeadTensors> params = initial_head_params(m, K, R, !p.own_output);

  // 3. Adam on minibatches of random positions.
  run_head_adam(params, samples, rows, p, E, V, pool, progress, rep);

  // 4. Held-out calibration (ranks among the draft vocabulary, if any: what the heads can
  // propose at decode time).
  if (const int32_t n = p.draft_vocab_for(V); n > 0) {
    info.draft_vocab = frequent_tokens(samples, n_train, V, n);
    int64_t in = 0, all = 0;
    for (size_t s = n_train; s < samples.size(); ++s) {
      for (int32_t t : samples[s].tokens) {
        in += std::binary_search(info.draft_vocab.begin(), info.draft_vocab.end(), t) ? 1 : 0;
        ++all;
      }
    }
    rep.draft_vocab = n;
    rep.draft_vocab_coverage = all > 0 ? static_cast<double>(in) / static_cast<double>(all) : 1.0;
  }
  auto heads = to_heads(info, params);
  heads->bind(m);
  {
    const double t0 = core::now_s();
    if (progress) progress({"eval", 0, eval.n, 0.0, 0.0, 0.0, 0.0});
    rep.after = evaluate_heads(*heads, eval.h.data(), eval.n, eval.target, p.eval_top_k, &pool);
    const double dt = core::now_s() - t0;
    rep.eval_seconds += dt;
    if (progress) progress({"eval", eval.n, eval.n, 0.0, static_cast<double>(eval.n) / std::max(dt, 1e-9), dt, 0.0});
  }
  record_medusa_calibration(heads->mutable_info(), p, rep);
  return heads;
}

}  // namespace treespec::train
