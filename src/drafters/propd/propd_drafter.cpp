#include "drafters/propd/propd_drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/assert.h"
#include "model/model.h"
#include "treespec/status.h"

namespace treespec::drafters {

void PropdParams::validate() const {
  if (n_max < 1 || n_max > 4096)
    throw InvalidArgument(fmt::format("propd: --propd-nmax must be in 1..4096, got {}", n_max));
  if (interval < 1 || interval > 1'000'000)
    throw InvalidArgument(fmt::format("propd: --propd-interval must be >= 1, got {}", interval));
  if (!(adapt_alpha >= 0.0f && adapt_alpha <= 1.0f))
    throw InvalidArgument(fmt::format("propd: adapt alpha must be in [0, 1], got {}", adapt_alpha));
  if (refresh_every < 0)
    throw InvalidArgument(fmt::format("propd: refresh interval must be >= 0, got {}", refresh_every));
}

PropdDrafter::PropdDrafter(const std::shared_ptr<const MedusaHeads>& heads, const PropdParams& p, int32_t top_k,
                           core::ThreadPool* pool, tree::AcceptanceTable initial,
                           std::optional<tree::TreeShape> static_shape)
    : heads_(heads),
      p_(p),
      cand_(heads, top_k, pool),
      live_(std::move(initial)),
      static_(std::move(static_shape)),
      conf_(heads->n_heads()) {
  p_.validate();
  if (live_.n_depth() != heads_->n_heads() || live_.top_k() != top_k)
    live_ = tree::AcceptanceTable(heads_->n_heads(), top_k);
  if (static_) {
    if (static_->max_depth() > heads_->n_heads() || static_->max_rank() >= top_k) {
      throw InvalidArgument(
          fmt::format("propd: the static tree needs depth {} and rank {}, the heads give {} heads x top-{}",
                      static_->max_depth(), static_->max_rank(), heads_->n_heads(), top_k));
    }
  }
  hidden_.resize(static_cast<size_t>(heads_->n_embd()));
  rebuild();
  n_max_ = best_.shape.size();
  curve_ = ExpectedCurve(best_.expected);
}

void PropdDrafter::rebuild() {
  if (static_) {
    // E_n of each prefix of the fixed tree under the live table.
    static_expected_.assign(static_cast<size_t>(static_->size()), 0.0);
    for (int32_t i = 1; i < static_->size(); ++i) {
      static_expected_[static_cast<size_t>(i)] =
          static_expected_[static_cast<size_t>(i - 1)] + live_.path_prob(static_->path(i));
    }
    return;
  }
  // The best-first tree cannot exceed the number of distinct rank paths.
  int64_t possible = 1, level = 1;
  for (int32_t d = 1; d <= live_.n_depth() && possible < p_.n_max; ++d) {
    level = std::min<int64_t>(level * live_.top_k(), 1 << 20);
    possible += level;
  }
  best_ = tree::build_best_first(live_, static_cast<int32_t>(std::min<int64_t>(p_.n_max, possible)), heads_->n_heads());
}

void PropdDrafter::begin(std::span<const int32_t> prompt) {
  have_hidden_ = false;
  have_cand_ = false;
  tracker_.clear();
  steps_ = since_heads_ = 0;
}

bool PropdDrafter::expected_accepted(std::span<double> out) const {
  // Without a hidden state (the first step) the next tree is the root alone.
  if (!have_hidden_) {
    std::fill(out.begin(), out.end(), 0.0);
  } else if (dynamic()) {
    curve_.fill(out);
  } else {
    const std::vector<double>& e = static_ ? static_expected_ : best_.expected;
    for (size_t n = 0; n < out.size(); ++n) out[n] = e[std::min(n, e.size() - 1)];
  }
  return true;
}

tree::TokenTree PropdDrafter::propose(const DraftInput& in) {
  const int32_t root = in.context.back();
  if (!have_hidden_) return tree::TokenTree(root);
  const bool want_tree = in.budget > 1;
  last_budget_ = in.budget;
  const bool refresh = p_.refresh_every > 0 && since_heads_ >= p_.refresh_every;
  if ((want_tree || refresh) && !have_cand_) {
    cand_.compute(hidden_.data());
    have_cand_ = true;
    since_heads_ = 0;
    ++head_runs_;
    if (p_.adapt_alpha > 0.0f) tracker_.add(root_index_, cand_);
    if (dynamic()) {
      dyn_ = grow_dynamic_tree(root, cand_, conf_, n_max_);
      curve_.add(dyn_.expected);
    }
  }
  if (!want_tree) return tree::TokenTree(root);
  if (!dynamic()) return fill_medusa_tree(root, shape(), cand_, in.budget);
  return dyn_.tree.prefix(dyn_.size_for(in.budget, in.min_value));
}

void PropdDrafter::observe(const StepFeedback& fb) {
  ++steps_;
  ++since_heads_;
  const int32_t last = fb.result.path.back();
  const float* h =
      static_cast<size_t>(last) < fb.node_hidden.size() ? fb.node_hidden[static_cast<size_t>(last)] : nullptr;
  have_cand_ = false;
  have_hidden_ = h != nullptr;
  if (h != nullptr) std::memcpy(hidden_.data(), h, hidden_.size() * sizeof(float));
  root_index_ = static_cast<int64_t>(fb.context.size()) - 1;
  if (p_.adapt_alpha > 0.0f) {
    tracker_.grade(fb.context, live_, p_.adapt_alpha, dynamic() ? &conf_ : nullptr);
    // Rebuild the table's tree (or the static tree's E_n) every R steps if the table can
    // have moved (the heads ran); while the trees are one node (the heads only refresh
    // the table) every 8R steps is enough. Dynamic trees are grown every step instead.
    const int64_t every = last_budget_ > 1 ? p_.interval : 8 * static_cast<int64_t>(p_.interval);
    if (!dynamic() && steps_ % every == 0 && head_runs_ != rebuilt_at_runs_) {
      rebuild();
      rebuilt_at_runs_ = head_runs_;
    }
  }
}

std::unique_ptr<Drafter> make_propd_drafter(const PropdParams& p, const MedusaParams& medusa, const PruneParams& prune,
                                            const model::Model& m, core::ThreadPool* pool) {
  p.validate();
  medusa.validate();
  MedusaParams mp = medusa;
  if (!p.heads_path.empty()) mp.heads_path = p.heads_path;
  auto heads = load_medusa_heads(mp, m, "propd");
  tree::AcceptanceTable initial = heads->info().has_calibration() ? calibration_table(*heads, mp.top_k)
                                                                  : tree::AcceptanceTable(heads->n_heads(), mp.top_k);
  std::optional<tree::TreeShape> shape;
  if (p.static_tree) {
    if (p.tree.empty()) {
      if (!heads->info().has_calibration()) {
        throw InvalidArgument(
            fmt::format("propd --static-tree: heads '{}' carry no calibration table to build the best-first tree; pass "
                        "--propd-tree NAME",
                        heads->source()));
      }
      shape = tree::build_best_first(initial, p.n_max, heads->n_heads()).shape;
    } else {
      MedusaParams tp = mp;
      tp.tree = p.tree;
      tp.tree_nodes = p.n_max;
      shape = resolve_medusa_tree(tp, *heads);
    }
  } else if (!heads->info().has_calibration()) {
    throw InvalidArgument(
        fmt::format("--spec propd: heads '{}' carry no calibration table (the acceptance model's seed); retrain with "
                    "treespec train-heads",
                    heads->source()));
  }
  auto d = std::make_unique<PropdDrafter>(heads, p, mp.top_k, pool, std::move(initial), std::move(shape));
  if (!p.no_prune) d->set_prune(resolve_prune_spec(prune, mp.heads_path, m, pool));
  return d;
}

}  // namespace treespec::drafters
