#include "sampling/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/assert.h"
#include "sampling/top_k.h"
#include "treespec/status.h"

namespace treespec::sampling {

void SamplingParams::validate() const {
  if (!std::isfinite(temp)) throw InvalidArgument("temperature must be a finite number");
  if (top_k < 0) throw InvalidArgument(fmt::format("top_k must be >= 0 (0 = off), got {}", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw InvalidArgument(fmt::format("top_p must be in (0, 1], got {}", top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) throw InvalidArgument(fmt::format("min_p must be in [0, 1], got {}", min_p));
  if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f)) {
    throw InvalidArgument(fmt::format("repeat_penalty must be > 0 (1 = off), got {}", repeat_penalty));
  }
  if (repeat_last_n < -1)
    throw InvalidArgument(
        fmt::format("repeat_last_n must be >= -1 (0 = off, -1 = the whole context), got {}", repeat_last_n));
  if (!(std::isfinite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    throw InvalidArgument(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  }
  if (!(std::isfinite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    throw InvalidArgument(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  }
  if (!(typical_p >= 0.0f && typical_p <= 1.0f)) {
    throw InvalidArgument(fmt::format("typical_p must be in [0, 1] (1 = off), got {}", typical_p));
  }
  for (const LogitBias& b : logit_bias) {
    if (b.token < 0) throw InvalidArgument(fmt::format("logit_bias: token id {} is negative", b.token));
    if (std::isnan(b.bias) || b.bias == std::numeric_limits<float>::infinity()) {
      throw InvalidArgument(
          fmt::format("logit_bias of token {} must be a number or -infinity (a ban), got {}", b.token, b.bias));
    }
  }
}

void apply_logit_bias(float* logits, int32_t n_vocab, const SamplingParams& params) {
  for (const LogitBias& b : params.logit_bias) {
    if (b.token >= 0 && b.token < n_vocab) logits[b.token] += b.bias;
  }
}

void process_logits(float* logits, int32_t n_vocab, std::span<const int32_t> prefix, std::span<const int32_t> tail,
                    const SamplingParams& params) {
  apply_logit_bias(logits, n_vocab, params);
  apply_penalties(logits, n_vocab, prefix, tail, params);
}

void apply_penalties(float* logits, int32_t n_vocab, std::span<const int32_t> prefix, std::span<const int32_t> tail,
                     const SamplingParams& params) {
  if (!params.penalized()) return;
  const size_t total = prefix.size() + tail.size();
  const size_t n = params.repeat_last_n < 0 ? total : std::min(total, static_cast<size_t>(params.repeat_last_n));
  std::vector<int32_t> window;
  window.reserve(n);
  for (size_t i = total - n; i < total; ++i) {
    const int32_t t = i < prefix.size() ? prefix[i] : tail[i - prefix.size()];
    if (t >= 0 && t < n_vocab) window.push_back(t);
  }
  std::sort(window.begin(), window.end());
  for (size_t i = 0; i < window.size();) {
    size_t j = i;
    while (j < window.size() && window[j] == window[i]) ++j;
    float& l = logits[window[i]];
    l = l > 0.0f ? l / params.repeat_penalty : l * params.repeat_penalty;
    l -= static_cast<float>(j - i) * params.frequency_penalty + params.presence_penalty;
    i = j;
  }
}

float Distribution::prob_of(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) return p[i];
  }
  return 0.0f;
}

bool Distribution::remove(int32_t id) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) {
      ids.erase(ids.begin() + static_cast<ptrdiff_t>(i));
      p.erase(p.begin() + static_cast<ptrdiff_t>(i));
      break;
    }
  }
  double sum = 0.0;
  for (float x : p) sum += x;
  if (ids.empty() || !(sum > 0.0)) {
    ids.clear();
    p.clear();
    return false;
  }
  for (float& x : p) x = static_cast<float>(x / sum);
  return true;
}

int32_t Distribution::sample(core::Rng& rng) const {
  TREESPEC_ASSERT(!ids.empty(), "sample from an empty distribution");
  const double u = rng.uniform();
  double acc = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids.back();  // rounding: the remaining mass belongs to the last token
}

int32_t argmax(const float* logits, int32_t n_vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

namespace {

// Locally typical sampling over the first n of (idx, e) (sorted most likely first, e
// proportional to the probabilities, summing to `sum`): keeps the typical set in place,
// still most likely first, and returns its size.
size_t typical_set(std::vector<int32_t>& idx, std::vector<double>& e, size_t n, double sum, double typical_p) {
  double entropy = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double p = e[i] / sum;
    if (p > 0.0) entropy -= p * std::log(p);
  }
  std::vector<size_t> order;
  std::vector<double> shifted(n);
  for (size_t i = 0; i < n; ++i) {
    if (!(e[i] > 0.0)) continue;  // no mass: never typical
    shifted[i] = std::fabs(-std::log(e[i] / sum) - entropy);
    order.push_back(i);
  }
  // Ties keep the more likely token first (stable over the probability order).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shifted[a] < shifted[b]; });
  size_t last = order.size();
  double cum = 0.0;
  for (size_t k = 0; k < order.size(); ++k) {
    cum += e[order[k]] / sum;
    if (cum > typical_p) {  // llama.cpp: strictly above p, at least one token (min_keep 1)
      last = k + 1;
      break;
    }
  }
  std::vector<uint8_t> keep(n, 0);
  for (size_t k = 0; k < last; ++k) keep[order[k]] = 1;
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    idx[m] = idx[i];
    e[m] = e[i];
    ++m;
  }
  return m;
}

}  // namespace

Distribution warp(const float* logits, int32_t n_vocab, const SamplingParams& params) {
  TREESPEC_ASSERT(!params.greedy(), "warp needs temp > 0");
  const float inv_t = 1.0f / params.temp;
  // Most likely first, ties to the lower id (top_k.h).
  size_t keep = static_cast<size_t>(n_vocab);
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < keep) keep = static_cast<size_t>(params.top_k);
  std::vector<int32_t> idx(keep);
  top_k_ids(logits, n_vocab, static_cast<int32_t>(keep), idx.data());
  // Softmax over the kept tokens at temperature T (double accumulation).
  const float mx = logits[idx[0]];
  std::vector<double> e(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    e[i] = std::exp(static_cast<double>((logits[idx[i]] - mx) * inv_t));
    sum += e[i];
  }
  if (params.typical_p < 1.0f) {
    keep = typical_set(idx, e, keep, sum, params.typical_p);
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += e[i];
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  size_t n = keep;
  if (params.top_p < 1.0f) {
    double acc = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      acc += e[i] / sum;
      if (acc >= params.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens below min_p * p(top).
  if (params.min_p > 0.0f) {
    const double thr = params.min_p * e[0];
    size_t m = 1;
    while (m < n && e[m] >= thr) ++m;
    n = m;
  }
  Distribution d;
  d.ids.assign(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(n));
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += e[i];
  d.p.resize(n);
  for (size_t i = 0; i < n; ++i) d.p[i] = static_cast<float>(e[i] / s);
  return d;
}

TokenLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t token, int32_t n_top) {
  TREESPEC_ASSERT(token >= 0 && token < n_vocab, "token_logprob: token outside the vocabulary");
  float mx = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = static_cast<double>(mx) + std::log(sum);
  auto lp = [&](int32_t i) { return static_cast<float>(static_cast<double>(logits[i]) - lse); };
  TokenLogprob out;
  out.token = token;
  out.logprob = lp(token);
  const auto k = static_cast<size_t>(std::clamp(n_top, 0, n_vocab));
  if (k > 0) {
    std::vector<int32_t> idx(k);
    top_k_ids(logits, n_vocab, static_cast<int32_t>(k), idx.data());
    out.top.reserve(k);
    for (size_t i = 0; i < k; ++i) out.top.push_back({idx[i], lp(idx[i])});
  }
  return out;
}

uint64_t noise_key(uint64_t seed, int64_t pos) {
  using core::mix64;
  return mix64(mix64(seed ^ 0x5851f42d4c957f2dULL) + static_cast<uint64_t>(pos) * core::kSplitmixGamma);
}

double noise_uniform(uint64_t key, int32_t token) {
  const uint64_t h =
      core::mix64(key + (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1) * core::kSplitmixGamma);
  // 53 bits, centred in their interval: never 0 or 1.
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

int32_t coupled_choice(const Distribution& d, uint64_t key) {
  TREESPEC_ASSERT(!d.ids.empty(), "sample from an empty distribution");
  int32_t best = -1;
  double best_v = std::numeric_limits<double>::infinity();  // E_best / p_best
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double p = d.p[i];
    if (!(p > 0.0)) continue;
    const double u = noise_uniform(key, d.ids[i]);
    // E = -log u >= 1 - u: when 1 - u >= best_v * p this token cannot win (d is sorted by
    // p descending, so best_v * p shrinks and almost every tail token stops here).
    if (1.0 - u >= best_v * p) continue;
    const double v = -std::log(u) / p;
    if (v < best_v) {
      best_v = v;
      best = d.ids[i];
    }
  }
  return best >= 0 ? best : d.ids.front();
}

int32_t coupled_sample(const float* logits, int32_t n_vocab, const SamplingParams& params, int64_t pos) {
  if (params.greedy()) return argmax(logits, n_vocab);
  return coupled_choice(warp(logits, n_vocab, params), noise_key(params.seed, pos));
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  if (params_.greedy()) return argmax(logits, n_vocab);
  return warp(logits, n_vocab, params_).sample(rng_);
}

}  // namespace treespec::sampling
