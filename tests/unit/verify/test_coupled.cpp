// Coupled sampling (Gumbel-max coupling, docs/sampling.md) and the coupled verifier.
//
// - coupled_choice is exactly the exponential race argmin E/p over every token (its
//   shortcut that skips the logarithm of tokens that cannot win changes nothing);
// - its draws have the distribution's probabilities (chi-square over seeds, over
//   positions, pairs of positions independent), for a small distribution and a whole
//   4k vocabulary;
// - the coupled verifier emits exactly the tokens plain coupled sampling emits, one
//   token per step, whatever the tree proposes (right or wrong drafts, siblings, aux and
//   pruned nodes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "chi_square.h"
#include "core/rng.h"
#include "sampling/sampling.h"
#include "tree/token_tree.h"
#include "verify/verify.h"

using namespace treespec;

namespace {

using test::kAlpha;

sampling::Distribution random_distribution(core::Rng& rng, int32_t n, double spread) {
  std::vector<float> logits(static_cast<size_t>(n));
  for (auto& x : logits) x = static_cast<float>(spread * rng.normal());
  sampling::SamplingParams sp;
  sp.temp = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  return sampling::warp(logits.data(), n, sp);
}

int32_t brute_force_choice(const sampling::Distribution& d, uint64_t key) {
  int32_t best = -1;
  double best_v = 0.0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    if (!(d.p[i] > 0.0f)) continue;
    const double v = -std::log(sampling::noise_uniform(key, d.ids[i])) / d.p[i];
    if (best < 0 || v < best_v) {
      best_v = v;
      best = d.ids[i];
    }
  }
  return best;
}

std::vector<double> dense(const sampling::Distribution& d, int32_t n) {
  std::vector<double> p(static_cast<size_t>(n), 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) p[static_cast<size_t>(d.ids[i])] = d.p[i];
  return p;
}

}  // namespace

TEST(CoupledSampling, NoiseIsAFunctionOfSeedPositionAndToken) {
  const uint64_t k = sampling::noise_key(7, 12);
  EXPECT_EQ(k, sampling::noise_key(7, 12));
  EXPECT_NE(k, sampling::noise_key(8, 12));
  EXPECT_NE(k, sampling::noise_key(7, 13));
  double lo = 1.0, hi = 0.0, sum = 0.0;
  constexpr int32_t kN = 100000;
  for (int32_t t = 0; t < kN; ++t) {
    const double u = sampling::noise_uniform(k, t);
    EXPECT_EQ(u, sampling::noise_uniform(k, t));
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_GT(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
}

TEST(CoupledSampling, ChoiceIsTheExponentialRaceOverEveryToken) {
  core::Rng rng(5);
  for (int32_t n : {1, 2, 7, 64, 3000}) {
    for (double spread : {0.3, 2.0, 6.0}) {
      const auto d = random_distribution(rng, n, spread);
      for (uint64_t s = 0; s < 300; ++s) {
        const uint64_t key = sampling::noise_key(s, static_cast<int64_t>(n));
        ASSERT_EQ(sampling::coupled_choice(d, key), brute_force_choice(d, key)) << "n " << n << " spread " << spread;
      }
    }
  }
}

// Over seeds at one position, over positions with one seed, and pairs of adjacent
// positions (independent noise: the joint distribution is the product).
TEST(CoupledSampling, DrawsHaveTheDistributionsProbabilities) {
  core::Rng rng(9);
  constexpr int32_t kV = 10;
  const auto d = random_distribution(rng, kV, 1.2);
  const auto p = dense(d, kV);
  constexpr int32_t kN = 200000;
  std::vector<int64_t> by_seed(kV, 0), by_pos(kV, 0), pairs(kV * kV, 0);
  for (int32_t i = 0; i < kN; ++i) {
    by_seed[static_cast<size_t>(sampling::coupled_choice(d, sampling::noise_key(static_cast<uint64_t>(i), 40)))] += 1;
    const int32_t a = sampling::coupled_choice(d, sampling::noise_key(3, 2 * i));
    const int32_t b = sampling::coupled_choice(d, sampling::noise_key(3, 2 * i + 1));
    by_pos[static_cast<size_t>(a)] += 1;
    pairs[static_cast<size_t>(a * kV + b)] += 1;
  }
  std::vector<double> p2(kV * kV);
  for (int32_t a = 0; a < kV; ++a) {
    for (int32_t b = 0; b < kV; ++b)
      p2[static_cast<size_t>(a * kV + b)] = p[static_cast<size_t>(a)] * p[static_cast<size_t>(b)];
  }
  const auto r1 = test::chi_square(by_seed, p);
  const auto r2 = test::chi_square(by_pos, p);
  const auto r3 = test::chi_square(pairs, p2);
  EXPECT_GT(r1.p_value, kAlpha) << "over seeds: chi2 " << r1.stat << " df " << r1.df;
  EXPECT_GT(r2.p_value, kAlpha) << "over positions: chi2 " << r2.stat << " df " << r2.df;
  EXPECT_GT(r3.p_value, kAlpha) << "pairs of positions: chi2 " << r3.stat << " df " << r3.df;
  // Power: the same counts against the distribution with 2% of the mass moved between
  // the two most likely tokens are rejected.
  std::vector<double> shifted = p;
  shifted[static_cast<size_t>(d.ids[0])] -= 0.02;
  shifted[static_cast<size_t>(d.ids[1])] += 0.02;
  EXPECT_LT(test::chi_square(by_seed, shifted).p_value, kAlpha) << "the test lacks power";
}

// A whole vocabulary without filters (every token needs noise; the shortcut skips most
// logarithms) and the same logits with top-k / top-p / min-p (noise only for survivors).
TEST(CoupledSampling, WholeVocabularyAndFilteredDraws) {
  core::Rng rng(13);
  constexpr int32_t kV = 4096;
  std::vector<float> logits(kV);
  for (auto& x : logits) x = static_cast<float>(2.5 * rng.normal());
  struct Params {
    const char* name;
    float temp;
    int32_t top_k;
    float top_p, min_p;
  };
  const Params cases[] = {{"temp 1, no filters", 1.0f, 0, 1.0f, 0.0f},
                          {"temp 0.7, top-k 40, top-p 0.95, min-p 0.05", 0.7f, 40, 0.95f, 0.05f},
                          {"temp 1.3, top-p 0.5", 1.3f, 0, 0.5f, 0.0f}};
  for (const Params& c : cases) {
    SCOPED_TRACE(c.name);
    sampling::SamplingParams sp;
    sp.temp = c.temp;
    sp.top_k = c.top_k;
    sp.top_p = c.top_p;
    sp.min_p = c.min_p;
    const auto d = sampling::warp(logits.data(), kV, sp);
    const auto p = dense(d, kV);
    constexpr int32_t kN = 40000;
    std::vector<int64_t> obs(kV, 0);
    for (int32_t i = 0; i < kN; ++i) {
      sp.seed = static_cast<uint64_t>(i) * 7919u + 1u;
      const int32_t t = i < 50 ? sampling::coupled_sample(logits.data(), kV, sp, 100)  // the whole path, a few times
                               : sampling::coupled_choice(d, sampling::noise_key(sp.seed, 100));
      obs[static_cast<size_t>(t)] += 1;
    }
    const auto r = test::chi_square(obs, p);
    EXPECT_EQ(r.impossible, 0) << "a token the filters exclude was drawn";
    EXPECT_GT(r.p_value, kAlpha) << "chi2 " << r.stat << " df " << r.df;
  }
}

TEST(CoupledSampling, GreedyParamsGiveTheArgmax) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  sampling::SamplingParams sp;
  sp.temp = 0.0f;
  for (int64_t pos = 0; pos < 20; ++pos) EXPECT_EQ(sampling::coupled_sample(logits.data(), 4, sp, pos), 1);
}

namespace {

// A toy model: logits are a fixed pseudo-random function of the context.
constexpr int32_t kToyV = 12;

class Toy {
 public:
  const std::vector<float>& logits(const std::vector<int32_t>& ctx) {
    auto it = cache_.find(ctx);
    if (it != cache_.end()) return it->second;
    uint64_t h = 1469598103934665603ULL;
    for (int32_t t : ctx) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ULL;
    core::Rng rng(h);
    std::vector<float> l(kToyV);
    for (auto& x : l) x = static_cast<float>(1.8 * rng.normal());
    return cache_.emplace(ctx, std::move(l)).first->second;
  }

 private:
  std::map<std::vector<int32_t>, std::vector<float>> cache_;
};

// A random tree for ctx: with probability 1/2 the "oracle" chain (plain sampling's own
// continuation) is in it, among random siblings; some nodes are aux, some pruned.
struct ToyTree {
  tree::TokenTree tree;
  std::vector<std::vector<float>> logits;
  std::vector<const float*> ptr;
};

ToyTree random_tree(Toy& m, const std::vector<int32_t>& ctx, const std::vector<int32_t>& oracle, core::Rng& rng) {
  ToyTree t;
  t.tree = tree::TokenTree(ctx.back());
  std::vector<std::vector<int32_t>> node_ctx{ctx};
  std::vector<bool> pruned{false};
  const int32_t n_nodes = 1 + static_cast<int32_t>(rng.uniform_int(12));
  // The oracle chain first (when chosen), then random nodes under random parents.
  int32_t parent = 0;
  if (rng.uniform() < 0.5) {
    for (size_t k = 0; k < oracle.size() && t.tree.size() < n_nodes; ++k) {
      parent = t.tree.add(oracle[k], parent);
      auto c = node_ctx[static_cast<size_t>(t.tree.parent(parent))];
      c.push_back(oracle[k]);
      node_ctx.push_back(std::move(c));
      pruned.push_back(rng.uniform() < 0.1);
    }
  }
  while (t.tree.size() < n_nodes) {
    const auto par = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(t.tree.size())));
    const auto tok = static_cast<int32_t>(rng.uniform_int(kToyV));
    if (t.tree.find_child(par, tok) >= 0 || !t.tree.is_candidate(par)) continue;  // aux nodes are leaves
    const bool aux = rng.uniform() < 0.1;
    t.tree.add(tok, par, 1.0f, aux ? tree::NodeKind::aux : tree::NodeKind::candidate);
    auto c = node_ctx[static_cast<size_t>(par)];
    c.push_back(tok);
    node_ctx.push_back(std::move(c));
    pruned.push_back(rng.uniform() < 0.1);
  }
  for (int32_t i = 0; i < t.tree.size(); ++i) t.logits.push_back(m.logits(node_ctx[static_cast<size_t>(i)]));
  for (int32_t i = 0; i < t.tree.size(); ++i) {
    t.ptr.push_back(i > 0 && pruned[static_cast<size_t>(i)] ? nullptr : t.logits[static_cast<size_t>(i)].data());
  }
  return t;
}

}  // namespace

TEST(VerifyCoupled, EmitsExactlyWhatPlainCoupledSamplingEmitsWhateverTheTree) {
  Toy m;
  core::Rng rng(21);
  constexpr int32_t kLen = 16;
  int64_t steps = 0, emitted = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    sampling::SamplingParams sp;
    sp.temp = seed % 3 == 0 ? 1.0f : 0.7f;
    sp.top_k = seed % 2 == 0 ? 0 : 6;
    sp.top_p = seed % 5 == 0 ? 0.9f : 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    // Plain: one coupled sample per position.
    std::vector<int32_t> plain{3, 1};
    while (plain.size() < 2 + kLen) {
      plain.push_back(sampling::coupled_sample(m.logits(plain).data(), kToyV, sp, static_cast<int64_t>(plain.size())));
    }
    // Speculative: trees verified by the coupled walk.
    std::vector<int32_t> ctx{3, 1};
    while (ctx.size() < 2 + kLen) {
      const std::vector<int32_t> oracle(plain.begin() + static_cast<ptrdiff_t>(ctx.size()), plain.end());
      ToyTree t = random_tree(m, ctx, oracle, rng);
      core::Rng unused(0);
      const auto res = verify::verify(verify::Mode::coupled, t.tree, t.ptr, kToyV, sp, verify::TypicalParams{}, unused,
                                      {}, static_cast<int64_t>(ctx.size()));
      for (size_t k = 1; k < res.path.size(); ++k) {
        ASSERT_TRUE(t.tree.is_candidate(res.path[k])) << "accepted an aux node";
        ASSERT_NE(t.ptr[static_cast<size_t>(res.path[k])], nullptr) << "accepted a pruned node";
        ctx.push_back(t.tree.token(res.path[k]));
      }
      ctx.push_back(res.bonus);
      ++steps;
    }
    emitted += static_cast<int64_t>(ctx.size()) - 2;
    ctx.resize(plain.size());
    ASSERT_EQ(ctx, plain) << "seed " << seed;
  }
  // The trees really carried accepted drafts (else the identity says little).
  EXPECT_GT(static_cast<double>(emitted) / static_cast<double>(steps), 1.5);
}

// warp's order (the coupled race relies on it being most likely first): logit
// descending, ties to the lower id, with top-k cut and without.
TEST(CoupledSampling, WarpOrdersByLogitWithTiesToTheLowerId) {
  core::Rng rng(17);
  std::vector<float> logits(500);
  for (auto& x : logits) x = static_cast<float>(std::round(4.0 * rng.normal()) / 2.0);  // many ties
  for (int32_t top_k : {0, 7, 499, 600}) {
    sampling::SamplingParams sp;
    sp.temp = 1.0f;
    sp.top_k = top_k;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    const auto d = sampling::warp(logits.data(), 500, sp);
    std::vector<int32_t> want(500);
    for (int32_t i = 0; i < 500; ++i) want[static_cast<size_t>(i)] = i;
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    want.resize(top_k > 0 && top_k < 500 ? static_cast<size_t>(top_k) : 500u);
    EXPECT_EQ(d.ids, want) << "top_k " << top_k;
  }
}
