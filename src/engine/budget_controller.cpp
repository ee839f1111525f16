#include "engine/budget_controller.h"

#include "engine/auto_policy.h"
#include "engine/budget.h"
#include "engine/latency_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/assert.h"
#include "core/log.h"
#include "core/timer.h"
#include "drafters/factory.h"
#include "treespec/status.h"

namespace treespec::engine {

// ---------------------------------------------------------------------------------------
// LatencyModel

namespace {
// Fixed feature scales keep the normal equations well conditioned (rows ~ 64, context ~ 512).
constexpr double kScaleB = 8.0, kScaleR = 64.0, kScaleS = 512.0;

// Solves the k x k system M z = v in place (Gaussian elimination with partial pivoting);
// false if singular.
bool solve_small(double* M, double* v, int k) {
  for (int col = 0; col < k; ++col) {
    int piv = col;
    for (int r = col + 1; r < k; ++r) {
      if (std::abs(M[r * k + col]) > std::abs(M[piv * k + col])) piv = r;
    }
    if (!(std::abs(M[piv * k + col]) > 1e-300)) return false;
    if (piv != col) {
      for (int j = 0; j < k; ++j) std::swap(M[col * k + j], M[piv * k + j]);
      std::swap(v[col], v[piv]);
    }
    for (int r = col + 1; r < k; ++r) {
      const double f = M[r * k + col] / M[col * k + col];
      for (int j = col; j < k; ++j) M[r * k + j] -= f * M[col * k + j];
      v[r] -= f * v[col];
    }
  }
  for (int r = k - 1; r >= 0; --r) {
    for (int j = r + 1; j < k; ++j) v[r] -= M[r * k + j] * v[j];
    v[r] /= M[r * k + r];
  }
  return true;
}

// Non-negative least squares on the normal equations A c = y (n <= 5, A symmetric
// positive definite): the exact optimum, by trying every support set (2^n small
// solves) and keeping the best feasible one. Costs are physical (each coefficient a
// time per unit of work), so c >= 0; it also keeps extrapolation monotone in rows,
// sequences and context.
void solve_nonneg(const std::array<double, 25>& A, const std::array<double, 5>& y, int n, std::array<double, 5>& c) {
  double best = 0.0;  // objective c'Ac - 2y'c of c = 0
  std::array<double, 5> best_c{};
  const int full = (1 << n) - 1;
  for (int mask = full; mask >= 1; --mask) {  // the full support first: usually feasible, then done
    int idx[5], k = 0;
    for (int i = 0; i < n; ++i) {
      if (mask & (1 << i)) idx[k++] = i;
    }
    double M[25], v[5];
    for (int a = 0; a < k; ++a) {
      v[a] = y[static_cast<size_t>(idx[a])];
      for (int b = 0; b < k; ++b) M[a * k + b] = A[static_cast<size_t>(idx[a] * n + idx[b])];
    }
    if (!solve_small(M, v, k)) continue;
    bool feasible = true;
    for (int a = 0; a < k; ++a) feasible = feasible && v[a] >= 0.0;
    if (!feasible) continue;
    // At an unconstrained optimum of the support, c'Ac = y'c, so the objective is -y'c.
    double obj = 0.0;
    for (int a = 0; a < k; ++a) obj -= y[static_cast<size_t>(idx[a])] * v[a];
    if (obj < best) {
      best = obj;
      best_c = {};
      for (int a = 0; a < k; ++a) best_c[static_cast<size_t>(idx[a])] = v[a];
    }
    if (mask == full) break;  // the unconstrained optimum is feasible: it is the answer
  }
  c = best_c;
}
}  // namespace

LatencyModel::Coef LatencyModel::features(double b, double r, double s) {
  return {1.0, b / kScaleB, r / kScaleR, (r / kScaleR) * (s / kScaleS), (b / kScaleB) * (s / kScaleS)};
}

double LatencyModel::eval(const Coef& c, double b, double r, double s) {
  const Coef f = features(b, r, s);
  double t = 0.0;
  for (int k = 0; k < kFeatures; ++k) t += c[static_cast<size_t>(k)] * f[static_cast<size_t>(k)];
  return t;
}

void LatencyModel::add(double b, double r, double s, double seconds, bool prior) {
  if (!(seconds > 0.0) || !std::isfinite(seconds) || !(b > 0.0) || !(r > 0.0)) return;
  const Sample smp{b, r, s, seconds, now_};
  if (prior) {
    prior_.push_back(smp);
    return;
  }
  const auto cap = static_cast<size_t>(std::max(8, o_.max_samples));
  if (online_.size() < cap) {
    online_.push_back(smp);
  } else {
    online_[next_] = smp;
    next_ = (next_ + 1) % cap;
  }
}

LatencyModel::Coef LatencyModel::solve(double b, double r, double s, bool local, const Coef* towards) const {
  constexpr int n = kFeatures;
  std::array<double, 25> A{};
  std::array<double, 5> y{};
  double wsum = 0.0;
  const double inv_bw2 = 1.0 / (o_.bandwidth_octaves * o_.bandwidth_octaves);
  const double lr = std::log2(std::max(r, 1e-9)), lb = std::log2(std::max(b, 1e-9));
  auto accumulate = [&](const Sample& smp, double w) {
    if (local) {
      const double dr = std::log2(smp.r) - lr, db = std::log2(smp.b) - lb;
      w /= 1.0 + (dr * dr + db * db) * inv_bw2;  // Cauchy kernel: cheap, heavy-tailed
    }
    if (!(w > 0.0)) return;
    const Coef f = features(smp.b, smp.r, smp.s);
    for (int i = 0; i < n; ++i) {
      y[static_cast<size_t>(i)] += w * f[static_cast<size_t>(i)] * smp.t;
      for (int j = 0; j < n; ++j)
        A[static_cast<size_t>(i * n + j)] += w * f[static_cast<size_t>(i)] * f[static_cast<size_t>(j)];
    }
    wsum += w;
  };
  const double decay = std::log(2.0) / std::max(1.0, o_.half_life);
  for (const Sample& smp : online_) accumulate(smp, std::exp(-decay * static_cast<double>(now_ - smp.at)));
  for (const Sample& smp : prior_) accumulate(smp, o_.prior_weight);
  Coef c{};
  if (wsum <= 0.0) return towards ? *towards : c;
  // Ridge: towards the global fit (local) or towards zero (global), scaled by each
  // feature's own weighted energy so it is unit-free; a tiny absolute term keeps unseen
  // features (e.g. no context variation yet) determined.
  const double lambda = local ? o_.local_shrink : 1e-6;
  for (int i = 0; i < n; ++i) {
    const double d = lambda * A[static_cast<size_t>(i * n + i)] + 1e-9 * wsum;
    A[static_cast<size_t>(i * n + i)] += d;
    if (towards) y[static_cast<size_t>(i)] += d * (*towards)[static_cast<size_t>(i)];
  }
  solve_nonneg(A, y, n, c);
  return c;
}

LatencyModel::Coef LatencyModel::fit_global() const { return solve(1.0, 1.0, 0.0, false, nullptr); }

double LatencyModel::predict(double b, double r, double s) const {
  const Coef g = fit_global();
  return predict(b, r, s, g);
}

double LatencyModel::predict(double b, double r, double s, const Coef& global) const {
  return std::max(1e-7, eval(solve(b, r, s, true, &global), b, r, s));
}

// ---------------------------------------------------------------------------------------
// BudgetController

void ControllerParams::validate() const {
  if (n_max < 1 || n_max > 4096)
    throw InvalidArgument(fmt::format("budget controller: largest tree (n_max) must be in 1..4096, got {}", n_max));
  if (interval < 1 || interval > 1'000'000)
    throw InvalidArgument(fmt::format("budget controller: re-plan interval must be >= 1, got {}", interval));
  if (explore_every < 0)
    throw InvalidArgument(fmt::format("budget controller: explore_every must be >= 0, got {}", explore_every));
  if (probe_ctx < 0)
    throw InvalidArgument(fmt::format("budget controller: probe context must be >= 0, got {}", probe_ctx));
  if (!(probe_max_ratio > 1.0))
    throw InvalidArgument(fmt::format("budget controller: probe_max_ratio must be > 1, got {}", probe_max_ratio));
  if (step_budget < 0)
    throw InvalidArgument(fmt::format("budget controller: step budget must be >= 0, got {}", step_budget));
  if (probe_reps < 1)
    throw InvalidArgument(fmt::format("budget controller: probe_reps must be >= 1, got {}", probe_reps));
  if (!(latency.half_life > 0.0)) throw InvalidArgument("budget controller: latency half-life must be > 0");
  if (!(latency.bandwidth_octaves > 0.0)) throw InvalidArgument("budget controller: latency bandwidth must be > 0");
}

BudgetController::BudgetController(ControllerParams p, int32_t n_layer)
    : p_(p), n_layer_(std::max(1, n_layer)), latency_(p.latency) {
  p_.validate();
  surv_.assign(static_cast<size_t>(p_.n_max), 1.0);
  surv_cnt_.assign(static_cast<size_t>(p_.n_max), 0);
}

int32_t BudgetController::octave(int32_t n) {
  int32_t k = 0;
  while ((2 << k) <= n) ++k;
  return k;  // floor(log2 n)
}

double BudgetController::survival(int32_t node) const {
  if (node <= 0) return 1.0;
  return node < static_cast<int32_t>(surv_.size()) ? surv_[static_cast<size_t>(node)] : surv_.back();
}

double BudgetController::acceptance_correction() const {
  if (acc_pred_ < 0.05) return 1.0;  // not enough evidence yet
  return std::clamp(acc_meas_ / acc_pred_, 0.25, 1.5);
}

int32_t probe_latency(Engine& eng, LatencyModel& lat, int32_t n_max, int32_t probe_ctx, double max_ratio, int32_t reps,
                      bool* cached) {
  if (cached != nullptr) *cached = false;
  const std::string key = latency_profile_key(eng, n_max, probe_ctx, max_ratio, reps);
  if (const auto pts = load_latency_profile(key)) {
    for (const LatencyPoint& q : *pts) lat.add(q[0], q[1], q[2], q[3], /*prior=*/true);
    if (cached != nullptr) *cached = true;
    return static_cast<int32_t>(pts->size());
  }
  std::vector<LatencyPoint> measured;
  const int32_t cells = eng.kv().n_cells();
  const int32_t ctx = std::max(0, std::min(probe_ctx, cells - n_max - 1));
  std::vector<int32_t> batches = {1};
  const int32_t free = eng.free_slots();
  if (free > 1) batches.push_back(free);
  int32_t points = 0;
  for (int32_t b : batches) {
    if (b > free) break;
    double t1 = -1.0;
    for (int32_t n = 1;; n = std::min(2 * n, n_max)) {
      if (ctx + n > cells) break;
      double best = -1.0;
      for (int32_t rep = 0; rep < reps; ++rep) {
        const double t = eng.probe_step(b, n, ctx);
        if (t > 0.0 && (best < 0.0 || t < best)) best = t;
      }
      if (best <= 0.0) break;
      ++points;
      lat.add(b, static_cast<double>(b) * n, ctx, best, /*prior=*/true);
      measured.push_back({static_cast<double>(b), static_cast<double>(b) * n, static_cast<double>(ctx), best});
      if (n == 1) t1 = best;
      if (n >= n_max || (t1 > 0.0 && best > max_ratio * t1)) break;
    }
  }
  save_latency_profile(key, measured);
  return points;
}

void BudgetController::calibrate(Engine& eng) {
  if (!p_.probe) return;
  const double t0 = core::now_s();
  n_probe_ += probe_latency(eng, latency_, p_.n_max, p_.probe_ctx, p_.probe_max_ratio, p_.probe_reps, &probe_cached_);
  probe_s_ += core::now_s() - t0;
  TS_LOG_INFO("budget controller: start-up sweep of {} points {} {:.3f} s", n_probe_,
              probe_cached_ ? "from the latency cache in" : "in", probe_s_);
}

void BudgetController::curve_for(const Sequence& s, int32_t cap, std::vector<double>& out, bool& modelled) {
  out.assign(static_cast<size_t>(cap), 0.0);
  const auto& d = s.drafter();
  modelled = d.expected_accepted(out);
  if (modelled) {
    out[0] = 0.0;
    for (size_t n = 1; n < out.size(); ++n) out[n] = std::max(out[n], out[n - 1]);  // never decreasing
    return;
  }
  std::fill(out.begin(), out.end(), 0.0);
  const Empirical& e = empirical_[d.name()];
  // Piecewise linear in log2(n) through the observed octaves' means (anchored at E(1) = 0),
  // flat beyond the largest observed octave; made non-decreasing.
  std::vector<std::pair<double, double>> pts = {{0.0, 0.0}};
  for (size_t k = 1; k < e.acc.size(); ++k) {
    if (e.cnt[k] > 0) pts.emplace_back(static_cast<double>(k) + 0.5, e.acc[k]);
  }
  for (int32_t n = 2; n <= cap; ++n) {
    const double x = std::log2(static_cast<double>(n));
    double v = pts.back().second;
    for (size_t i = 1; i < pts.size(); ++i) {
      if (x <= pts[i].first) {
        const double f = (x - pts[i - 1].first) / (pts[i].first - pts[i - 1].first);
        v = pts[i - 1].second + f * (pts[i].second - pts[i - 1].second);
        break;
      }
    }
    out[static_cast<size_t>(n - 1)] = std::max(v, out[static_cast<size_t>(n - 2)]);
  }
}

bool BudgetController::sweep_may_pay(std::span<Sequence* const> seqs, std::span<const int32_t> caps,
                                     const std::vector<std::vector<double>>& gains, const std::vector<bool>& modelled,
                                     int32_t k, const Choice& best) const {
  // Optimism: acceptance at octave k is at most twice that of octave k - 1 (the sizes
  // double), and at least one token is always thought possible (a cold octave 1 gets a
  // chance), never more than the tree has drafted nodes. Where even that could not beat
  // the current plan's tokens per second, the sweep would only cost: on a model whose
  // extra rows are dear (cache-resident, compute-bound) the controller stops at the sizes
  // that can pay instead of sweeping 16, 32 and 64 rows.
  const size_t b = seqs.size();
  double rows = 0.0, tokens = static_cast<double>(b);
  for (size_t i = 0; i < b; ++i) {
    const int32_t n = std::clamp(1 << k, 1, std::clamp(caps[i], 1, p_.n_max));
    rows += n;
    if (modelled[i]) {
      tokens += gains[i][static_cast<size_t>(n - 1)];
      continue;
    }
    const auto it = empirical_.find(seqs[i]->drafter().name());
    double below = 0.0;
    if (it != empirical_.end() && static_cast<size_t>(k - 1) < it->second.cnt.size() &&
        it->second.cnt[static_cast<size_t>(k - 1)] > 0)
      below = it->second.acc[static_cast<size_t>(k - 1)];
    tokens += std::min(static_cast<double>(n - 1), std::max(1.0, 2.0 * below));
  }
  const double t_sweep = latency_.predict(static_cast<double>(b), rows, planned_mean_ctx_);
  const double best_score = best.expected_tokens / std::max(1e-9, best.predicted_s);
  return tokens / std::max(1e-9, t_sweep) > best_score;
}

BudgetController::Choice BudgetController::choose(double mean_ctx, const std::vector<std::vector<double>>& gains,
                                                  const std::vector<double>& f_early, int32_t force_extra) const {
  const size_t b = gains.size();
  Choice ch;
  ch.budgets.assign(b, 1);
  if (b == 0) return ch;
  const double corr = acceptance_correction();
  // Every possible extra node, best marginal gain first (per sequence in node order).
  struct Cand {
    double gain;
    int32_t seq;
    int32_t node;  // node index being added (1-based count - 1)
    bool operator<(const Cand& o) const { return gain < o.gain || (gain == o.gain && seq > o.seq); }
  };
  std::priority_queue<Cand> heap;
  for (size_t i = 0; i < b; ++i) {
    if (gains[i].size() > 1) heap.push({gains[i][1] - gains[i][0], static_cast<int32_t>(i), 1});
  }
  // Prefix sums over the allocation order: rows_eff and gain after X extra nodes.
  std::vector<int32_t> order_seq;
  std::vector<double> cum_rows = {static_cast<double>(b)}, cum_gain = {0.0};
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const auto i = static_cast<size_t>(c.seq);
    const double f = i < f_early.size() ? f_early[i] : 1.0;
    order_seq.push_back(c.seq);
    cum_rows.push_back(cum_rows.back() + f + (1.0 - f) * survival(c.node));
    cum_gain.push_back(cum_gain.back() + std::max(0.0, c.gain));
    const int32_t next = c.node + 1;
    if (next < static_cast<int32_t>(gains[i].size()))
      heap.push({gains[i][static_cast<size_t>(next)] - gains[i][static_cast<size_t>(next - 1)], c.seq, next});
  }
  int32_t x_max = static_cast<int32_t>(order_seq.size());
  if (p_.step_budget > 0)
    x_max = std::min<int32_t>(x_max, std::max<int32_t>(0, p_.step_budget - static_cast<int32_t>(b)));
  // Time at X: local fits on a geometric grid of rows, interpolated (a fit per X would cost
  // too much on a model whose step takes a fraction of a millisecond).
  const double bd = static_cast<double>(b);
  std::vector<double> grid_r, grid_t;
  const LatencyModel::Coef global = latency_.fit_global();
  for (double r = cum_rows.front();; r *= 1.5) {
    grid_r.push_back(r);
    grid_t.push_back(latency_.predict(bd, r, mean_ctx, global));
    if (r >= cum_rows.back()) break;
  }
  auto time_at = [&](double r) {
    if (grid_r.size() == 1 || r <= grid_r.front()) return grid_t.front();
    for (size_t g = 1; g < grid_r.size(); ++g) {
      if (r <= grid_r[g]) {
        const double f = std::log(r / grid_r[g - 1]) / std::log(grid_r[g] / grid_r[g - 1]);
        return grid_t[g - 1] + f * (grid_t[g] - grid_t[g - 1]);
      }
    }
    return grid_t.back();
  };
  int32_t best_x = 0;
  double best_score = -1.0;
  if (force_extra >= 0) {
    best_x = std::min(force_extra, x_max);
  } else {
    for (int32_t x = 0; x <= x_max; ++x) {
      const double t = std::max(1e-9, time_at(cum_rows[static_cast<size_t>(x)]));
      const double score = (bd + corr * cum_gain[static_cast<size_t>(x)]) / t;
      if (score > best_score * (1.0 + 1e-9)) {  // ties: the smaller tree
        best_score = score;
        best_x = x;
      }
    }
  }
  for (int32_t x = 0; x < best_x; ++x) ch.budgets[static_cast<size_t>(order_seq[static_cast<size_t>(x)])] += 1;
  ch.rows_eff = cum_rows[static_cast<size_t>(best_x)];
  ch.predicted_s = time_at(ch.rows_eff);
  ch.expected_tokens = bd + corr * cum_gain[static_cast<size_t>(best_x)];
  // The value floor: one more node is worth its row when corr * value >= score * dT, dT
  // the marginal seconds of one node around this size (over the next b nodes, or the
  // last b below when there are none).
  int32_t x_lo = best_x, x_hi = std::min(x_max, best_x + static_cast<int32_t>(b));
  if (x_hi == x_lo) x_lo = std::max(0, best_x - static_cast<int32_t>(b));
  if (x_hi > x_lo && corr > 0.0) {
    const double dt = (time_at(cum_rows[static_cast<size_t>(x_hi)]) - time_at(cum_rows[static_cast<size_t>(x_lo)])) /
                      static_cast<double>(x_hi - x_lo);
    const double score = ch.expected_tokens / std::max(1e-9, ch.predicted_s);
    ch.min_value = std::max(0.0, score * dt / corr);
    // Never above the last granted node's own gain: a step as confident as the average
    // keeps the planned tree (the interpolated time curve is not smooth enough to say more).
    if (best_x > 0)
      ch.min_value =
          std::min(ch.min_value, cum_gain[static_cast<size_t>(best_x)] - cum_gain[static_cast<size_t>(best_x - 1)]);
  }
  return ch;
}

void BudgetController::plan(std::span<Sequence* const> seqs, std::span<int32_t> budgets) {
  bool same = seqs.size() == planned_seqs_.size();
  for (size_t i = 0; same && i < seqs.size(); ++i) same = seqs[i] == planned_seqs_[i];
  if (same && steps_since_plan_ < interval_now_) {
    for (size_t i = 0; i < seqs.size(); ++i) budgets[i] = std::min(budgets[i], planned_budgets_[i]);
    ++steps_since_plan_;
    return;
  }
  // Re-plan.
  const size_t b = seqs.size();
  std::vector<std::vector<double>> gains(b);
  std::vector<double> f_early(b, 1.0);
  std::vector<bool> modelled(b, false);
  int32_t cold_octave = -1;  // a drafter without a model with an unobserved octave
  for (size_t i = 0; i < b; ++i) {
    const int32_t cap = std::clamp(budgets[i], 1, p_.n_max);
    bool m = false;
    curve_for(*seqs[i], cap, gains[i], m);
    modelled[i] = m;
    const auto& ps = seqs[i]->drafter().prune();
    if (ps.enabled() && ps.layer < n_layer_) f_early[i] = static_cast<double>(ps.layer) / n_layer_;
    if (!m && cold_octave < 0) {
      const Empirical& e = empirical_[seqs[i]->drafter().name()];
      for (int32_t k = 1; k <= octave(cap); ++k) {
        if (static_cast<size_t>(k) >= e.cnt.size() || e.cnt[static_cast<size_t>(k)] < 2) {
          cold_octave = k;
          break;
        }
      }
    }
  }
  ++n_plans_;
  exploring_ = false;
  bool periodic = false;  // a neighbouring total tried now and then (not a cold sweep)
  Choice ch = choose(planned_mean_ctx_, gains, f_early);
  if (cold_octave > 0 && sweep_may_pay(seqs, budgets, gains, modelled, cold_octave, ch)) {
    // Sweep a cold octave once: every sequence gets 2^k nodes (an exploration).
    ch = Choice{};
    ch.budgets.assign(b, 1 << cold_octave);
    exploring_ = true;
  } else {
    if (p_.explore_every > 0 && n_plans_ % p_.explore_every == 0) {
      int32_t x = 0;
      for (int32_t v : ch.budgets) x += v - 1;
      const bool up = (n_plans_ / p_.explore_every) % 2 == 1;
      const int32_t xe = up ? std::max(2 * x, x + static_cast<int32_t>(b)) : x / 2;
      if (xe != x) {
        ch = choose(planned_mean_ctx_, gains, f_early, xe);
        exploring_ = periodic = true;
      }
    }
  }
  // A plan that repeats the last one that was not an exploration (same batch, same
  // budgets) is re-checked less and less often (R, 2R, 4R, ... 8R): on a model whose
  // answer is settled (plain decoding on a cache-resident model) the controller then
  // costs next to nothing. A periodic exploration lasts kExploreSteps steps, not R, and
  // does not restart that doubling: its steps only add samples (before 2026-12-07 it held
  // R = 8 steps and reset R, so one step in eight ran the neighbouring size, 10-25% of
  // the speed on a model where extra rows are dear). A cold sweep holds kSweepSteps (an
  // octave counts as seen after 2 steps; the curve keeps learning whenever it is used).
  std::vector<int32_t> granted(b);
  for (size_t i = 0; i < b; ++i) granted[i] = std::clamp(ch.budgets[i], 1, std::max(1, budgets[i]));
  constexpr int64_t kExploreSteps = 2, kSweepSteps = 4;
  if (exploring_) {
    interval_now_ = std::min<int64_t>(p_.interval, periodic ? kExploreSteps : kSweepSteps);
  } else {
    const bool repeat = same && granted == exploit_budgets_;
    exploit_interval_ =
        repeat ? std::min<int64_t>(2 * exploit_interval_, 8 * static_cast<int64_t>(p_.interval)) : p_.interval;
    interval_now_ = exploit_interval_;
    exploit_budgets_ = granted;
  }
  planned_seqs_.assign(seqs.begin(), seqs.end());
  planned_budgets_ = ch.budgets;
  planned_pred_.assign(b, 0.0);
  for (size_t i = 0; i < b; ++i) {
    planned_budgets_[i] = std::clamp(planned_budgets_[i], 1, std::max(1, budgets[i]));
    if (modelled[i])
      planned_pred_[i] =
          gains[i]
               [static_cast<size_t>(std::min<int32_t>(planned_budgets_[i], static_cast<int32_t>(gains[i].size())) - 1)];
    budgets[i] = planned_budgets_[i];
  }
  planned_t_ = ch.predicted_s;
  min_value_ = exploring_ ? 0.0 : ch.min_value;  // an exploration measures the sizes it asked for
  if (exploring_) ++n_explore_;
  steps_since_plan_ = 1;
}

void BudgetController::observe(const StepReport& r) {
  ++n_steps_;
  latency_.tick();
  planned_mean_ctx_ = r.mean_ctx;
  // A shared machine preempts us now and then: a step far slower than the same
  // configuration usually takes is clipped before it enters the fit.
  double t = r.t_step;
  auto& hist = step_log_time_[{r.n_seqs, r.n_rows_late * 4096 + r.n_rows}];
  if (hist.second >= 3) t = std::min(t, 3.0 * std::exp(hist.first));
  if (t > 0.0) {
    hist.first = hist.second == 0 ? std::log(t) : hist.first + 0.2 * (std::log(t) - hist.first);
    ++hist.second;
  }
  latency_.add(r.n_seqs, std::max(1e-9, r.rows_eff), r.mean_ctx, t);
  constexpr double alpha = 0.05;
  double late = 0.0, nodes = 0.0;
  for (const SeqStepReport& s : r.seqs) {
    nodes += s.n_nodes;
    late += s.n_late;
    ++hist_[s.budget];
    sum_nodes_ += s.budget;
    sum_tree_ += s.n_nodes;
    sum_late_ += s.n_late;
    ++n_seq_steps_;
    // Survival per node index.
    if (s.prune_layer > 0) {
      for (size_t j = 1; j < s.survived.size() && j < surv_.size(); ++j) {
        surv_[j] += alpha * ((s.survived[j] ? 1.0 : 0.0) - surv_[j]);
        ++surv_cnt_[j];
      }
    }
    if (s.seq == nullptr) continue;
    // Acceptance: the correction for modelled drafters, the curve for the others.
    const auto it = std::find(planned_seqs_.begin(), planned_seqs_.end(), s.seq);
    double pred = 0.0;
    if (it != planned_seqs_.end()) pred = planned_pred_[static_cast<size_t>(it - planned_seqs_.begin())];
    const auto& d = s.seq->drafter();
    if (d.expected_accepted({})) {  // an empty span only asks whether the drafter has a model
      if (s.n_nodes > 1 && pred > 0.0) {
        acc_pred_ += alpha * (pred - acc_pred_);
        acc_meas_ += alpha * (static_cast<double>(s.n_accepted) - acc_meas_);
      }
    } else if (s.budget > 1) {
      Empirical& e = empirical_[d.name()];
      const auto k = static_cast<size_t>(octave(s.budget));
      if (e.acc.size() <= k) {
        e.acc.resize(k + 1, 0.0);
        e.cnt.resize(k + 1, 0);
      }
      e.acc[k] = e.cnt[k] == 0 ? s.n_accepted : e.acc[k] + 0.1 * (s.n_accepted - e.acc[k]);
      ++e.cnt[k];
    }
  }
  if (planned_t_ > 0.0) {
    sum_pred_ += planned_t_;
    sum_meas_ += r.t_step;
    sum_abs_err_ += std::abs(planned_t_ - r.t_step) / std::max(1e-12, r.t_step);
    ++n_pred_;
  }
  if (static_cast<int32_t>(trace_.size()) < p_.trace_steps) {
    trace_.push_back(
        {r.n_seqs, r.n_seqs ? nodes / r.n_seqs : 0.0, r.n_seqs ? late / r.n_seqs : 0.0, planned_t_, r.t_step});
  }
}

nlohmann::json BudgetController::stats_json() const {
  nlohmann::json j;
  j["policy"] = "controller";
  j["steps"] = n_steps_;
  j["plans"] = n_plans_;
  j["explorations"] = n_explore_;
  j["n_max"] = p_.n_max;
  j["interval"] = p_.interval;
  j["calibration"] = {{"points", n_probe_}, {"seconds", probe_s_}, {"cached", probe_cached_}};
  j["mean_nodes"] = n_seq_steps_ ? sum_nodes_ / static_cast<double>(n_seq_steps_) : 0.0;
  j["mean_tree_nodes"] = n_seq_steps_ ? sum_tree_ / static_cast<double>(n_seq_steps_) : 0.0;
  j["min_node_value"] = min_value_;
  j["mean_late_rows"] = n_seq_steps_ ? sum_late_ / static_cast<double>(n_seq_steps_) : 0.0;
  nlohmann::json hist = nlohmann::json::object();
  for (const auto& [n, c] : hist_) hist[std::to_string(n)] = c;
  j["nodes_histogram"] = hist;
  j["predicted_step_s_mean"] = n_pred_ ? sum_pred_ / static_cast<double>(n_pred_) : 0.0;
  j["measured_step_s_mean"] = n_pred_ ? sum_meas_ / static_cast<double>(n_pred_) : 0.0;
  j["prediction_rel_error_mean"] = n_pred_ ? sum_abs_err_ / static_cast<double>(n_pred_) : 0.0;
  j["acceptance_correction"] = acceptance_correction();
  const auto c = latency_.fit_global();
  j["latency_coefficients"] = {{"c0", c[0]},
                               {"c_seq", c[1]},
                               {"c_row", c[2]},
                               {"c_row_ctx", c[3]},
                               {"c_seq_ctx", c[4]},
                               {"feature_scales", {{"seq", kScaleB}, {"row", kScaleR}, {"ctx", kScaleS}}}};
  if (!trace_.empty()) {
    nlohmann::json t;
    std::vector<int32_t> bs;
    std::vector<double> nodes, late, pred, meas;
    for (const auto& row : trace_) {
      bs.push_back(row.b);
      nodes.push_back(row.nodes);
      late.push_back(row.late);
      pred.push_back(row.pred);
      meas.push_back(row.meas);
    }
    t["batch"] = bs;
    t["nodes"] = nodes;
    t["late_rows"] = late;
    t["predicted_s"] = pred;
    t["measured_s"] = meas;
    j["trace"] = t;
  }
  return j;
}

// ---------------------------------------------------------------------------------------

void FixedBudgetPolicy::plan(std::span<Sequence* const>, std::span<int32_t> budgets) {
  std::fill(budgets.begin(), budgets.end(), budget_);
}

std::unique_ptr<BudgetPolicy> make_budget_policy(const drafters::SpecConfig& cfg, Engine& eng, int32_t step_budget) {
  if (step_budget < 0) throw InvalidArgument(fmt::format("step budget must be >= 0 (0 = no cap), got {}", step_budget));
  const drafters::BudgetRequest r = drafters::budget_request(cfg);
  using Kind = drafters::BudgetRequest::Kind;
  switch (r.kind) {
    case Kind::own:  // each drafter's own size, split under the per-step cap if there is one
      return step_budget > 0 ? std::make_unique<StepBudgetPolicy>(step_budget) : nullptr;
    case Kind::fixed: return std::make_unique<FixedBudgetPolicy>(r.nodes);
    case Kind::choose: {
      AutoPolicyParams ap;
      ap.explore = r.explore;
      ap.trial_steps = r.trial_steps;
      ap.shadow_every = r.shadow_every;
      ap.step_budget = step_budget;
      auto pol = std::make_unique<AutoPolicy>(ap);
      if (r.probe) pol->calibrate(eng);
      return pol;
    }
    case Kind::controller: break;
  }
  ControllerParams cp;
  cp.step_budget = step_budget;
  cp.n_max = r.n_max;
  cp.interval = r.interval;
  cp.probe = r.probe;
  auto ctl = std::make_unique<BudgetController>(cp, eng.model().hparams().n_layer);
  ctl->calibrate(eng);
  return ctl;
}

}  // namespace treespec::engine
