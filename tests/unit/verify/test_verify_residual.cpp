// verify_lossless builds the residual norm(max(p - q, 0)) in O(|p|) per rejection
// (q looked up in a dense table). Its choices must be exactly those of the previous
// implementation, which searched q for every token of p (O(|p| |q|), quadratic in the
// vocabulary with top-k/top-p/min-p off); that implementation is kept here as the
// oracle. Plus the pruning rule: a pruned child drawn from q is still tested.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "sampling/sampling.h"
#include "tree/token_tree.h"
#include "verify/verify.h"

using namespace treespec;

namespace {

// The verifier as it was before the dense q table (no pruned nodes in its inputs).
verify::VerifyResult reference_lossless(const tree::TokenTree& tree, std::span<const float* const> node_logits,
                                        int32_t n_vocab, const sampling::SamplingParams& params, core::Rng& rng,
                                        std::span<const sampling::Distribution* const> q_of_children) {
  verify::VerifyResult res;
  int32_t node = 0;
  res.path.push_back(0);
  for (;;) {
    sampling::Distribution p = sampling::warp(node_logits[static_cast<size_t>(node)], n_vocab, params);
    const sampling::Distribution* q =
        static_cast<size_t>(node) < q_of_children.size() ? q_of_children[static_cast<size_t>(node)] : nullptr;
    int32_t accepted = -1;
    for (int32_t c : tree.children(node)) {
      const int32_t tok = tree.token(c);
      const float pc = p.prob_of(tok);
      if (q == nullptr) {
        if (pc > 0.0f && rng.uniform() < pc) {
          accepted = c;
          break;
        }
        if (!p.remove(tok)) break;
      } else {
        const float qc = q->prob_of(tok);
        const double ratio = qc > 0.0f ? static_cast<double>(pc) / qc : (pc > 0.0f ? 1.0 : 0.0);
        if (rng.uniform() < std::min(1.0, ratio)) {
          accepted = c;
          break;
        }
        sampling::Distribution r;
        double sum = 0.0;
        for (size_t i = 0; i < p.ids.size(); ++i) {
          const float v = std::max(0.0f, p.p[i] - q->prob_of(p.ids[i]));
          if (v > 0.0f) {
            r.ids.push_back(p.ids[i]);
            r.p.push_back(v);
            sum += v;
          }
        }
        if (sum <= 0.0) {
          p.remove(tok);
          if (p.ids.empty()) break;
          continue;
        }
        for (float& v : r.p) v = static_cast<float>(v / sum);
        p = std::move(r);
      }
    }
    if (accepted < 0) {
      if (p.ids.empty()) p = sampling::warp(node_logits[static_cast<size_t>(node)], n_vocab, params);
      res.bonus = p.sample(rng);
      return res;
    }
    res.path.push_back(accepted);
    node = accepted;
  }
}

std::vector<float> random_logits(core::Rng& rng, int32_t V, double scale) {
  std::vector<float> l(static_cast<size_t>(V));
  for (auto& x : l) x = static_cast<float>(rng.normal() * scale);
  return l;
}

struct Case {
  tree::TokenTree tree;
  std::vector<std::vector<float>> logits;  // per node
  std::vector<sampling::Distribution> q;   // per node (children drawn from it), or empty
  std::vector<const float*> logit_ptr;
  std::vector<const sampling::Distribution*> q_ptr;
};

// Every node's children are either i.i.d. draws from a draft distribution q (sampled)
// or distinct point masses; random depths, 2..4 children.
Case random_case(core::Rng& rng, int32_t V, const sampling::SamplingParams& sp) {
  Case c;
  c.tree = tree::TokenTree(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V))));
  std::vector<bool> sampled;
  for (int32_t node = 0; node < c.tree.size() && c.tree.size() < 24; ++node) {
    const bool s = rng.uniform() < 0.6;
    sampled.push_back(s);
    const auto ql = random_logits(rng, V, 2.0);
    c.q.push_back(sampling::warp(ql.data(), V, sp));
    if (c.tree.depth(node) >= 4) continue;
    const int32_t n_kids = 2 + static_cast<int32_t>(rng.uniform_int(3));
    for (int32_t k = 0; k < n_kids; ++k) {
      const int32_t tok = s ? c.q.back().sample(rng) : static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
      if (!s && c.tree.find_child(node, tok) >= 0) continue;
      c.tree.add(tok, node);
    }
  }
  c.q.resize(static_cast<size_t>(c.tree.size()));
  sampled.resize(static_cast<size_t>(c.tree.size()), false);
  for (int32_t i = 0; i < c.tree.size(); ++i) c.logits.push_back(random_logits(rng, V, 2.0));
  for (int32_t i = 0; i < c.tree.size(); ++i) {
    c.logit_ptr.push_back(c.logits[static_cast<size_t>(i)].data());
    c.q_ptr.push_back(sampled[static_cast<size_t>(i)] ? &c.q[static_cast<size_t>(i)] : nullptr);
  }
  return c;
}

}  // namespace

TEST(VerifyResidual, DenseQMatchesTheQuadraticImplementationExactly) {
  core::Rng rng(4242);
  int64_t cases = 0, rejections_seen = 0;
  for (const int32_t V : {12, 300, 4000}) {
    for (const bool filters : {false, true}) {
      sampling::SamplingParams sp;
      sp.temp = 1.0f;
      sp.top_k = filters ? 50 : 0;
      sp.top_p = filters ? 0.9f : 1.0f;
      sp.min_p = filters ? 0.01f : 0.0f;
      for (int rep = 0; rep < (V > 1000 ? 20 : 200); ++rep) {
        const Case c = random_case(rng, V, sp);
        const uint64_t seed = rng.next_u64();
        core::Rng r1(seed), r2(seed);
        const auto a = verify::verify_lossless(c.tree, c.logit_ptr, V, sp, r1, c.q_ptr);
        const auto b = reference_lossless(c.tree, c.logit_ptr, V, sp, r2, c.q_ptr);
        ASSERT_EQ(a.path, b.path) << "V " << V << " rep " << rep;
        ASSERT_EQ(a.bonus, b.bonus) << "V " << V << " rep " << rep;
        ASSERT_EQ(r1.next_u64(), r2.next_u64()) << "both drew the same random numbers";
        ++cases;
        if (static_cast<int32_t>(a.path.size()) <= c.tree.max_depth()) ++rejections_seen;
      }
    }
  }
  EXPECT_GT(rejections_seen, cases / 4) << "the cases must exercise rejections and residuals";
}

TEST(VerifyResidual, PrunedSampledChildIsStillTestedAndEndsTheWalk) {
  // q = p at the root: a child drawn from q is accepted with probability 1 whether or not
  // it was pruned. A pruned one cannot extend the path; its token becomes the bonus.
  const int32_t V = 10;
  core::Rng rng(7);
  const auto lr = random_logits(rng, V, 1.5);
  sampling::SamplingParams sp;
  sp.temp = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  const sampling::Distribution q = sampling::warp(lr.data(), V, sp);
  for (int rep = 0; rep < 50; ++rep) {
    tree::TokenTree t(1);
    const int32_t tok = q.sample(rng);
    t.add(tok, 0);
    const auto lc = random_logits(rng, V, 1.5);
    const float* logits[2] = {lr.data(), nullptr};  // the child was pruned
    const sampling::Distribution* qs[2] = {&q, nullptr};
    core::Rng vr(static_cast<uint64_t>(rep));
    const auto res = verify::verify_lossless(t, logits, V, sp, vr, qs);
    EXPECT_EQ(res.path, std::vector<int32_t>{0});
    EXPECT_EQ(res.bonus, tok) << "the pruned child passes the test (p/q = 1) and is emitted";
    // Unpruned, the same child is accepted as a path node.
    const float* live[2] = {lr.data(), lc.data()};
    core::Rng vr2(static_cast<uint64_t>(rep));
    const auto res2 = verify::verify_lossless(t, live, V, sp, vr2, qs);
    EXPECT_EQ(res2.path, (std::vector<int32_t>{0, 1}));
  }
}
