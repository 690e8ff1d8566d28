// robust_mean / relative_spread: see profile_stats.h.
#include "plan/profile_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ferry::plan {

namespace {

// Sorted ascending with NaN mapped to +inf, so a failed sample is an outlier and never poisons a sum.
std::vector<double> sorted_finite_order(std::vector<double> v) {
  for (double& x : v)
    if (std::isnan(x)) x = std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end());
  return v;
}

// Linear interpolation between order statistics, q in [0, 1].
double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  if (i + 1 >= sorted.size()) return sorted.back();
  const double f = pos - static_cast<double>(i);
  return sorted[i] + f * (sorted[i + 1] - sorted[i]);
}

}  // namespace

int trimmed_per_side(int n) { return n < 3 ? 0 : (n + 1) / 4; }

double robust_mean(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const std::vector<double> s = sorted_finite_order(std::move(samples));
  const int n = static_cast<int>(s.size());
  const int trim = trimmed_per_side(n);
  double sum = 0;
  for (int i = trim; i < n - trim; ++i) sum += s[static_cast<size_t>(i)];
  return sum / (n - 2 * trim);
}

double relative_spread(std::vector<double> samples) {
  if (samples.size() < 3) return 0;
  const std::vector<double> s = sorted_finite_order(std::move(samples));
  const double med = quantile(s, 0.5);
  if (!(med != 0) || !std::isfinite(med)) return 0;
  return (quantile(s, 0.75) - quantile(s, 0.25)) / std::fabs(med);
}

}  // namespace ferry::plan
