// Percentiles and per-step summaries of the fleet benchmark.
//
// percentile(): linear interpolation between closest ranks (NumPy's default "linear" method):
// for sorted x of n values and p in [0, 100], rank r = p/100 * (n - 1), result
// x[floor r] + (r - floor r) * (x[floor r + 1] - x[floor r]). Empty input gives 0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvgate::bench::fleet {

double percentile(std::vector<double> v, double p);  // copies: callers keep their order

// Mean of v (0 when empty).
double mean(const std::vector<double>& v);

// A percentile's 95 % bootstrap interval: the 2.5th and 97.5th percentiles of percentile(w, p)
// over `resamples` samples w drawn from v with replacement (same size), from a PRNG seeded with
// `seed` (the same inputs give the same interval). It says how far a rung's TTFT p90 could move
// between runs of the same policy: wide where p lies between two modes (cached hits and cold
// prefills). {0, 0} when v is empty.
struct Interval {
  double lo = 0, hi = 0;
};
Interval bootstrapPercentile(const std::vector<double>& v, double p, int resamples = 1000,
                             uint64_t seed = 1);

}  // namespace kvgate::bench::fleet
