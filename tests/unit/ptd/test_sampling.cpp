// Lossless sampling through the PTD path: PTD-shaped step trees (aux draft rows chained
// along the spine, point-mass trie candidates, including trie tokens that repeat draft
// tokens) verified by the engine's lossless verifier emit first tokens and token pairs with
// exactly the target distribution (chi-square at significance 0.001, fixed seeds). The
// reference code's walk (verify::Mode::ptd_reference: newest first, argmax fallback) is
// shown to be biased on the same trees.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "drafters/ptd/draft_tree.h"
#include "drafters/ptd/pool.h"
#include "drafters/ptd/step_layout.h"
#include "sampling/sampling.h"
#include "verify/verify.h"

using namespace treespec;
using drafters::ptd::DraftTree;
using drafters::ptd::Trie;

namespace {

constexpr int32_t kVocab = 6;
constexpr int32_t kAnchor = 5;

// Regularized upper incomplete gamma Q(a, x) (series / continued fraction).
double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1.0) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  double b = x + 1.0 - a, c = 1e300, d = 1.0 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

// p-value of Pearson's chi-square test of counts against expected probabilities.
double chi_square_p(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double chi = 0.0;
  int dof = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    if (e <= 0.0) {
      if (counts[i] > 0) return 0.0;  // impossible outcome observed
      continue;
    }
    chi += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++dof;
  }
  return gamma_q(dof / 2.0, chi / 2.0);
}

// Toy model: logits for the next token after the anchor, and after anchor + t1 for each t1.
struct Toy {
  std::vector<float> root;                // [kVocab]
  std::vector<std::vector<float>> after;  // [kVocab][kVocab]
  std::vector<float> junk;                // rows whose output must not matter (aux, deeper)
};

Toy make_toy(uint64_t seed) {
  core::Rng rng(seed);
  Toy t;
  auto row = [&] {
    std::vector<float> r(kVocab);
    for (float& v : r) v = static_cast<float>(1.5 * rng.normal());
    return r;
  };
  t.root = row();
  for (int32_t i = 0; i < kVocab; ++i) t.after.push_back(row());
  t.junk = row();
  return t;
}

// A PTD step tree: spine [1, 2] with side branches (aux), trie for the anchor with first
// level 1, 3, 0 (1 repeats the spine token: only the candidate may be accepted) and
// second level under each.
drafters::ptd::StepLayout ptd_tree() {
  DraftTree d;
  const int32_t s0 = d.add(1, -1);
  d.add(4, d.add(3, s0));
  const int32_t s1 = d.add(2, -1);
  d.add(0, s1);
  d.add(1, s1);
  Trie t(kAnchor);
  const int32_t a = t.child(0, 1);
  t.child(a, 2);
  t.child(a, 4);
  const int32_t b = t.child(0, 3);
  t.child(b, 3);
  const int32_t c = t.child(0, 0);
  t.child(c, 5);
  return drafters::ptd::build_step(kAnchor, d, &t, t.breadth_first(100));
}

struct Freq {
  std::vector<int64_t> first;  // [kVocab]
  std::vector<int64_t> pair;   // [kVocab * kVocab]
};

Freq run(verify::Mode mode, const sampling::SamplingParams& sp, int64_t n, uint64_t seed) {
  const Toy toy = make_toy(11);
  const auto lay = ptd_tree();
  const tree::TokenTree& tree = lay.tree;
  // Logits per row: the root's, a trie node at depth 1 with token t1 gets "after t1", aux
  // rows and deeper trie rows get junk (their output never decides the first two tokens).
  std::vector<const float*> logits(static_cast<size_t>(tree.size()));
  for (int32_t i = 0; i < tree.size(); ++i) {
    if (i == 0) {
      logits[0] = toy.root.data();
    } else if (tree.is_candidate(i) && tree.depth(i) == 1) {
      logits[static_cast<size_t>(i)] = toy.after[static_cast<size_t>(tree.token(i))].data();
    } else {
      logits[static_cast<size_t>(i)] = toy.junk.data();
    }
  }
  core::Rng rng(seed);
  Freq f{std::vector<int64_t>(kVocab, 0), std::vector<int64_t>(kVocab * kVocab, 0)};
  const verify::TypicalParams typical;
  for (int64_t k = 0; k < n; ++k) {
    const auto res = verify::verify(mode, tree, logits, kVocab, sp, typical, rng);
    std::vector<int32_t> out;
    for (size_t j = 1; j < res.path.size(); ++j) {
      EXPECT_TRUE(tree.is_candidate(res.path[j]));
      out.push_back(tree.token(res.path[j]));
    }
    out.push_back(res.bonus);
    const int32_t t1 = out[0];
    // The second token: from this step, or (when t1 was the bonus) from the next step,
    // which samples from the target after t1 like plain decoding.
    const int32_t t2 =
        out.size() > 1 ? out[1] : sampling::warp(toy.after[static_cast<size_t>(t1)].data(), kVocab, sp).sample(rng);
    f.first[static_cast<size_t>(t1)] += 1;
    f.pair[static_cast<size_t>(t1 * kVocab + t2)] += 1;
  }
  return f;
}

std::vector<double> dense(const sampling::Distribution& d) {
  std::vector<double> p(kVocab, 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) p[static_cast<size_t>(d.ids[i])] = d.p[i];
  return p;
}

struct Target {
  std::vector<double> first, pair;
};

Target target(const sampling::SamplingParams& sp) {
  const Toy toy = make_toy(11);
  Target t;
  t.first = dense(sampling::warp(toy.root.data(), kVocab, sp));
  t.pair.assign(kVocab * kVocab, 0.0);
  for (int32_t a = 0; a < kVocab; ++a) {
    const auto pa = dense(sampling::warp(toy.after[static_cast<size_t>(a)].data(), kVocab, sp));
    for (int32_t b = 0; b < kVocab; ++b)
      t.pair[static_cast<size_t>(a * kVocab + b)] = t.first[static_cast<size_t>(a)] * pa[static_cast<size_t>(b)];
  }
  return t;
}

sampling::SamplingParams plain(float temp) {
  sampling::SamplingParams sp;
  sp.temp = temp;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  return sp;
}

constexpr double kAlpha = 0.001;  // significance level of every test below
constexpr int64_t kN = 200000;

}  // namespace

TEST(PtdSampling, TreeShapeIsPtdLike) {
  const auto lay = ptd_tree();
  EXPECT_EQ(lay.n_draft, 6);
  EXPECT_EQ(lay.n_trie, 7);
  // The spine token 1 appears both as an aux row and as a candidate under the root.
  int32_t aux1 = 0, cand1 = 0;
  for (int32_t c : lay.tree.children(0)) {
    if (lay.tree.token(c) == 1) (lay.tree.is_candidate(c) ? cand1 : aux1) += 1;
  }
  EXPECT_EQ(aux1, 1);
  EXPECT_EQ(cand1, 1);
}

TEST(PtdSampling, LosslessMatchesTargetThroughPtdTrees) {
  for (float temp : {1.0f, 0.6f}) {
    const auto sp = plain(temp);
    const Freq f = run(verify::Mode::lossless, sp, kN, 1234);
    const Target t = target(sp);
    const double p1 = chi_square_p(f.first, t.first, kN);
    const double p2 = chi_square_p(f.pair, t.pair, kN);
    EXPECT_GT(p1, kAlpha) << "first-token frequencies differ from the target at temp " << temp;
    EXPECT_GT(p2, kAlpha) << "two-token frequencies differ from the target at temp " << temp;
  }
}

TEST(PtdSampling, LosslessMatchesWarpedTarget) {
  sampling::SamplingParams sp = plain(0.8f);
  sp.top_k = 4;
  sp.top_p = 0.9f;
  const Freq f = run(verify::Mode::lossless, sp, kN, 99);
  const Target t = target(sp);
  EXPECT_GT(chi_square_p(f.first, t.first, kN), kAlpha);
  EXPECT_GT(chi_square_p(f.pair, t.pair, kN), kAlpha);
}

TEST(PtdSampling, ReferenceWalkIsBiased) {
  // The reference's argmax fallback makes the emitted distribution wrong: the test must
  // reject it decisively on the same trees (this is what the lossless fix repairs).
  const auto sp = plain(1.0f);
  const Freq f = run(verify::Mode::ptd_reference, sp, kN, 1234);
  const Target t = target(sp);
  EXPECT_LT(chi_square_p(f.pair, t.pair, kN), 1e-12);
}

TEST(PtdSampling, ChiSquareHelperSanity) {
  // Q(k/2, x/2) against known chi-square quantiles: P(X > 11.07 | 5 dof) = 0.05,
  // P(X > 2.706 | 1 dof) = 0.10, P(X > 57.342 | 35 dof) = 0.01, P(X > 49.802 | 35 dof) = 0.05.
  EXPECT_NEAR(gamma_q(2.5, 11.07 / 2), 0.05, 1e-3);
  EXPECT_NEAR(gamma_q(0.5, 2.706 / 2), 0.10, 1e-3);
  EXPECT_NEAR(gamma_q(17.5, 57.342 / 2), 0.01, 2e-4);
  EXPECT_NEAR(gamma_q(17.5, 49.802 / 2), 0.05, 5e-4);
  // A fair die rolled exactly evenly passes; a loaded one fails.
  EXPECT_GT(chi_square_p({100, 100, 100, 100}, {0.25, 0.25, 0.25, 0.25}, 400), 0.99);
  EXPECT_LT(chi_square_p({160, 80, 80, 80}, {0.25, 0.25, 0.25, 0.25}, 400), 1e-6);
}
