#include "bench/fleet/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace kvgate::bench::fleet {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  p = std::clamp(p, 0.0, 100.0);
  const double r = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(r));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (r - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

Interval bootstrapPercentile(const std::vector<double>& v, double p, int resamples,
                             uint64_t seed) {
  if (v.empty() || resamples <= 0) return {};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> stats, w(v.size());
  stats.reserve(static_cast<size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (auto& x : w) x = v[pick(rng)];
    stats.push_back(percentile(w, p));
  }
  return {percentile(stats, 2.5), percentile(stats, 97.5)};
}

}  // namespace kvgate::bench::fleet
