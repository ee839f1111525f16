#include "drafters/medusa/dynamic_tree.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "core/assert.h"
#include "drafters/medusa/medusa_drafter.h"

namespace treespec::drafters {

HeadConfidence::HeadConfidence(int32_t n_heads, double prior_weight)
    : n_heads_(n_heads),
      prior_weight_(prior_weight),
      hits_(static_cast<size_t>(n_heads) * kBins, 0.0),
      n_(static_cast<size_t>(n_heads) * kBins, 0.0),
      value_(static_cast<size_t>(n_heads) * kBins, 0.0f) {
  TREESPEC_ASSERT(n_heads >= 0 && prior_weight > 0.0, "HeadConfidence: bad arguments");
  for (int32_t k = 0; k < n_heads; ++k) refresh(k);
}

int32_t HeadConfidence::bin(float p) {
  if (!(p > 0.0f)) return 0;  // also NaN
  const auto b = static_cast<int32_t>(std::sqrt(std::min(p, 1.0f)) * static_cast<float>(kBins));
  return std::min(b, kBins - 1);
}

float HeadConfidence::value(int32_t k, float p) const {
  TREESPEC_ASSERT(k >= 0 && k < n_heads_, "HeadConfidence: head out of range");
  return value_[static_cast<size_t>(k) * kBins + static_cast<size_t>(bin(p))];
}

double HeadConfidence::weight(int32_t k) const {
  double w = 0.0;
  for (int32_t b = 0; b < kBins; ++b) w += n_[static_cast<size_t>(k) * kBins + static_cast<size_t>(b)];
  return w;
}

void HeadConfidence::update(int32_t k, float p, bool hit, float alpha) {
  TREESPEC_ASSERT(k >= 0 && k < n_heads_, "HeadConfidence: head out of range");
  const size_t i = static_cast<size_t>(k) * kBins + static_cast<size_t>(bin(p));
  const double keep = 1.0 - static_cast<double>(std::clamp(alpha, 0.0f, 1.0f));
  n_[i] = n_[i] * keep + 1.0;
  hits_[i] = hits_[i] * keep + (hit ? 1.0 : 0.0);
  refresh(k);
}

void HeadConfidence::refresh(int32_t k) {
  // Per-bin estimates with the prior at the bin's centre, then weighted pool adjacent
  // violators so that the values never decrease with p.
  struct Block {
    double w, wv;
    int32_t n;
  };
  std::vector<Block> stack;
  stack.reserve(kBins);
  const size_t base = static_cast<size_t>(k) * kBins;
  for (int32_t b = 0; b < kBins; ++b) {
    const double c = (b + 0.5) / kBins;
    const double centre = c * c;
    const double w = n_[base + static_cast<size_t>(b)] + prior_weight_;
    const double v = (hits_[base + static_cast<size_t>(b)] + prior_weight_ * centre) / w;
    stack.push_back({w, w * v, 1});
    while (stack.size() > 1) {
      const Block& hi = stack[stack.size() - 1];
      const Block& lo = stack[stack.size() - 2];
      if (lo.wv / lo.w <= hi.wv / hi.w) break;
      const Block merged{lo.w + hi.w, lo.wv + hi.wv, lo.n + hi.n};
      stack.pop_back();
      stack.back() = merged;
    }
  }
  size_t b = 0;
  for (const Block& blk : stack) {
    const auto v = static_cast<float>(std::clamp(blk.wv / blk.w, 0.0, 1.0));
    for (int32_t j = 0; j < blk.n; ++j) value_[base + b++] = v;
  }
}

int32_t DynamicTree::size_for(int32_t budget, double min_value) const {
  int32_t n = std::clamp(budget, 1, tree.size());
  if (min_value > 0.0) {
    int32_t keep = 1;
    while (keep < n && value[static_cast<size_t>(keep)] >= min_value) ++keep;
    n = keep;
  }
  return n;
}

void ExpectedCurve::add(std::span<const double> expected) {
  // A step's tree may be smaller than the largest (few candidates): its curve is flat
  // beyond its size.
  if (expected.empty()) return;
  if (e_.size() < expected.size()) e_.resize(expected.size(), e_.empty() ? expected.back() : e_.back());
  for (size_t n = 0; n < e_.size(); ++n) e_[n] += alpha_ * (expected[std::min(n, expected.size() - 1)] - e_[n]);
}

void ExpectedCurve::fill(std::span<double> out) const {
  for (size_t n = 0; n < out.size(); ++n) out[n] = e_.empty() ? 0.0 : e_[std::min(n, e_.size() - 1)];
}

DynamicTree grow_dynamic_tree(int32_t root, const MedusaCandidates& cand, const HeadConfidence& conf, int32_t n_nodes) {
  TREESPEC_ASSERT(conf.n_heads() == cand.n_heads(), "grow_dynamic_tree: confidence and heads differ");
  DynamicTree out;
  out.tree = tree::TokenTree(root);
  out.value.push_back(1.0);
  out.expected.push_back(0.0);
  const int32_t depth_max = cand.n_heads(), k_max = cand.top_k();
  if (n_nodes <= 1 || depth_max == 0) return out;
  // conf of every (head, rank) once.
  std::vector<double> v(static_cast<size_t>(depth_max) * static_cast<size_t>(k_max));
  for (int32_t k = 0; k < depth_max; ++k) {
    const auto p = cand.prob(k);
    for (int32_t r = 0; r < k_max; ++r)
      v[static_cast<size_t>(k * k_max + r)] = conf.value(k, p[static_cast<size_t>(r)]);
  }
  struct Frontier {
    double value;
    int64_t order;  // push order: ties go to the earlier (shallower, lower rank)
    int32_t parent, depth, rank;
  };
  auto worse = [](const Frontier& a, const Frontier& b) {
    return a.value < b.value || (a.value == b.value && a.order > b.order);
  };
  std::priority_queue<Frontier, std::vector<Frontier>, decltype(worse)> heap(worse);
  int64_t order = 0;
  auto push = [&](int32_t parent, int32_t depth, int32_t rank) {
    if (depth > depth_max || rank >= k_max) return;
    const double pv = out.value[static_cast<size_t>(parent)];
    heap.push({pv * v[static_cast<size_t>((depth - 1) * k_max + rank)], order++, parent, depth, rank});
  };
  push(0, 1, 0);
  while (out.tree.size() < n_nodes && !heap.empty()) {
    const Frontier f = heap.top();
    heap.pop();
    const int32_t node = out.tree.add(cand.top(f.depth - 1)[static_cast<size_t>(f.rank)], f.parent);
    out.value.push_back(f.value);
    out.expected.push_back(out.expected.back() + f.value);
    push(f.parent, f.depth, f.rank + 1);  // the next sibling
    push(node, f.depth + 1, 0);           // the first child
  }
  return out;
}

}  // namespace treespec::drafters
