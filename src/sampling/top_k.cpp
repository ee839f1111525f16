#include "sampling/top_k.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/assert.h"

namespace treespec::sampling {

namespace {

// Up to this k an insertion into a sorted run of k entries beats a partial sort: almost
// every logit is rejected by one comparison with the run's last entry.
constexpr int32_t kInsertionMaxK = 64;

// Puts the ids of NaN logits, in id order, into out[filled..k).
void fill_with_nans(const float* logits, int32_t n, int32_t k, int32_t filled, int32_t* out) {
  for (int32_t i = 0; i < n && filled < k; ++i) {
    if (std::isnan(logits[i])) out[filled++] = i;
  }
}

}  // namespace

void top_k_ids(const float* logits, int32_t n, int32_t k, int32_t* out) {
  TREESPEC_ASSERT(k >= 0 && k <= n, "top_k_ids: k must be in 0..n");
  if (k == 0) return;
  if (k > kInsertionMaxK) {
    std::vector<int32_t> idx;
    idx.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      if (!std::isnan(logits[i])) idx.push_back(i);
    }
    const auto m = static_cast<int32_t>(std::min<size_t>(idx.size(), static_cast<size_t>(k)));
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    if (static_cast<size_t>(m) == idx.size()) {
      std::sort(idx.begin(), idx.end(), by_logit);  // everything: a sort beats a heap sort
    } else {
      std::partial_sort(idx.begin(), idx.begin() + m, idx.end(), by_logit);
    }
    std::copy(idx.begin(), idx.begin() + m, out);
    fill_with_nans(logits, n, k, m, out);
    return;
  }
  // Insertion into a sorted run of at most k entries; ids are scanned in increasing
  // order, so an equal logit never displaces an earlier (lower) id.
  float val[kInsertionMaxK];
  int32_t filled = 0;
  for (int32_t i = 0; i < n; ++i) {
    const float v = logits[i];
    if (std::isnan(v)) continue;
    if (filled == k && !(v > val[k - 1])) continue;
    int32_t pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && v > val[pos - 1]) {
      val[pos] = val[pos - 1];
      out[pos] = out[pos - 1];
      --pos;
    }
    val[pos] = v;
    out[pos] = i;
  }
  fill_with_nans(logits, n, k, filled, out);
}

int32_t rank_of(const float* logits, int32_t n, int32_t target) {
  TREESPEC_ASSERT(target >= 0 && target < n, "rank_of: target outside the logits");
  const float v = logits[target];
  int32_t rank = 0;
  if (std::isnan(v)) {
    for (int32_t i = 0; i < n; ++i) rank += (!std::isnan(logits[i]) || i < target) ? 1 : 0;
    return rank;
  }
  for (int32_t i = 0; i < n; ++i) rank += (logits[i] > v || (logits[i] == v && i < target)) ? 1 : 0;
  return rank;
}

TopProbs top_softmax(const float* logits, int32_t n, int32_t k) {
  float mx = logits[0];
  for (int32_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  k = std::min(k, n);
  TopProbs r;
  r.ids.resize(static_cast<size_t>(k));
  top_k_ids(logits, n, k, r.ids.data());
  for (int32_t id : r.ids) r.p.push_back(static_cast<float>(std::exp(static_cast<double>(logits[id] - mx)) / sum));
  return r;
}

}  // namespace treespec::sampling
