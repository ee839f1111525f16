// Logits processing and sampling, seeded and reproducible.
//
// Order (as in HF transformers / vLLM / the OpenAI API): temperature, then top-k, then
// locally typical sampling (typical_p, llama.cpp's position: after top-k, before top-p),
// then top-p (nucleus), then min-p (relative to the most likely token), then
// renormalise. temp <= 0 means greedy (argmax; ties go to the lowest id). Logit bias
// (OpenAI's / llama.cpp's, added to the logits) and then repetition penalties
// (llama.cpp's: repeat, frequency, presence over the last repeat_last_n tokens) change
// the logits before all of that, greedy included (process_logits; the engine applies
// them to every tree row with that row's own history, so speculation stays lossless).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"

namespace treespec::sampling {

// One logit bias entry: `bias` is added to token's logit (-infinity bans it).
struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
};

struct SamplingParams {
  float temp = 0.8f;
  int32_t top_k = 40;   // 0 = off
  float top_p = 0.95f;  // 1 = off
  float min_p = 0.05f;  // 0 = off
  uint64_t seed = 0;
  float repeat_penalty = 1.0f;     // 1 = off; > 1 discourages tokens in the window
  int32_t repeat_last_n = 64;      // the window: last N tokens of the context (0 = off, -1 = all)
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
  float presence_penalty = 0.0f;   // subtracted once if the token occurs in the window
  float typical_p = 1.0f;          // locally typical sampling's mass (1 = off)
  // Added to the logits before the penalties, in order (a token may appear twice: the
  // biases add up). Token ids must be in the vocabulary (Engine::add checks).
  std::vector<LogitBias> logit_bias;

  bool greedy() const { return temp <= 0.0f; }
  bool penalized() const {
    return repeat_last_n != 0 && (repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f);
  }
  bool biased() const { return !logit_bias.empty(); }
  // Whether process_logits changes anything (bias or penalties).
  bool processes_logits() const { return biased() || penalized(); }
  // InvalidArgument naming the field if out of range (top_p in (0,1], min_p and
  // typical_p in [0,1], top_k >= 0, temp finite, a bias NaN or +infinity, a negative
  // token id).
  void validate() const;
};

// A warped target distribution: the surviving tokens, most likely first.
struct Distribution {
  std::vector<int32_t> ids;
  std::vector<float> p;  // sums to 1 (unless empty)

  float prob_of(int32_t id) const;
  // Zeroes id's probability and renormalises; returns false if nothing is left.
  bool remove(int32_t id);
  // Draws from p with one uniform number.
  int32_t sample(core::Rng& rng) const;
  int32_t top() const { return ids.empty() ? -1 : ids.front(); }
};

int32_t argmax(const float* logits, int32_t n_vocab);

// llama.cpp's penalties, in place: for every distinct token t among the last
// params.repeat_last_n entries of history (prefix + tail, concatenated; ids outside the
// vocabulary are ignored) with c occurrences there: logit /= repeat_penalty if it is
// positive, else *= repeat_penalty; then logit -= c * frequency_penalty +
// presence_penalty. No-op unless params.penalized().
void apply_penalties(float* logits, int32_t n_vocab, std::span<const int32_t> prefix, std::span<const int32_t> tail,
                     const SamplingParams& params);

// logit_bias, in place: logits[token] += bias for every entry (ids outside the
// vocabulary are ignored; Engine::add refuses them).
void apply_logit_bias(float* logits, int32_t n_vocab, const SamplingParams& params);

// What the engine does to every row's logits before verification: apply_logit_bias,
// then apply_penalties with the row's history (prefix + tail), llama.cpp's order.
void process_logits(float* logits, int32_t n_vocab, std::span<const int32_t> prefix, std::span<const int32_t> tail,
                    const SamplingParams& params);

// Applies temperature/top-k/typical-p/top-p/min-p to logits. Requires !params.greedy().
// Typical-p (Meister et al., llama.cpp's sampler): over the top-k survivors' softmax at
// temperature T with entropy H, tokens sorted by |-log p - H| ascending are kept until
// their mass exceeds typical_p (at least one); zero-probability tokens never are. The
// result is sorted most likely first whatever the filters.
Distribution warp(const float* logits, int32_t n_vocab, const SamplingParams& params);

// Coupled sampling (Gumbel-max coupling; docs/sampling.md). The token at absolute
// position `pos` of a sequence is drawn with noise that depends only on (seed, pos,
// token), so the draw is a deterministic function of the model's logits at that
// position: any verifier that reproduces those logits reproduces the token, whatever
// was drafted. The draw is an exact sample of the filtered distribution (the
// exponential race below is Gumbel-max on log p).
//
// noise_key: the per-position key. noise_uniform: u(key, token), uniform in (0, 1),
// a counter-based hash (splitmix64 of key + token), so one position's noise costs one
// hash per token it is asked for.
uint64_t noise_key(uint64_t seed, int64_t pos);
double noise_uniform(uint64_t key, int32_t token);

// argmin over d's tokens of E/p with E = -log u(key, token) ~ Exp(1) independently per
// token: P(token i) = p_i exactly. Only tokens that can still win need their logarithm
// (-log u >= 1 - u bounds the rest), so a whole-vocabulary d costs ~one hash per token.
int32_t coupled_choice(const Distribution& d, uint64_t key);

// warp + coupled_choice at position pos; the argmax for greedy params.
int32_t coupled_sample(const float* logits, int32_t n_vocab, const SamplingParams& params, int64_t pos);

// Log-probabilities for logprobs / n_probs: the log-softmax at temperature 1 of `logits`
// (the row after logit bias and penalties, before temperature and the filters).
struct TokenProb {
  int32_t token = -1;
  float logprob = 0.0f;  // -infinity for a banned token
};
struct TokenLogprob {
  int32_t token = -1;          // the emitted token
  float logprob = 0.0f;        // its log-probability
  std::vector<TokenProb> top;  // the n_top most likely tokens, most likely first (ties: lower id)
};
TokenLogprob token_logprob(const float* logits, int32_t n_vocab, int32_t token, int32_t n_top);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  int32_t sample(const float* logits, int32_t n_vocab);
  const SamplingParams& params() const { return params_; }
  core::Rng& rng() { return rng_; }

 private:
  SamplingParams params_;
  core::Rng rng_;
};

}  // namespace treespec::sampling
