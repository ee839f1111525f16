#include "drafters/medusa/medusa_train.h"

#include "drafters/medusa/medusa_backprop.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/assert.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "treespec/status.h"

namespace treespec::drafters {

void MedusaTrainParams::validate() const {
  auto bad = [](const std::string& msg) { throw InvalidArgument(msg); };
  if (n_heads < 1 || n_heads > 64) bad(fmt::format("--heads must be in 1..64, got {}", n_heads));
  if (n_blocks < 0 || n_blocks > 64) bad(fmt::format("--blocks must be in 0..64, got {}", n_blocks));
  if (steps < 0 || steps > 10'000'000) bad(fmt::format("--steps must be in 0..10000000, got {}", steps));
  if (!(lr > 0.0f && lr < 1.0f)) bad(fmt::format("--lr must be in (0, 1), got {}", lr));
  if (!(warmup >= 0.0f && warmup < 1.0f)) bad(fmt::format("warm-up fraction must be in [0, 1), got {}", warmup));
  if (batch < 1 || batch > 65536) bad(fmt::format("--batch must be in 1..65536, got {}", batch));
  if (samples < 2 || samples > 1'000'000) bad(fmt::format("--samples must be in 2..1000000 (some are held out), got {}", samples));
  if (seq_len < n_heads + 2 || seq_len > 1'000'000) {
    bad(fmt::format("--seq-len must be at least heads + 2 = {} (head k predicts k + 2 ahead), got {}", n_heads + 2, seq_len));
  }
  if (!(holdout > 0.0f && holdout < 1.0f)) bad(fmt::format("--holdout must be in (0, 1), got {}", holdout));
  if (!(temp > 0.0f) || !std::isfinite(temp)) bad(fmt::format("--temp must be > 0 (the training text is sampled), got {}", temp));
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

// One generated sample: tokens[0] is the last prompt token; hidden row t is the final
// normed state at tokens[t] (it predicted tokens[t + 1]).
struct Sample {
  std::vector<int32_t> tokens;  // [len]
  std::vector<float> hidden;    // [len - 1, n_embd]
  std::vector<int32_t> kl_ids;  // [len - 1, kl_top] base distribution's top entries (KL only)
  std::vector<float> kl_p;      // [len - 1, kl_top]
  std::vector<std::vector<float>> taps;  // per tapped layer [len - 1, n_embd] (ProPD prune heads)
  std::vector<int32_t> argmax;  // [len - 1] final argmax (taps only)
  int64_t n_rows() const { return static_cast<int64_t>(tokens.size()) - 1; }
};

// Rank of `target` among logits[n], ties ranking the lower id first (as top_k_ids does).
int32_t rank_in(const float* lg, int32_t n, int32_t target) {
  const float v = lg[target];
  int32_t rank = 0;
  for (int32_t i = 0; i < n; ++i) rank += (lg[i] > v || (lg[i] == v && i < target)) ? 1 : 0;
  return rank;
}

// The base model writes the training text, gen_batch sequences per forward pass.
std::vector<Sample> generate_samples(const model::Model& m, const MedusaTrainParams& p, model::ForwardContext& ctx,
                                     const TrainProgressFn& progress, MedusaTrainReport& rep) {
  const auto& hp = m.hparams();
  const int32_t E = hp.n_embd, V = hp.n_vocab;
  size_t max_prompt = 1;
  for (const auto& pr : p.prompts) {
    max_prompt = std::max(max_prompt, pr.size());
    for (int32_t t : pr) {
      if (t < 0 || t >= V) throw InvalidArgument(fmt::format("prompt token {} is outside the vocabulary (0..{})", t, V - 1));
    }
  }
  if (p.bos_id < 0 || p.bos_id >= V) throw InvalidArgument(fmt::format("BOS id {} is outside the vocabulary", p.bos_id));
  const int64_t n_cells = static_cast<int64_t>(max_prompt) + p.seq_len;
  if (n_cells > hp.n_ctx_train) {
    throw InvalidArgument(fmt::format("--seq-len {} plus the longest prompt ({} tokens) exceeds the model's training context of {}",
                                      p.seq_len, max_prompt, hp.n_ctx_train));
  }
  const int32_t B = std::min(p.gen_batch, p.samples);
  kv::KvCache kv(m.kv_shape(B, static_cast<int32_t>(n_cells)));
  std::vector<Sample> samples(static_cast<size_t>(p.samples));
  const bool kl = p.kl_weight > 0.0f;
  const int32_t kl_top = std::min(p.kl_top, V);
  std::vector<float> logits(static_cast<size_t>(B) * V), normed(static_cast<size_t>(B) * E), probs(static_cast<size_t>(V));
  std::vector<int32_t> top(static_cast<size_t>(kl_top));
  // ProPD taps: residual after every layer of the rows of one forward, normed taps, lens logits.
  const bool taps = !p.tap_layers.empty();
  for (int32_t l : p.tap_layers) {
    if (l >= hp.n_layer) throw InvalidArgument(fmt::format("--prune-layer {} must be below the model's {} layers", l, hp.n_layer));
  }
  const int32_t first_heldout = p.samples - static_cast<int32_t>(std::clamp<int64_t>(std::llround(p.holdout * static_cast<float>(p.samples)), 1, p.samples - 1));
  std::vector<float> layer_x(taps ? static_cast<size_t>(hp.n_layer) * B * E : 0), tap_n(taps ? static_cast<size_t>(B) * E : 0);
  std::vector<float> lens_logits(taps ? static_cast<size_t>(B) * V : 0);
  if (taps) {
    rep.taps.lens_top_k = std::clamp(p.tap_top_k, 1, V);
    rep.taps.lens_hits.assign(static_cast<size_t>(hp.n_layer) * rep.taps.lens_top_k, 0);
  }
  model::Batch batch;
  const double t0 = core::now_s();
  const int64_t total = static_cast<int64_t>(p.samples) * p.seq_len;
  int64_t generated = 0;
  double last_report = 0.0;

  for (int32_t w = 0; w < p.samples; w += B) {
    const int32_t nb = std::min(B, p.samples - w);
    std::vector<sampling::Sampler> samplers;
    std::vector<bool> active(static_cast<size_t>(nb), true);
    for (int32_t s = 0; s < nb; ++s) {
      const int32_t i = w + s;
      const std::vector<int32_t> prompt = p.prompts.empty() ? std::vector<int32_t>{p.bos_id} : p.prompts[static_cast<size_t>(i) % p.prompts.size()];
      sampling::SamplingParams sp;
      sp.temp = p.temp;
      sp.top_k = 0;
      sp.top_p = p.top_p;
      sp.min_p = 0.0f;
      sp.seed = core::derive_seed(p.seed, static_cast<uint64_t>(i));
      samplers.emplace_back(sp);
      kv.clear(s);
      if (prompt.size() > 1) {  // prefill all but the last prompt token
        batch.clear();
        const std::span<const int32_t> pre(prompt.data(), prompt.size() - 1);
        batch.add_chain(s, 0, pre);
        ctx.reserve(batch.n_rows(), static_cast<int32_t>(n_cells));
        m.embed(batch, ctx.x());
        Status st = m.run_layers(ctx, batch, 0, hp.n_layer, ctx.x(), kv);
        TREESPEC_ASSERT(st.ok(), "train-heads: prefill fits (context checked)");
        std::vector<int32_t> chain(pre.size());
        for (size_t j = 0; j < chain.size(); ++j) chain[j] = static_cast<int32_t>(j);
        st = kv.commit(s, chain);
        TREESPEC_ASSERT(st.ok(), "train-heads: prefill commit fits");
      }
      samples[static_cast<size_t>(i)].tokens.push_back(prompt.back());
    }
    for (;;) {
      batch.clear();
      std::vector<int32_t> rows;  // sample slot of each row
      for (int32_t s = 0; s < nb; ++s) {
        if (!active[static_cast<size_t>(s)]) continue;
        const int32_t last = samples[static_cast<size_t>(w + s)].tokens.back();
        batch.add_chain(s, kv.n_past(s), std::span<const int32_t>(&last, 1));
        rows.push_back(s);
      }
      if (rows.empty()) break;
      Status st;
      if (!taps) {
        st = m.forward(ctx, batch, kv, {}, logits.data(), normed.data());
        TREESPEC_ASSERT(st.ok(), "train-heads: generation fits (context checked)");
      } else {
        // Layer by layer, keeping the residual after each one (ProPD taps and lens table).
        const auto nr = static_cast<int32_t>(rows.size());
        ctx.reserve(nr, static_cast<int32_t>(n_cells));
        float* x = ctx.x();
        m.embed(batch, x);
        for (int32_t l = 0; l < hp.n_layer; ++l) {
          std::copy(x, x + static_cast<size_t>(nr) * E, layer_x.data() + static_cast<size_t>(l) * B * E);
          st = m.run_layers(ctx, batch, l, l + 1, x, kv);
          TREESPEC_ASSERT(st.ok(), "train-heads: generation fits (context checked)");
        }
        m.final_norm(x, nr, {}, normed.data());
        m.lm_head(ctx, normed.data(), nr, logits.data());
        // Tapped layers: the final norm of each row's residual.
        for (size_t ti = 0; ti < p.tap_layers.size(); ++ti) {
          const int32_t l = p.tap_layers[ti];
          m.final_norm(layer_x.data() + static_cast<size_t>(l) * B * E, nr, {}, tap_n.data());
          for (int32_t r = 0; r < nr; ++r) {
            auto& dst = samples[static_cast<size_t>(w + rows[static_cast<size_t>(r)])].taps;
            if (dst.size() < p.tap_layers.size()) dst.resize(p.tap_layers.size());
            dst[ti].insert(dst[ti].end(), tap_n.data() + static_cast<size_t>(r) * E, tap_n.data() + static_cast<size_t>(r + 1) * E);
          }
        }
        // Logit lens after every layer, on held-out rows only.
        std::vector<int32_t> held;
        for (int32_t r = 0; r < nr; ++r) {
          if (w + rows[static_cast<size_t>(r)] >= first_heldout) held.push_back(r);
        }
        if (!held.empty()) {
          for (int32_t l = 0; l < hp.n_layer; ++l) {
            m.final_norm(layer_x.data() + static_cast<size_t>(l) * B * E, nr, held, tap_n.data());
            m.lm_head(ctx, tap_n.data(), static_cast<int32_t>(held.size()), lens_logits.data());
            for (size_t h = 0; h < held.size(); ++h) {
              const float* fl = logits.data() + static_cast<size_t>(held[h]) * V;
              const int32_t rk = rank_in(lens_logits.data() + h * static_cast<size_t>(V), V, sampling::argmax(fl, V));
              if (rk < rep.taps.lens_top_k) ++rep.taps.lens_hits[static_cast<size_t>(l * rep.taps.lens_top_k + rk)];
            }
          }
          rep.taps.lens_rows += static_cast<int64_t>(held.size());
        }
      }
      for (size_t r = 0; r < rows.size(); ++r) {
        const int32_t s = rows[r];
        Sample& smp = samples[static_cast<size_t>(w + s)];
        const float* lg = logits.data() + r * static_cast<size_t>(V);
        smp.hidden.insert(smp.hidden.end(), normed.data() + r * static_cast<size_t>(E), normed.data() + (r + 1) * static_cast<size_t>(E));
        if (taps) smp.argmax.push_back(sampling::argmax(lg, V));
        if (kl) {
          // Base distribution (temperature 1), its top entries renormalised.
          float mx = lg[0];
          for (int32_t v = 1; v < V; ++v) mx = std::max(mx, lg[v]);
          for (int32_t v = 0; v < V; ++v) probs[static_cast<size_t>(v)] = lg[v];
          std::vector<int32_t> idx(static_cast<size_t>(V));
          for (int32_t v = 0; v < V; ++v) idx[static_cast<size_t>(v)] = v;
          std::partial_sort(idx.begin(), idx.begin() + kl_top, idx.end(), [&](int32_t a, int32_t b) {
            return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)] || (probs[static_cast<size_t>(a)] == probs[static_cast<size_t>(b)] && a < b);
          });
          double sum = 0.0;
          for (int32_t j = 0; j < kl_top; ++j) sum += std::exp(static_cast<double>(lg[idx[static_cast<size_t>(j)]] - mx));
          for (int32_t j = 0; j < kl_top; ++j) {
            smp.kl_ids.push_back(idx[static_cast<size_t>(j)]);
            smp.kl_p.push_back(static_cast<float>(std::exp(static_cast<double>(lg[idx[static_cast<size_t>(j)]] - mx)) / sum));
          }
        }
        const int32_t next = samplers[static_cast<size_t>(s)].sample(lg, V);
        const int32_t path0 = 0;
        st = kv.commit(s, std::span<const int32_t>(&path0, 1));
        TREESPEC_ASSERT(st.ok(), "train-heads: commit fits");
        smp.tokens.push_back(next);
        ++generated;
        const bool eog = std::find(p.eog_ids.begin(), p.eog_ids.end(), next) != p.eog_ids.end();
        if (eog || static_cast<int32_t>(smp.tokens.size()) > p.seq_len) active[static_cast<size_t>(s)] = false;
      }
      const double el = core::now_s() - t0;
      if (progress && el - last_report > 0.2) {
        last_report = el;
        const double rate = static_cast<double>(generated) / std::max(el, 1e-9);
        // Every sample running to seq_len is the upper bound (EOG ends some early).
        const int64_t est_total = std::max<int64_t>(total, generated);
        progress({"generate", generated, est_total, 0.0, rate, el, static_cast<double>(est_total - generated) / std::max(rate, 1e-9)});
      }
    }
  }
  rep.generated_tokens = generated;
  rep.gen_seconds = core::now_s() - t0;
  if (progress) progress({"generate", generated, generated, 0.0, static_cast<double>(generated) / std::max(rep.gen_seconds, 1e-9), rep.gen_seconds, 0.0});
  return samples;
}

std::shared_ptr<MedusaHeads> to_heads(const MedusaHeadsInfo& info, const std::vector<HeadTensors>& params) {
  std::vector<std::vector<std::vector<float>>> bw, bb;
  std::vector<std::vector<float>> out;
  for (const auto& hp : params) {
    bw.push_back(hp.w);
    bb.push_back(hp.b);
    out.push_back(hp.out);
  }
  return MedusaHeads::from_f32(info, std::move(bw), std::move(bb), std::move(out));
}

// Held-out rows of a sample set as one matrix with per-head targets.
struct EvalSet {
  std::vector<float> h;                     // [n, E]
  std::vector<std::vector<int32_t>> target; // [K][n]
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
        es.target[static_cast<size_t>(k)].push_back(tgt < static_cast<int64_t>(smp.tokens.size()) ? smp.tokens[static_cast<size_t>(tgt)] : -1);
      }
      ++es.n;
    }
  }
  return es;
}

}  // namespace

MedusaEval evaluate_heads(const MedusaHeads& heads, const float* h, int64_t n, const std::vector<std::vector<int32_t>>& targets,
                          int32_t top_k, core::ThreadPool* pool) {
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
        int32_t rank = 0;  // same tie rule as top_k_ids: equal logits rank by lower id first
        for (int32_t v = 0; v < V; ++v) {
          sum += std::exp(static_cast<double>(lg[v] - mx));
          if (lg[v] > lg[y] || (lg[v] == lg[y] && v < y)) ++rank;
        }
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
      ev.topk_acc[static_cast<size_t>(k * top_k + j)] = cnt ? static_cast<float>(static_cast<double>(acc) / static_cast<double>(cnt)) : 0.0f;
    }
  }
  return ev;
}

std::shared_ptr<MedusaHeads> train_medusa_heads(const model::Model& m, const MedusaTrainParams& p, MedusaTrainReport* report,
                                                const TrainProgressFn& progress) {
  p.validate();
  const auto& hpm = m.hparams();
  const int32_t E = hpm.n_embd, V = hpm.n_vocab, K = p.n_heads, R = p.n_blocks;
  if (p.eval_top_k > V) throw InvalidArgument(fmt::format("calibration top-k {} exceeds the vocabulary ({})", p.eval_top_k, V));
  MedusaTrainReport local;
  MedusaTrainReport& rep = report ? *report : local;
  model::ForwardContext ctx(m, p.n_threads);
  core::ThreadPool& pool = ctx.pool();

  // 1. The base model writes its own training text.
  std::vector<Sample> samples = generate_samples(m, p, ctx, progress, rep);
  const auto n_hold = static_cast<size_t>(std::clamp<int64_t>(std::llround(p.holdout * static_cast<float>(p.samples)), 1, p.samples - 1));
  const size_t n_train = samples.size() - n_hold;

  // Training rows: (sample, t) where head 0 has a target.
  std::vector<std::pair<int32_t, int32_t>> rows;
  for (size_t s = 0; s < n_train; ++s) {
    for (int64_t t = 0; t + 2 < static_cast<int64_t>(samples[s].tokens.size()); ++t) rows.emplace_back(static_cast<int32_t>(s), static_cast<int32_t>(t));
  }
  rep.train_positions = static_cast<int64_t>(rows.size());
  if (rows.empty()) throw InvalidArgument("train-heads: the generated training text is too short (every sample ended at once); raise --seq-len or use prompts");
  if (!p.tap_layers.empty()) {
    PruneTaps& tp = rep.taps;
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
  const EvalSet eval = make_eval_set(samples, n_train, K, E);
  rep.heldout_positions = eval.n;
  if (eval.n == 0) throw InvalidArgument("train-heads: the held-out samples have no positions to evaluate; raise --samples or --holdout");

  // 2. Initialise: W, b zero; each vocab projection a copy of the base output matrix.
  auto init = MedusaHeads::init_from_model(m, K, R);
  MedusaHeadsInfo info = init->info();
  {
    const double t0 = core::now_s();
    rep.before = evaluate_heads(*init, eval.h.data(), eval.n, eval.target, p.eval_top_k, &pool);
    rep.eval_seconds += core::now_s() - t0;
  }
  std::vector<HeadTensors> params(static_cast<size_t>(K));
  {
    std::vector<float> base_out(static_cast<size_t>(V) * static_cast<size_t>(E));
    for (int32_t v = 0; v < V; ++v) kernels::get_row(m.output(), v, base_out.data() + static_cast<size_t>(v) * static_cast<size_t>(E));
    for (auto& hp : params) {
      hp.w.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(E) * static_cast<size_t>(E), 0.0f));
      hp.b.assign(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(E), 0.0f));
      hp.out = base_out;
    }
  }
  std::vector<HeadTensors> grads;
  std::vector<AdamState> adam;
  for (const auto& hp : params) {
    grads.push_back(hp.like(0.0f));
    adam.emplace_back(hp);
  }

  // 3. Adam on minibatches of random positions (one RNG stream: deterministic for a seed).
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
    const float lr = static_cast<float>(p.lr * std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warm)) * cosine);
    for (int64_t i = 0; i < M; ++i) {
      pick[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform_int(rows.size()));
      const auto [s, t] = rows[static_cast<size_t>(pick[static_cast<size_t>(i)])];
      const Sample& smp = samples[static_cast<size_t>(s)];
      std::memcpy(hbuf.data() + i * E, smp.hidden.data() + static_cast<size_t>(t) * E, static_cast<size_t>(E) * sizeof(float));
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
          std::memcpy(sid.data() + i * kl_top, smp.kl_ids.data() + (at - 1) * kl_top, static_cast<size_t>(kl_top) * sizeof(int32_t));
          std::memcpy(sp.data() + i * kl_top, smp.kl_p.data() + (at - 1) * kl_top, static_cast<size_t>(kl_top) * sizeof(float));
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

  // 4. Held-out calibration.
  auto heads = to_heads(info, params);
  {
    const double t0 = core::now_s();
    if (progress) progress({"eval", 0, eval.n, 0.0, 0.0, 0.0, 0.0});
    rep.after = evaluate_heads(*heads, eval.h.data(), eval.n, eval.target, p.eval_top_k, &pool);
    const double dt = core::now_s() - t0;
    rep.eval_seconds += dt;
    if (progress) progress({"eval", eval.n, eval.n, 0.0, static_cast<double>(eval.n) / std::max(dt, 1e-9), dt, 0.0});
  }
  MedusaHeadsInfo& out = heads->mutable_info();
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
  return heads;
}

}  // namespace treespec::drafters
