// Statistical tests of the tree verifiers on a toy 8-token "model" whose logits are a
// fixed pseudo-random function of the context. A generation draws tokens step by step
// exactly as the engine does (draft a tree for the context, verify it, append path +
// bonus) until two tokens are out; the first token and the first two tokens must follow
// the warped target distribution exactly:
//   P(x) = p(x | ctx),   P(x, y) = p(x | ctx) p(y | ctx x)   (computed exactly).
// Pearson chi-square at significance alpha = 1e-3 with a fixed seed; cells of target
// probability 0 (outside top-k / top-p / min-p) must never be hit. Each test also checks
// its own power: the same number of samples drawn from a distribution with 2% of the
// probability mass moved between two outcomes is rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "chi_square.h"
#include "core/rng.h"
#include "sampling/sampling.h"
#include "tree/token_tree.h"
#include "verify/verify.h"

using namespace treespec;

namespace {

constexpr int32_t kV = 8;
using test::kAlpha;
constexpr int32_t kSamples = 100000;

uint64_t hash_ctx(const std::vector<int32_t>& ctx, uint64_t salt) {
  uint64_t h = 1469598103934665603ULL ^ salt;
  for (int32_t t : ctx) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ULL;
  return h;
}

// The toy model: target and draft logits per context, cached.
class ToyModel {
 public:
  const std::vector<float>& target(const std::vector<int32_t>& ctx) { return get(ctx, 0x7a11, 1.6, target_); }
  const std::vector<float>& draft(const std::vector<int32_t>& ctx) { return get(ctx, 0xd4af7, 1.2, draft_); }
  // The draft distribution q sampled children are drawn from.
  const sampling::Distribution& q(const std::vector<int32_t>& ctx);

 private:
  const std::vector<float>& get(const std::vector<int32_t>& ctx, uint64_t salt, double scale,
                                std::map<std::vector<int32_t>, std::vector<float>>& cache) {
    auto it = cache.find(ctx);
    if (it != cache.end()) return it->second;
    core::Rng rng(hash_ctx(ctx, salt));
    std::vector<float> l(kV);
    for (auto& x : l) x = static_cast<float>(scale * rng.normal());
    return cache.emplace(ctx, std::move(l)).first->second;
  }
  std::map<std::vector<int32_t>, std::vector<float>> target_, draft_;
  std::map<std::vector<int32_t>, sampling::Distribution> q_;
};

enum class DraftKind { point_mass, sampled_q };

// One step's tree for `ctx` (ctx.back() is the root): children per depth {3, 2, 1}.
// point_mass: children are the draft's top-ranked tokens (Medusa-like deterministic
// guesses, some outside the target's top-k); sampled_q: children are drawn i.i.d. from
// the draft distribution q of their parent (repeats allowed), which is handed to the
// verifier.
struct StepTree {
  tree::TokenTree tree;
  std::vector<std::vector<float>> logits;            // [n][V] target logits per node
  std::vector<const sampling::Distribution*> q_ptr;  // per node (sampled_q only)
};

sampling::SamplingParams q_params() {
  sampling::SamplingParams p;
  p.temp = 1.0f;
  p.top_k = 5;  // q has no mass on 3 tokens the target may like: exercises the residual
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

const sampling::Distribution& ToyModel::q(const std::vector<int32_t>& ctx) {
  auto it = q_.find(ctx);
  if (it != q_.end()) return it->second;
  return q_.emplace(ctx, sampling::warp(draft(ctx).data(), kV, q_params())).first->second;
}

StepTree make_tree(ToyModel& m, const std::vector<int32_t>& ctx, DraftKind kind, core::Rng& draft_rng) {
  StepTree s;
  s.tree = tree::TokenTree(ctx.back());
  std::vector<std::vector<int32_t>> node_ctx{ctx};
  const int32_t fanout[] = {3, 2, 1};
  std::vector<int32_t> frontier{0};
  for (int32_t d = 0; d < 3; ++d) {
    std::vector<int32_t> next;
    for (int32_t parent : frontier) {
      const auto pctx = node_ctx[static_cast<size_t>(parent)];
      std::vector<int32_t> toks;
      if (kind == DraftKind::point_mass) {
        const auto& dl = m.draft(pctx);
        std::vector<int32_t> order(kV);
        for (int32_t i = 0; i < kV; ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return dl[a] > dl[b]; });
        toks.assign(order.begin(), order.begin() + fanout[d]);
      } else {
        const auto& q = m.q(pctx);
        for (int32_t k = 0; k < fanout[d]; ++k) toks.push_back(q.sample(draft_rng));
      }
      for (int32_t tok : toks) {
        const int32_t c = s.tree.add(tok, parent);
        auto cctx = pctx;
        cctx.push_back(tok);
        node_ctx.push_back(std::move(cctx));
        next.push_back(c);
      }
    }
    frontier = std::move(next);
  }
  for (int32_t i = 0; i < s.tree.size(); ++i) {
    s.logits.push_back(m.target(node_ctx[static_cast<size_t>(i)]));
    if (kind == DraftKind::sampled_q) s.q_ptr.push_back(&m.q(node_ctx[static_cast<size_t>(i)]));
  }
  return s;
}

// Draws `n` generations of two tokens; returns counts of the first token [V] and of the
// first two tokens [V * V].
void simulate(ToyModel& m, const std::vector<int32_t>& ctx0, DraftKind kind, verify::Mode mode,
              const sampling::SamplingParams& sp, int32_t n, uint64_t seed, std::vector<int64_t>& first,
              std::vector<int64_t>& pairs, double* mean_accepted = nullptr) {
  first.assign(kV, 0);
  pairs.assign(kV * kV, 0);
  core::Rng rng(seed), draft_rng(seed ^ 0x5eed);
  int64_t steps = 0, accepted = 0;
  for (int32_t it = 0; it < n; ++it) {
    std::vector<int32_t> ctx = ctx0, out;
    // Coupled sampling is a deterministic function of the seed: each generation is a
    // request with its own seed.
    sampling::SamplingParams spi = sp;
    spi.seed = core::derive_seed(seed, static_cast<uint64_t>(it));
    while (out.size() < 2) {
      StepTree s = make_tree(m, ctx, kind, draft_rng);
      std::vector<const float*> lp;
      for (const auto& l : s.logits) lp.push_back(l.data());
      const auto res = verify::verify(mode, s.tree, lp, kV, spi, verify::TypicalParams{}, rng, s.q_ptr,
                                      static_cast<int64_t>(ctx.size()));
      for (size_t k = 1; k < res.path.size(); ++k) {
        out.push_back(s.tree.token(res.path[k]));
        ctx.push_back(out.back());
      }
      out.push_back(res.bonus);
      ctx.push_back(res.bonus);
      ++steps;
      accepted += res.n_accepted();
    }
    first[static_cast<size_t>(out[0])] += 1;
    pairs[static_cast<size_t>(out[0] * kV + out[1])] += 1;
  }
  if (mean_accepted) *mean_accepted = static_cast<double>(accepted + steps) / static_cast<double>(steps);
}

std::vector<double> dist_to_vec(const sampling::Distribution& d) {
  std::vector<double> v(kV, 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) v[static_cast<size_t>(d.ids[i])] = d.p[i];
  return v;
}

void expected(ToyModel& m, const std::vector<int32_t>& ctx0, const sampling::SamplingParams& sp,
              std::vector<double>& p1, std::vector<double>& p2) {
  p1 = dist_to_vec(sampling::warp(m.target(ctx0).data(), kV, sp));
  p2.assign(kV * kV, 0.0);
  for (int32_t x = 0; x < kV; ++x) {
    if (p1[static_cast<size_t>(x)] <= 0.0) continue;
    auto c = ctx0;
    c.push_back(x);
    const auto py = dist_to_vec(sampling::warp(m.target(c).data(), kV, sp));
    for (int32_t y = 0; y < kV; ++y)
      p2[static_cast<size_t>(x * kV + y)] = p1[static_cast<size_t>(x)] * py[static_cast<size_t>(y)];
  }
}

// Power check: n draws from `p` with 2% of the mass moved from its most likely outcome
// to its second must be rejected by the same test.
void expect_detects_two_percent_shift(const std::vector<double>& p, int32_t n, uint64_t seed) {
  std::vector<size_t> order(p.size());
  for (size_t i = 0; i < p.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<double> shifted = p;
  shifted[order[0]] -= 0.02;
  shifted[order[1]] += 0.02;
  sampling::Distribution d;
  for (size_t i = 0; i < p.size(); ++i) {
    if (shifted[i] > 0) {
      d.ids.push_back(static_cast<int32_t>(i));
      d.p.push_back(static_cast<float>(shifted[i]));
    }
  }
  core::Rng rng(seed);
  std::vector<int64_t> obs(p.size(), 0);
  for (int32_t i = 0; i < n; ++i) obs[static_cast<size_t>(d.sample(rng))] += 1;
  const auto r = test::chi_square(obs, p);
  EXPECT_LT(r.p_value, kAlpha) << "a 2% shift went undetected with " << n << " samples: the test lacks power";
}

struct Config {
  const char* name;
  float temp;
  int32_t top_k;
  float top_p;
  float min_p;
};

const Config kConfigs[] = {
    {"temp1", 1.0f, 0, 1.0f, 0.0f},
    {"temp0.7_topk5_topp0.9", 0.7f, 5, 0.9f, 0.0f},
    {"temp1.4_topp0.8_minp0.05", 1.4f, 0, 0.8f, 0.05f},
};

sampling::SamplingParams params_of(const Config& c) {
  sampling::SamplingParams sp;
  sp.temp = c.temp;
  sp.top_k = c.top_k;
  sp.top_p = c.top_p;
  sp.min_p = c.min_p;
  return sp;
}

void check_exact(DraftKind kind, verify::Mode mode, uint64_t seed) {
  ToyModel m;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name);
    const auto sp = params_of(c);
    const std::vector<int32_t> ctx0{3, 1, 4};
    std::vector<double> p1, p2;
    expected(m, ctx0, sp, p1, p2);
    std::vector<int64_t> first, pairs;
    double mal = 0.0;
    simulate(m, ctx0, kind, mode, sp, kSamples, seed, first, pairs, &mal);
    // The drafts must actually be accepted often, or the test says little.
    EXPECT_GT(mal, 1.15) << "drafts were hardly accepted";
    const auto r1 = test::chi_square(first, p1);
    const auto r2 = test::chi_square(pairs, p2);
    EXPECT_EQ(r1.impossible, 0) << "emitted a first token the warped target excludes";
    EXPECT_EQ(r2.impossible, 0) << "emitted a pair the warped target excludes";
    EXPECT_GT(r1.p_value, kAlpha) << "first token: chi2 " << r1.stat << " df " << r1.df;
    EXPECT_GT(r2.p_value, kAlpha) << "token pairs: chi2 " << r2.stat << " df " << r2.df;
    expect_detects_two_percent_shift(p1, kSamples, seed + 1);
    expect_detects_two_percent_shift(p2, kSamples, seed + 2);
  }
}

}  // namespace

TEST(ChiSquare, PValuesMatchKnownQuantiles) {
  // Table quantiles: df 1 at 3.841 -> 0.05; df 10 at 23.209 -> 0.01; df 60 at 99.607 ->
  // 0.001; df 100 at 124.342 -> 0.05.
  EXPECT_NEAR(test::gamma_q(0.5, 3.841 / 2), 0.05, 1e-4);
  EXPECT_NEAR(test::gamma_q(5.0, 23.209 / 2), 0.01, 1e-5);
  EXPECT_NEAR(test::gamma_q(30.0, 99.607 / 2), 0.001, 1e-5);
  EXPECT_NEAR(test::gamma_q(50.0, 124.342 / 2), 0.05, 1e-4);
  EXPECT_NEAR(test::gamma_q(3.0, 0.0), 1.0, 1e-12);
}

TEST(VerifyLossless, PointMassDraftsKeepTheTargetDistribution) {
  check_exact(DraftKind::point_mass, verify::Mode::lossless, 101);
}

TEST(VerifyLossless, SampledDraftsWithQKeepTheTargetDistribution) {
  check_exact(DraftKind::sampled_q, verify::Mode::lossless, 202);
}

// The coupled verifier: the same checks, one seed per generation (test_coupled.cpp has
// its identity with plain coupled sampling).
TEST(VerifyCoupled, PointMassDraftsKeepTheTargetDistribution) {
  check_exact(DraftKind::point_mass, verify::Mode::coupled, 404);
}

TEST(VerifyCoupled, SampledDraftsKeepTheTargetDistribution) {
  check_exact(DraftKind::sampled_q, verify::Mode::coupled, 505);
}

// Medusa's typical acceptance is labelled lossy: on the same toy model it must be
// detectably biased (it accepts any likely-enough child, so the first token is skewed
// towards drafted tokens).
TEST(VerifyTypical, IsDetectablyBiased) {
  ToyModel m;
  const auto sp = params_of(kConfigs[0]);
  const std::vector<int32_t> ctx0{3, 1, 4};
  std::vector<double> p1, p2;
  expected(m, ctx0, sp, p1, p2);
  std::vector<int64_t> first, pairs;
  simulate(m, ctx0, DraftKind::point_mass, verify::Mode::typical, sp, 20000, 303, first, pairs);
  const auto r1 = test::chi_square(first, p1);
  EXPECT_LT(r1.p_value, 1e-6) << "typical acceptance looked lossless (chi2 " << r1.stat << ")";
}

// temp 0 takes the greedy path in every mode: the argmax chain, deterministically.
TEST(VerifyGreedy, FollowsTheArgmaxChain) {
  ToyModel m;
  core::Rng rng(1);
  sampling::SamplingParams sp;
  sp.temp = 0.0f;
  for (int32_t root = 0; root < kV; ++root) {
    const std::vector<int32_t> ctx{5, root};
    StepTree s = make_tree(m, ctx, DraftKind::point_mass, rng);
    std::vector<const float*> lp;
    for (const auto& l : s.logits) lp.push_back(l.data());
    for (auto mode : {verify::Mode::greedy, verify::Mode::coupled, verify::Mode::lossless, verify::Mode::typical}) {
      const auto res = verify::verify(mode, s.tree, lp, kV, sp, verify::TypicalParams{}, rng);
      // Walk the argmax chain by hand.
      int32_t node = 0;
      std::vector<int32_t> path{0};
      for (;;) {
        const int32_t want = sampling::argmax(lp[static_cast<size_t>(node)], kV);
        const int32_t c = s.tree.find_child(node, want);
        if (c < 0) {
          EXPECT_EQ(res.bonus, want);
          break;
        }
        path.push_back(c);
        node = c;
      }
      EXPECT_EQ(res.path, path);
    }
  }
}

// Aux nodes and nodes without logits (pruned) are never accepted, even when they carry
// the argmax token.
TEST(VerifyGreedy, SkipsAuxAndPrunedNodes) {
  std::vector<float> root(kV, 0.0f), other(kV, 0.0f);
  root[4] = 5.0f;
  other[1] = 5.0f;
  tree::TokenTree t(7);
  const int32_t aux = t.add(4, 0, 1.0f, tree::NodeKind::aux);
  const int32_t pruned = t.add(4, 0);
  const int32_t good = t.add(4, 0);
  std::vector<const float*> lp{root.data(), other.data(), nullptr, other.data()};
  ASSERT_EQ(lp.size(), static_cast<size_t>(t.size()));
  (void)aux;
  (void)pruned;
  const auto res = verify::verify_greedy(t, lp, kV);
  EXPECT_EQ(res.path, (std::vector<int32_t>{0, good}));
  EXPECT_EQ(res.bonus, 1);
  core::Rng rng(3);
  sampling::SamplingParams sp;
  sp.temp = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  for (int i = 0; i < 200; ++i) {
    const auto r = verify::verify_lossless(t, lp, kV, sp, rng);
    if (r.path.size() > 1) {
      EXPECT_EQ(r.path[1], good);
    }
  }
}
