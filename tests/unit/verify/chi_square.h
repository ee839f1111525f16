// Pearson chi-square goodness-of-fit for the statistical verifier tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace treespec::test {

// Significance level of every goodness-of-fit test of the verifiers.
inline constexpr double kAlpha = 1e-3;

// Regularised upper incomplete gamma Q(a, x) (series below a + 1, continued fraction
// above), enough for chi-square p-values.
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_pref = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double ap = a, del = 1.0 / a, sum = del;
    for (int n = 0; n < 10000; ++n) {
      ap += 1.0;
      del *= x / ap;
      sum += del;
      if (std::fabs(del) < std::fabs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(log_pref);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-15) break;
  }
  return std::exp(log_pref) * h;
}

struct ChiSquare {
  double stat = 0.0;
  int32_t df = 0;
  double p_value = 1.0;
  int64_t impossible = 0;  // observations in cells of probability 0 (must be 0 when lossless)
};

// observed[i] counts vs expected probabilities prob[i] (summing to 1). Cells whose
// expected count is below 5 are pooled into one cell (the usual validity rule).
inline ChiSquare chi_square(const std::vector<int64_t>& observed, const std::vector<double>& prob) {
  ChiSquare r;
  int64_t n = 0;
  for (int64_t o : observed) n += o;
  double pooled_e = 0.0;
  int64_t pooled_o = 0;
  int32_t cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = prob[i] * static_cast<double>(n);
    if (prob[i] <= 0.0) {
      r.impossible += observed[i];
      continue;
    }
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += observed[i];
      continue;
    }
    r.stat += (static_cast<double>(observed[i]) - e) * (static_cast<double>(observed[i]) - e) / e;
    ++cells;
  }
  if (pooled_e > 0.0) {
    r.stat += (static_cast<double>(pooled_o) - pooled_e) * (static_cast<double>(pooled_o) - pooled_e) / pooled_e;
    ++cells;
  }
  r.df = cells - 1;
  r.p_value = r.df > 0 ? gamma_q(0.5 * r.df, 0.5 * r.stat) : 1.0;
  return r;
}

}  // namespace treespec::test
