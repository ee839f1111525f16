// StepBudgetPolicy: one tree-node budget per decode step, shared by every active
// sequence, so speculation shrinks as the batch grows (verifying rows is almost free at
// batch 1 on a memory-bound model, but not when many sequences already fill the step).
//
// Every sequence keeps its root (plain decoding never stops, even when the budget is
// smaller than the batch); the rest is split by water-filling: each sequence gets an
// equal share, capped at what its drafter asks for (max_nodes()), and what a sequence
// does not use goes to the others. Deterministic: ties go to earlier sequences.
// The ProPD controller replaces this policy with a latency-model-driven one.
#pragma once

#include <cstdint>
#include <span>

#include "engine/engine.h"

namespace treespec::engine {

class StepBudgetPolicy final : public BudgetPolicy {
 public:
  // step_budget: total tree nodes (including roots) per step; 0 = no cap.
  explicit StepBudgetPolicy(int32_t step_budget);
  void plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) override;
  int32_t step_budget() const { return step_budget_; }

  // The split itself, on plain numbers: `want[i]` (>= 1) is replaced by the granted size.
  static void split(int32_t step_budget, std::span<int32_t> want);

 private:
  int32_t step_budget_;
};

}  // namespace treespec::engine
