#include "verify/verify.h"

#include <algorithm>
#include <cmath>

#include "core/assert.h"

namespace treespec::verify {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::greedy: return "greedy";
    case Mode::coupled: return "coupled";
    case Mode::lossless: return "lossless";
    case Mode::typical: return "typical (lossy)";
    case Mode::ptd_reference: return "ptd-reference (lossy)";
  }
  return "?";
}

namespace {
// A node can be accepted only if it is a candidate and survived to the last layer.
bool has_logits(std::span<const float* const> node_logits, int32_t i) {
  return static_cast<size_t>(i) < node_logits.size() && node_logits[static_cast<size_t>(i)] != nullptr;
}
bool acceptable(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t i) {
  return tree.is_candidate(i) && has_logits(node_logits, i);
}
}  // namespace

namespace {
// The deterministic walk shared by greedy and coupled verification: choose(node) is the
// token that follows node (its argmax, or its coupled sample); the walk follows the
// candidate child with that token while it has logits, and that token is the bonus
// where it stops (also when the matching child was pruned).
template <class Choose>
VerifyResult walk_deterministic(const tree::TokenTree& tree, std::span<const float* const> node_logits, Choose choose) {
  TREESPEC_ASSERT(has_logits(node_logits, 0), "verify: the root must have logits");
  VerifyResult res;
  int32_t node = 0;
  res.path.push_back(0);
  for (;;) {
    const int32_t pred = choose(node);
    int32_t next = -1;
    for (int32_t c : tree.children(node)) {
      if (tree.token(c) == pred && acceptable(tree, node_logits, c)) {
        next = c;
        break;
      }
    }
    if (next < 0) {
      res.bonus = pred;
      return res;
    }
    res.path.push_back(next);
    node = next;
  }
}
}  // namespace

VerifyResult verify_greedy(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab) {
  return walk_deterministic(tree, node_logits, [&](int32_t node) {
    return sampling::argmax(node_logits[static_cast<size_t>(node)], n_vocab);
  });
}

VerifyResult verify_coupled(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                            const sampling::SamplingParams& params, int64_t pos0) {
  return walk_deterministic(tree, node_logits, [&](int32_t node) {
    return sampling::coupled_sample(node_logits[static_cast<size_t>(node)], n_vocab, params, pos0 + tree.depth(node));
  });
}

namespace {
// q as a dense [n_vocab] table for O(1) look-ups, so that each rejection costs O(|p|)
// (one pass to build the residual) instead of O(|p| |q|): top-k/top-p/min-p off makes
// both the whole vocabulary. Entries are set for one node's q and cleared after it.
class DenseQ {
 public:
  void set(const sampling::Distribution& q, int32_t n_vocab) {
    if (dense_.empty()) dense_.assign(static_cast<size_t>(n_vocab), 0.0f);
    q_ = &q;
    for (size_t i = 0; i < q.ids.size(); ++i) dense_[static_cast<size_t>(q.ids[i])] = q.p[i];
  }
  void clear() {
    if (q_ == nullptr) return;
    for (int32_t id : q_->ids) dense_[static_cast<size_t>(id)] = 0.0f;
    q_ = nullptr;
  }
  float operator[](int32_t id) const { return dense_[static_cast<size_t>(id)]; }

 private:
  std::vector<float> dense_;
  const sampling::Distribution* q_ = nullptr;
};
}  // namespace

VerifyResult verify_lossless(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                             const sampling::SamplingParams& params, core::Rng& rng,
                             std::span<const sampling::Distribution* const> q_of_children) {
  if (params.greedy()) return verify_greedy(tree, node_logits, n_vocab);
  TREESPEC_ASSERT(has_logits(node_logits, 0), "verify: the root must have logits");
  VerifyResult res;
  int32_t node = 0;
  res.path.push_back(0);
  DenseQ qd;
  for (;;) {
    sampling::Distribution p = sampling::warp(node_logits[static_cast<size_t>(node)], n_vocab, params);
    const sampling::Distribution* q =
        static_cast<size_t>(node) < q_of_children.size() ? q_of_children[static_cast<size_t>(node)] : nullptr;
    if (q != nullptr) qd.set(*q, n_vocab);
    int32_t accepted = -1;
    // Children are tried in insertion order (fixed before any randomness is drawn).
    for (int32_t c : tree.children(node)) {
      if (!tree.is_candidate(c)) continue;  // aux rows are not proposals
      const int32_t tok = tree.token(c);
      const bool live = has_logits(node_logits, c);
      const float pc = p.prob_of(tok);
      if (q == nullptr) {
        // A point-mass child is a deterministic function of the context, and so is its
        // pruning: skipping a pruned one is as if it had never been proposed.
        if (!live) continue;
        // Point mass: accept with probability p(c); otherwise remove c from p.
        if (pc > 0.0f && rng.uniform() < pc) {
          accepted = c;
          break;
        }
        if (!p.remove(tok)) break;
      } else {
        // A child drawn from q goes through the test whether or not it was pruned: which
        // tokens get pruned depends on the draw, so skipping pruned ones would bias the
        // output toward tokens that survive pruning. A pruned child that passes is a
        // correct sample from p at this position, emitted as the bonus token (it has no
        // logits to continue from).
        const float qc = qd[tok];
        const double ratio = qc > 0.0f ? static_cast<double>(pc) / qc : (pc > 0.0f ? 1.0 : 0.0);
        if (rng.uniform() < std::min(1.0, ratio)) {
          if (live) {
            accepted = c;
            break;
          }
          res.bonus = tok;
          return res;
        }
        // Residual norm(max(p - q, 0)) over p's support (q mass outside p's support is irrelevant).
        sampling::Distribution r;
        double sum = 0.0;
        for (size_t i = 0; i < p.ids.size(); ++i) {
          const float v = std::max(0.0f, p.p[i] - qd[p.ids[i]]);
          if (v > 0.0f) {
            r.ids.push_back(p.ids[i]);
            r.p.push_back(v);
            sum += v;
          }
        }
        if (sum <= 0.0) {  // p == q on the support: any residual is fine; keep p minus c
          p.remove(tok);
          if (p.ids.empty()) break;
          continue;
        }
        for (float& v : r.p) v = static_cast<float>(v / sum);
        p = std::move(r);
      }
    }
    qd.clear();
    if (accepted < 0) {
      if (p.ids.empty()) p = sampling::warp(node_logits[static_cast<size_t>(node)], n_vocab, params);
      res.bonus = p.sample(rng);
      return res;
    }
    res.path.push_back(accepted);
    node = accepted;
  }
}

VerifyResult verify_typical(const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                            const sampling::SamplingParams& params, const TypicalParams& typical, core::Rng& rng) {
  if (params.greedy()) return verify_greedy(tree, node_logits, n_vocab);
  const int32_t n = tree.size();
  // ok[i]: node i's token passes the typical test under its parent's distribution.
  // score[i]: sum of log p along the path; len[i]: accepted prefix length ending at i.
  std::vector<int32_t> len(static_cast<size_t>(n), -1);
  std::vector<double> score(static_cast<size_t>(n), 0.0);
  len[0] = 0;
  std::vector<float> probs(static_cast<size_t>(n_vocab));
  int32_t best = 0;
  for (int32_t parent = 0; parent < n; ++parent) {
    if (len[static_cast<size_t>(parent)] < 0 || !has_logits(node_logits, parent)) continue;
    const auto& kids = tree.children(parent);
    if (kids.empty()) continue;
    const float* lg = node_logits[static_cast<size_t>(parent)];
    float mx = lg[0];
    for (int32_t i = 1; i < n_vocab; ++i) mx = std::max(mx, lg[i]);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
      probs[static_cast<size_t>(i)] = std::exp((lg[i] - mx) / params.temp);
      sum += probs[static_cast<size_t>(i)];
    }
    double entropy = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
      const double pi = probs[static_cast<size_t>(i)] / sum;
      if (pi > 0.0) entropy -= pi * std::log(pi);
    }
    const double thr = std::min(static_cast<double>(typical.threshold), typical.alpha * std::exp(-entropy));
    for (int32_t c : kids) {
      if (!acceptable(tree, node_logits, c)) continue;
      const double pc = probs[static_cast<size_t>(tree.token(c))] / sum;
      if (pc > thr) {
        len[static_cast<size_t>(c)] = len[static_cast<size_t>(parent)] + 1;
        score[static_cast<size_t>(c)] = score[static_cast<size_t>(parent)] + std::log(pc);
        const auto bc = static_cast<size_t>(best);
        if (len[static_cast<size_t>(c)] > len[bc] ||
            (len[static_cast<size_t>(c)] == len[bc] && score[static_cast<size_t>(c)] > score[bc])) {
          best = c;
        }
      }
    }
  }
  VerifyResult res;
  res.path = tree.path_to(best);
  res.bonus = sampling::warp(node_logits[static_cast<size_t>(best)], n_vocab, params).sample(rng);
  return res;
}

VerifyResult verify_ptd_reference(const tree::TokenTree& tree, std::span<const float* const> node_logits,
                                  int32_t n_vocab, const sampling::SamplingParams& params, core::Rng& rng) {
  if (params.greedy()) return verify_greedy(tree, node_logits, n_vocab);
  TREESPEC_ASSERT(has_logits(node_logits, 0), "verify: the root must have logits");
  VerifyResult res;
  int32_t node = 0;
  res.path.push_back(0);
  for (;;) {
    sampling::Distribution p = sampling::warp(node_logits[static_cast<size_t>(node)], n_vocab, params);
    std::vector<int32_t> kids;
    for (int32_t c : tree.children(node)) {
      if (acceptable(tree, node_logits, c)) kids.push_back(c);
    }
    if (node == 0 && kids.empty()) {  // no guesses at all: the reference samples the anchor's token
      res.bonus = p.sample(rng);
      return res;
    }
    int32_t accepted = -1;
    // Newest child first; accept when p(c) > u, else zero p(c) and renormalise.
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) {
      const int32_t tok = tree.token(*it);
      if (p.prob_of(tok) > rng.uniform()) {
        accepted = *it;
        break;
      }
      if (!p.remove(tok)) break;
    }
    if (accepted < 0) {
      // Argmax of the residual (Distribution keeps ids most likely first).
      if (p.ids.empty()) p = sampling::warp(node_logits[static_cast<size_t>(node)], n_vocab, params);
      res.bonus = p.top();
      return res;
    }
    res.path.push_back(accepted);
    node = accepted;
  }
}

VerifyResult verify(Mode mode, const tree::TokenTree& tree, std::span<const float* const> node_logits, int32_t n_vocab,
                    const sampling::SamplingParams& params, const TypicalParams& typical, core::Rng& rng,
                    std::span<const sampling::Distribution* const> q_of_children, int64_t pos0) {
  if (params.greedy()) return verify_greedy(tree, node_logits, n_vocab);
  if (mode == Mode::coupled) return verify_coupled(tree, node_logits, n_vocab, params, pos0);
  if (mode == Mode::typical) return verify_typical(tree, node_logits, n_vocab, params, typical, rng);
  if (mode == Mode::ptd_reference) return verify_ptd_reference(tree, node_logits, n_vocab, params, rng);
  return verify_lossless(tree, node_logits, n_vocab, params, rng, q_of_children);
}

}  // namespace treespec::verify
