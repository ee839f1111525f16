// sampling::warp's locally typical set (typical_p) on hand-made distributions and
// against a direct transcription of the definition; logit bias and its place before the
// penalties; token_logprob (the log-softmax logprobs and n_probs report).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "sampling/sampling.h"
#include "treespec/status.h"

using namespace treespec;
using V = std::vector<int32_t>;

namespace {

sampling::SamplingParams unfiltered(float typical_p, float temp = 1.0f) {
  sampling::SamplingParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.typical_p = typical_p;
  return p;
}

std::vector<float> log_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

V sorted_ids(const sampling::Distribution& d) {
  V ids = d.ids;
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The definition, written out on its own: softmax at temperature T over the top-k,
// entropy H, tokens by |-log p - H| ascending until their mass exceeds typical_p.
V reference_typical(const std::vector<float>& logits, float temp, int32_t top_k, float typical_p) {
  V idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (top_k > 0) idx.resize(static_cast<size_t>(top_k));
  std::vector<double> p;
  double z = 0.0;
  for (int32_t i : idx) z += std::exp((logits[i] - logits[idx[0]]) / temp);
  for (int32_t i : idx) p.push_back(std::exp((logits[i] - logits[idx[0]]) / temp) / z);
  double h = 0.0;
  for (double x : p) h -= x * std::log(x);
  std::vector<size_t> order(idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::fabs(-std::log(p[a]) - h) < std::fabs(-std::log(p[b]) - h); });
  V out;
  double cum = 0.0;
  for (size_t k : order) {
    out.push_back(idx[k]);
    cum += p[k];
    if (cum > typical_p) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(TypicalP, KeepsTheLocallyTypicalSetOfAHandMadeDistribution) {
  // H = 1.5255 nats; |-log p - H| = 0.609, 0.139, 0.372, 0.777, 1.288, 1.693: the
  // typical order is 1, 2, 0, 3, 4, 5 (the most likely token is not the most typical).
  const std::vector<float> l = log_of({0.4, 0.25, 0.15, 0.1, 0.06, 0.04});
  struct Case {
    float typical_p;
    V want;
  };
  for (const Case& c : std::vector<Case>{{0.0f, {1}},
                                         {0.2f, {1}},
                                         {0.3f, {1, 2}},
                                         {0.5f, {0, 1, 2}},
                                         {0.7f, {0, 1, 2}},
                                         {0.92f, {0, 1, 2, 3, 4}},
                                         {1.0f, {0, 1, 2, 3, 4, 5}}}) {
    const sampling::Distribution d = sampling::warp(l.data(), 6, unfiltered(c.typical_p));
    EXPECT_EQ(sorted_ids(d), c.want) << "typical_p " << c.typical_p;
    // Renormalised over the set and still most likely first.
    EXPECT_NEAR(std::accumulate(d.p.begin(), d.p.end(), 0.0), 1.0, 1e-6);
    EXPECT_TRUE(std::is_sorted(d.p.begin(), d.p.end(), std::greater<>()));
  }
  const sampling::Distribution d = sampling::warp(l.data(), 6, unfiltered(0.3f));
  EXPECT_EQ(d.ids, (V{1, 2}));
  EXPECT_NEAR(d.p[0], 0.25 / 0.4, 1e-6);
  // top-p works on the typical set renormalised: {0, 1, 2} at 0.5, .4/.8 + .25/.8 >= .75
  // keeps {0, 1} (with the original masses .4 + .25 < .75 it would keep 2 as well).
  sampling::SamplingParams p = unfiltered(0.5f);
  p.top_p = 0.75f;
  EXPECT_EQ(sampling::warp(l.data(), 6, p).ids, (V{0, 1}));
  // Before top-k's cut it would see other tokens: top-k 2 leaves {0, 1}, p = .615, .385.
  p = unfiltered(0.3f);
  p.top_k = 2;
  EXPECT_EQ(sorted_ids(sampling::warp(l.data(), 6, p)), (V{0}));  // H = .666: |.486 - .666| < |.956 - .666|
}

TEST(TypicalP, MatchesTheDefinitionAtAnyTemperatureAndTopK) {
  std::mt19937 gen(7);
  std::normal_distribution<float> g(0.0f, 2.0f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> l(50);
    for (float& x : l) x = g(gen);
    const float temp = std::vector<float>{0.5f, 1.0f, 1.7f}[trial % 3];
    const int32_t top_k = std::vector<int32_t>{0, 10, 30}[trial % 5 % 3];
    const float tp = 0.05f + 0.9f * static_cast<float>(trial) / 200.0f;
    sampling::SamplingParams p = unfiltered(tp, temp);
    p.top_k = top_k;
    EXPECT_EQ(sorted_ids(sampling::warp(l.data(), 50, p)), reference_typical(l, temp, top_k, tp))
        << "trial " << trial << " temp " << temp << " top_k " << top_k << " typical_p " << tp;
  }
}

TEST(TypicalP, ZeroProbabilityTokensAreNeverTypical) {
  // A banned token (-inf) has no mass: never in the set, whatever typical_p.
  std::vector<float> l = log_of({0.5, 0.3, 0.2});
  l.push_back(-std::numeric_limits<float>::infinity());
  for (float tp : {0.5f, 0.99f}) {
    const sampling::Distribution d = sampling::warp(l.data(), 4, unfiltered(tp));
    EXPECT_EQ(std::count(d.ids.begin(), d.ids.end(), 3), 0) << tp;
    for (float x : d.p) EXPECT_TRUE(std::isfinite(x));
  }
}

TEST(LogitBias, AddsToTheLogitsBeforeThePenalties) {
  sampling::SamplingParams p;
  p.logit_bias = {{0, 2.0f}, {2, -std::numeric_limits<float>::infinity()}, {1, 0.5f}, {1, 0.25f}, {9, 5.0f}};
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = -1;
  std::vector<float> l = {2.0f, 1.0f, 3.0f, -1.0f};
  const V history = {0};
  sampling::process_logits(l.data(), 4, history, {}, p);
  EXPECT_FLOAT_EQ(l[0], (2.0f + 2.0f) / 2.0f);  // bias, then the penalty (the other order: 3)
  EXPECT_FLOAT_EQ(l[1], 1.75f);                 // two entries of one token add up
  EXPECT_EQ(l[2], -std::numeric_limits<float>::infinity());
  EXPECT_FLOAT_EQ(l[3], -1.0f);  // id 9 is outside the vocabulary of 4: ignored here
  EXPECT_EQ(sampling::argmax(l.data(), 4), 0);
  // A ban wins even greedy.
  std::vector<float> m = {5.0f, 1.0f};
  sampling::SamplingParams ban;
  ban.logit_bias = {{0, -std::numeric_limits<float>::infinity()}};
  sampling::apply_logit_bias(m.data(), 2, ban);
  EXPECT_EQ(sampling::argmax(m.data(), 2), 1);
  EXPECT_TRUE(ban.processes_logits());
  EXPECT_FALSE(sampling::SamplingParams{}.processes_logits());
}

TEST(SamplingParams, RefusesBadTypicalPAndBiases) {
  using Edit = void (*)(sampling::SamplingParams&);
  for (Edit bad :
       {Edit([](sampling::SamplingParams& q) { q.typical_p = 1.5f; }),
        Edit([](sampling::SamplingParams& q) { q.typical_p = -0.1f; }),
        Edit([](sampling::SamplingParams& q) { q.typical_p = std::nanf(""); }), Edit([](sampling::SamplingParams& q) {
          q.logit_bias = {{-1, 1.0f}};
        }),
        Edit([](sampling::SamplingParams& q) {
          q.logit_bias = {{3, std::nanf("")}};
        }),
        Edit([](sampling::SamplingParams& q) {
          q.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
        })}) {
    sampling::SamplingParams q;
    bad(q);
    EXPECT_THROW(q.validate(), InvalidArgument);
  }
  sampling::SamplingParams ok;
  ok.typical_p = 0.0f;
  ok.logit_bias = {{3, -std::numeric_limits<float>::infinity()}, {4, 100.0f}};
  EXPECT_NO_THROW(ok.validate());
}

TEST(TokenLogprob, IsTheLogSoftmaxAtTemperatureOneWithTheTopAlternatives) {
  const std::vector<float> l = {1.0f, 3.0f, 3.0f, -std::numeric_limits<float>::infinity(), 0.5f};
  double z = 0.0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  const sampling::TokenLogprob e = sampling::token_logprob(l.data(), 5, 4, 3);
  EXPECT_EQ(e.token, 4);
  EXPECT_NEAR(e.logprob, 0.5 - std::log(z), 1e-6);
  ASSERT_EQ(e.top.size(), 3u);
  EXPECT_EQ(e.top[0].token, 1);  // ties: the lower id first
  EXPECT_EQ(e.top[1].token, 2);
  EXPECT_EQ(e.top[2].token, 0);
  EXPECT_NEAR(e.top[0].logprob, 3.0 - std::log(z), 1e-6);
  EXPECT_EQ(e.top[0].logprob, e.top[1].logprob);
  const sampling::TokenLogprob banned = sampling::token_logprob(l.data(), 5, 3, 0);
  EXPECT_EQ(banned.logprob, -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(banned.top.empty());
  EXPECT_EQ(sampling::token_logprob(l.data(), 5, 0, 99).top.size(), 5u);  // at most the vocabulary
}
