#include "engine/budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "treespec/status.h"

namespace treespec::engine {

StepBudgetPolicy::StepBudgetPolicy(int32_t step_budget) : step_budget_(step_budget) {
  if (step_budget < 0) throw InvalidArgument(fmt::format("step budget must be >= 0 (0 = no cap), got {}", step_budget));
}

void StepBudgetPolicy::plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) {
  split(step_budget_, budgets);
}

void StepBudgetPolicy::split(int32_t step_budget, std::span<int32_t> want) {
  for (int32_t& w : want) w = std::max(w, 1);
  if (step_budget <= 0 || want.empty()) return;
  int64_t total = 0;
  for (int32_t w : want) total += w;
  if (total <= step_budget) return;

  // Roots first, then water-fill the extra nodes over sequences that still want more.
  const size_t n = want.size();
  std::vector<int32_t> grant(n, 1);
  int64_t left = std::max<int64_t>(0, static_cast<int64_t>(step_budget) - static_cast<int64_t>(n));
  while (left > 0) {
    size_t hungry = 0;
    for (size_t i = 0; i < n; ++i) hungry += grant[i] < want[i] ? 1 : 0;
    if (hungry == 0) break;
    const int64_t share = std::max<int64_t>(1, left / static_cast<int64_t>(hungry));
    for (size_t i = 0; i < n && left > 0; ++i) {
      const int64_t add = std::min<int64_t>({share, static_cast<int64_t>(want[i] - grant[i]), left});
      grant[i] += static_cast<int32_t>(add);
      left -= add;
    }
  }
  std::copy(grant.begin(), grant.end(), want.begin());
}

}  // namespace treespec::engine
