#include "train/eagle_train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/assert.h"
#include "core/rng.h"
#include "core/timer.h"
#include "drafters/eagle/eagle_layer.h"
#include "drafters/medusa/medusa_heads.h"  // output_matrix_hash
#include "model/model.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::train {

EagleTrainParams::EagleTrainParams() {
  gen.samples = 512;
  gen.seq_len = 256;
  gen.temp = 0.7f;
  gen.kl_top = 32;
  gen.n_heads = 1;
}

void EagleTrainParams::validate() const {
  auto bad = [](const std::string& m) { throw InvalidArgument(m); };
  if (steps < 1 || steps > 10'000'000) bad(fmt::format("--steps must be in 1..10000000, got {}", steps));
  if (!(lr > 0.0f && lr < 1.0f)) bad(fmt::format("--lr must be in (0, 1), got {}", lr));
  if (!(warmup >= 0.0f && warmup < 1.0f)) bad(fmt::format("warm-up fraction must be in [0, 1), got {}", warmup));
  if (window < 2 || window > 4096) bad(fmt::format("--window must be in 2..4096, got {}", window));
  if (windows < 1 || windows > 4096) bad(fmt::format("--windows must be in 1..4096, got {}", windows));
  if (!(feat_weight >= 0.0f) || !(tok_weight >= 0.0f) || feat_weight + tok_weight <= 0.0f)
    bad(fmt::format("--feat-weight {} and --tok-weight {} must be >= 0, not both 0", feat_weight, tok_weight));
  if (!(kl_weight >= 0.0f && kl_weight <= 1.0f)) bad(fmt::format("--kl must be in [0, 1], got {}", kl_weight));
  if (!(noise >= 0.0f && noise <= 10.0f)) bad(fmt::format("--noise must be in [0, 10], got {}", noise));
  gen.validate();
}

EagleShape eagle_shape_for(const model::Model& m) {
  const auto& hp = m.hparams();
  EagleShape s;
  s.E = hp.n_embd;
  s.n_head = hp.n_head;
  s.n_head_kv = hp.n_head_kv;
  s.head_dim = hp.head_dim;
  s.n_ff = hp.n_ff;
  s.n_rot = hp.head_dim;
  s.V = hp.n_vocab;
  s.rms_eps = hp.rms_eps;
  s.rope_theta = hp.rope_theta;
  s.rope_freq_scale = 1.0f;
  s.rope_neox = false;  // the layer is a llama layer (docs/eagle.md)
  s.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  return s;
}

EagleTensors eagle_init(const EagleShape& s, uint64_t seed) {
  EagleTensors t = EagleTensors::zeros(s);
  core::Rng rng(core::derive_seed(seed, 0xea61e));
  const auto E = static_cast<size_t>(s.E);
  auto fill = [&](std::vector<float>& w, double std) {
    for (float& v : w) v = static_cast<float>(rng.normal() * std);
  };
  std::fill(t.enorm.begin(), t.enorm.end(), 1.0f);
  std::fill(t.attn_norm.begin(), t.attn_norm.end(), 1.0f);
  std::fill(t.ffn_norm.begin(), t.ffn_norm.end(), 1.0f);
  std::fill(t.out_norm.begin(), t.out_norm.end(), 1.0f);
  // fc: the feature passes through (identity on its half), the embedding adds a little.
  for (size_t o = 0; o < E; ++o) {
    for (size_t i = 0; i < E; ++i) t.fc[o * 2 * E + i] = static_cast<float>(rng.normal() * 0.1 / std::sqrt(E));
    t.fc[o * 2 * E + E + o] = 1.0f;
  }
  const double in_std = 1.0 / std::sqrt(static_cast<double>(s.E));
  fill(t.wq, in_std);
  fill(t.wk, in_std);
  fill(t.wv, in_std);
  fill(t.w_gate, in_std);
  fill(t.w_up, in_std);
  // Residual branches start small: the layer starts near the identity.
  fill(t.wo, 0.1 / std::sqrt(static_cast<double>(s.n_head) * s.head_dim));
  fill(t.w_down, 0.1 / std::sqrt(static_cast<double>(s.n_ff)));
  return t;
}

namespace {

// A window of training rows: sample s, draft rows t0 .. t0 + n - 1 (row t: (f_t, x_{t+1})
// predicting f_{t+1} and the target's distribution at t + 1).
struct Window {
  int32_t s = 0;
  int32_t t0 = 0;
  int32_t n = 0;
};

// Rows of sample smp that have a target: t in [0, n_rows - 2].
int32_t draft_rows(const TrainingSample& smp) { return static_cast<int32_t>(std::max<int64_t>(0, smp.n_rows() - 1)); }

class BatchBuilder {
 public:
  BatchBuilder(const model::Model& m, const std::vector<TrainingSample>& samples, int32_t kl_top)
      : m_(m), samples_(samples), E_(m.hparams().n_embd), kl_top_(kl_top) {}

  // Fills the batch for these windows; noise > 0 perturbs the input features.
  EagleBatch build(const std::vector<Window>& ws, float noise, core::Rng* rng, float kl_weight) {
    const auto E = static_cast<size_t>(E_);
    int64_t M = 0;
    for (const Window& w : ws) M += w.n;
    emb_.resize(static_cast<size_t>(M) * E);
    feat_.resize(static_cast<size_t>(M) * E);
    ftgt_.resize(static_cast<size_t>(M) * E);
    tgt_.resize(static_cast<size_t>(M));
    sid_.resize(static_cast<size_t>(M) * kl_top_);
    sp_.resize(sid_.size());
    starts_.clear();
    batch_.clear();
    int64_t r = 0;
    for (const Window& w : ws) {
      starts_.push_back(r);
      const TrainingSample& smp = samples_[static_cast<size_t>(w.s)];
      batch_.add_chain(
          0, 0, std::span<const int32_t>(smp.tokens).subspan(static_cast<size_t>(w.t0) + 1, static_cast<size_t>(w.n)));
      for (int32_t i = 0; i < w.n; ++i, ++r) {
        const size_t t = static_cast<size_t>(w.t0 + i);
        const float* f = smp.hidden.data() + t * E;
        float* dst = feat_.data() + static_cast<size_t>(r) * E;
        std::memcpy(dst, f, E * sizeof(float));
        if (noise > 0.0f) {
          double ss = 0.0;
          for (size_t j = 0; j < E; ++j) ss += static_cast<double>(f[j]) * f[j];
          const double a = noise * std::sqrt(ss / static_cast<double>(E));
          for (size_t j = 0; j < E; ++j) dst[j] += static_cast<float>((2.0 * rng->uniform() - 1.0) * a);
        }
        std::memcpy(ftgt_.data() + static_cast<size_t>(r) * E, smp.hidden.data() + (t + 1) * E, E * sizeof(float));
        tgt_[static_cast<size_t>(r)] = smp.tokens[t + 2];
        const size_t k = static_cast<size_t>(kl_top_);
        std::memcpy(sid_.data() + static_cast<size_t>(r) * k, smp.kl_ids.data() + (t + 1) * k, k * sizeof(int32_t));
        std::memcpy(sp_.data() + static_cast<size_t>(r) * k, smp.kl_p.data() + (t + 1) * k, k * sizeof(float));
      }
    }
    m_.embed(batch_, emb_.data());
    EagleBatch b;
    b.emb = emb_.data();
    b.feat = feat_.data();
    b.feat_target = ftgt_.data();
    b.target = tgt_.data();
    b.soft = SoftTargets{sid_.data(), sp_.data(), kl_top_, kl_weight};
    b.M = M;
    b.seq_start = starts_;
    return b;
  }
  std::vector<float>& feat() { return feat_; }
  // The target's argmax at t + 1 of batch row r (the top entry of its distribution).
  int32_t target_argmax(int64_t r) const { return sid_[static_cast<size_t>(r) * kl_top_]; }

 private:
  const model::Model& m_;
  const std::vector<TrainingSample>& samples_;
  int32_t E_, kl_top_;
  model::Batch batch_;
  std::vector<float> emb_, feat_, ftgt_, sp_;
  std::vector<int32_t> tgt_, sid_;
  std::vector<int64_t> starts_;
};

// Held-out evaluation: depth 1 from the target's features, depth 2 from the layer's own
// prediction of each row's feature (row r reads what row r - 1 predicted).
EagleEval evaluate(const EagleTensors& t, const EagleShape& s, const float* lm_head, BatchBuilder& bb,
                   const std::vector<Window>& held, const EagleTrainParams& p, core::ThreadPool& pool) {
  EagleEval ev;
  ev.top1.assign(2, 0.0);
  ev.top5.assign(2, 0.0);
  std::vector<int64_t> n(2, 0);
  EagleScratch sc;
  EagleTensors grad = t.like(0.0f);
  std::vector<float> y, logits;
  double loss_sum = 0.0;
  int64_t rows = 0;
  int32_t top[5];
  const int32_t k5 = std::min(5, s.V);
  for (size_t w0 = 0; w0 < held.size(); w0 += 8) {
    const std::vector<Window> ws(held.begin() + static_cast<ptrdiff_t>(w0),
                                 held.begin() + static_cast<ptrdiff_t>(std::min(held.size(), w0 + 8)));
    EagleBatch b = bb.build(ws, 0.0f, nullptr, p.kl_weight);
    loss_sum += eagle_forward_backward(t, s, lm_head, b, grad, sc, pool) * static_cast<double>(b.M);
    rows += b.M;
    y.resize(static_cast<size_t>(b.M) * s.E);
    logits.resize(static_cast<size_t>(b.M) * s.V);
    for (int depth = 0; depth < 2; ++depth) {
      if (depth == 1) {  // own predictions as the features
        std::vector<float>& f = bb.feat();
        for (size_t si = 0; si < b.seq_start.size(); ++si) {
          const int64_t a = b.seq_start[si];
          const int64_t e = si + 1 < b.seq_start.size() ? b.seq_start[si + 1] : b.M;
          for (int64_t r = e - 1; r > a; --r)
            std::memcpy(f.data() + r * s.E, y.data() + (r - 1) * s.E, static_cast<size_t>(s.E) * sizeof(float));
        }
      }
      eagle_forward(t, s, lm_head, b, y.data(), logits.data(), sc, pool);
      for (size_t si = 0; si < b.seq_start.size(); ++si) {
        const int64_t a = b.seq_start[si];
        const int64_t e = si + 1 < b.seq_start.size() ? b.seq_start[si + 1] : b.M;
        for (int64_t r = a + depth; r < e; ++r) {
          sampling::top_k_ids(logits.data() + r * s.V, s.V, k5, top);
          const int32_t want = bb.target_argmax(r);
          ev.top1[static_cast<size_t>(depth)] += top[0] == want ? 1.0 : 0.0;
          ev.top5[static_cast<size_t>(depth)] += std::find(top, top + k5, want) != top + k5 ? 1.0 : 0.0;
          n[static_cast<size_t>(depth)] += 1;
        }
      }
    }
  }
  for (int d = 0; d < 2; ++d) {
    const double nn = static_cast<double>(std::max<int64_t>(1, n[static_cast<size_t>(d)]));
    ev.top1[static_cast<size_t>(d)] /= nn;
    ev.top5[static_cast<size_t>(d)] /= nn;
  }
  ev.loss = loss_sum / static_cast<double>(std::max<int64_t>(1, rows));
  ev.n = n[0];
  return ev;
}

}  // namespace

void write_eagle_file(const std::string& path, const model::Model& m, const EagleShape& s, const EagleTensors& t,
                      const std::vector<float>& calib, int64_t calib_tokens,
                      const std::vector<std::pair<std::string, gguf::Value>>& train_meta) {
  using gguf::Value;
  const auto& hp = m.hparams();
  gguf::GgufWriter w;
  const std::string a = std::string(model::kLayerStackArch) + ".";
  w.set("general.architecture", Value::string(model::kLayerStackArch));
  w.set("general.name", Value::string(hp.name.empty() ? "EAGLE layer" : hp.name + " EAGLE layer"));
  w.set(a + "base_architecture", Value::string("llama"));
  w.set(a + "embedding_length", Value::u32(static_cast<uint32_t>(s.E)));
  w.set(a + "block_count", Value::u32(1));
  w.set(a + "attention.head_count", Value::u32(static_cast<uint32_t>(s.n_head)));
  w.set(a + "attention.head_count_kv", Value::u32(static_cast<uint32_t>(s.n_head_kv)));
  w.set(a + "attention.key_length", Value::u32(static_cast<uint32_t>(s.head_dim)));
  w.set(a + "feed_forward_length", Value::u32(static_cast<uint32_t>(s.n_ff)));
  w.set(a + "context_length", Value::u32(static_cast<uint32_t>(std::max(hp.n_ctx_train, 1))));
  w.set(a + "rope.dimension_count", Value::u32(static_cast<uint32_t>(s.n_rot)));
  w.set(a + "rope.freq_base", Value::f32(s.rope_theta));
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(s.rms_eps));
  drafters::EagleInfo info;
  info.n_embd = hp.n_embd;
  info.n_vocab = hp.n_vocab;
  info.base_name = hp.name;
  info.base_arch = hp.arch;
  info.base_n_layer = hp.n_layer;
  info.base_output_hash = drafters::output_matrix_hash(m);
  info.calib_top1 = calib;
  info.calib_tokens = calib_tokens;
  info.train_meta = train_meta;
  drafters::EagleLayer::add_info(w, info);
  const int64_t E = s.E, Q = static_cast<int64_t>(s.n_head) * s.head_dim,
                KV = static_cast<int64_t>(s.n_head_kv) * s.head_dim, F = s.n_ff;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    TREESPEC_ASSERT(static_cast<int64_t>(v.size()) == n, "eagle file: tensor size matches its shape");
    w.add_tensor(name, tensor::DType::f32, std::move(ne), v.data(), v.size() * sizeof(float));
  };
  add("fc.weight", {2 * E, E}, t.fc);
  add("enorm.weight", {E}, t.enorm);
  add("blk.0.attn_norm.weight", {E}, t.attn_norm);
  add("blk.0.attn_q.weight", {E, Q}, t.wq);
  add("blk.0.attn_k.weight", {E, KV}, t.wk);
  add("blk.0.attn_v.weight", {E, KV}, t.wv);
  add("blk.0.attn_output.weight", {Q, E}, t.wo);
  add("blk.0.ffn_norm.weight", {E}, t.ffn_norm);
  add("blk.0.ffn_gate.weight", {E, F}, t.w_gate);
  add("blk.0.ffn_up.weight", {E, F}, t.w_up);
  add("blk.0.ffn_down.weight", {F, E}, t.w_down);
  add("output_norm.weight", {E}, t.out_norm);
  w.write(path);
}

void train_eagle(const model::Model& m, const EagleTrainParams& p_in, const std::string& path, EagleTrainReport* report,
                 const TrainProgressFn& progress) {
  EagleTrainParams p = p_in;
  p.gen.kl_weight = std::max(p.kl_weight, 1e-6f);  // record the target's distributions (and argmax)
  p.validate();
  const EagleShape s = eagle_shape_for(m);
  EagleTrainReport local;
  EagleTrainReport& rep = report ? *report : local;
  model::ForwardContext ctx(m, p.gen.n_threads);
  MedusaTrainReport gen_rep;
  std::vector<TrainingSample> samples = generate_training_text(m, p.gen, ctx, progress, gen_rep);
  rep.generated_tokens = gen_rep.generated_tokens;
  rep.gen_seconds = gen_rep.gen_seconds;
  const int32_t kl_top = std::min(p.gen.kl_top, s.V);
  const auto n_samples = static_cast<int32_t>(samples.size());
  const int32_t first_held =
      n_samples - static_cast<int32_t>(std::clamp<int64_t>(std::llround(p.gen.holdout * static_cast<float>(n_samples)),
                                                           1, n_samples - 1));
  // Training windows start anywhere; held-out windows tile their samples.
  std::vector<int32_t> train_ids;
  std::vector<Window> held;
  for (int32_t i = 0; i < n_samples; ++i) {
    const int32_t nr = draft_rows(samples[static_cast<size_t>(i)]);
    if (nr < 2) continue;
    if (i < first_held) {
      train_ids.push_back(i);
      rep.train_rows += nr;
    } else {
      for (int32_t t0 = 0; t0 + 1 < nr; t0 += p.window) held.push_back({i, t0, std::min(p.window, nr - t0)});
    }
  }
  if (train_ids.empty() || held.empty()) {
    throw InvalidArgument(
        "train-eagle: the generated samples are too short to train on (every sample ended within 3 tokens); raise "
        "--seq-len or give --prompts");
  }
  std::vector<float> lm_head(static_cast<size_t>(s.V) * s.E);
  m.output().dequantize(lm_head.data());
  core::ThreadPool& pool = ctx.pool();
  EagleTensors t = eagle_init(s, p.gen.seed);
  BatchBuilder bb(m, samples, kl_top);
  rep.before = evaluate(t, s, lm_head.data(), bb, held, p, pool);

  EagleTensors grad = t.like(0.0f);
  EagleAdam adam(t);
  EagleScratch sc;
  core::Rng rng(core::derive_seed(p.gen.seed, 0xea61e7));
  const int64_t warm = std::max<int64_t>(1, std::llround(p.warmup * static_cast<float>(p.steps)));
  const double t0 = core::now_s();
  double smooth = 0.0, last_report = -1.0;
  int64_t rows_done = 0;
  std::vector<Window> ws(static_cast<size_t>(p.windows));
  for (int32_t step = 0; step < p.steps; ++step) {
    const double prog = p.steps > 1 ? static_cast<double>(step) / static_cast<double>(p.steps - 1) : 1.0;
    const double cosine = 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * prog));
    const auto lr =
        static_cast<float>(p.lr * std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warm)) * cosine);
    for (Window& w : ws) {
      w.s = train_ids[static_cast<size_t>(rng.uniform_int(train_ids.size()))];
      const int32_t nr = draft_rows(samples[static_cast<size_t>(w.s)]);
      w.n = std::min(p.window, nr);
      w.t0 = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(nr - w.n + 1)));
    }
    const EagleBatch b = bb.build(ws, p.noise, &rng, p.kl_weight);
    const double loss = eagle_forward_backward(t, s, lm_head.data(), b, grad, sc, pool);
    eagle_adam_update(t, grad, adam, lr, step + 1, pool);
    rows_done += b.M;
    smooth = step == 0 ? loss : 0.98 * smooth + 0.02 * loss;
    const double el = core::now_s() - t0;
    if (progress && (el - last_report > 0.2 || step + 1 == p.steps)) {
      last_report = el;
      const double rate = static_cast<double>(rows_done) / std::max(el, 1e-9);
      progress({"train", step + 1, p.steps, smooth, rate, el,
                el / static_cast<double>(step + 1) * static_cast<double>(p.steps - step - 1)});
    }
  }
  rep.train_seconds = core::now_s() - t0;
  rep.final_train_loss = smooth;
  rep.after = evaluate(t, s, lm_head.data(), bb, held, p, pool);
  const std::vector<float> calib(rep.after.top1.begin(), rep.after.top1.end());
  std::vector<std::pair<std::string, gguf::Value>> meta = {
      {"eagle.train.steps", gguf::Value::u32(static_cast<uint32_t>(p.steps))},
      {"eagle.train.samples", gguf::Value::u32(static_cast<uint32_t>(p.gen.samples))},
      {"eagle.train.seq_len", gguf::Value::u32(static_cast<uint32_t>(p.gen.seq_len))},
      {"eagle.train.lr", gguf::Value::f32(p.lr)},
      {"eagle.train.window", gguf::Value::u32(static_cast<uint32_t>(p.window))},
      {"eagle.train.noise", gguf::Value::f32(p.noise)},
      {"eagle.train.seed", gguf::Value::u64(p.gen.seed)},
      {"eagle.train.heldout_loss", gguf::Value::f32(static_cast<float>(rep.after.loss))}};
  write_eagle_file(path, m, s, t, std::vector<float>(calib.begin(), calib.end()), rep.after.n, meta);
}

}  // namespace treespec::train
