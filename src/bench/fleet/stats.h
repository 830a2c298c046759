// Percentiles and per-step summaries of the fleet benchmark.
//
// percentile(): linear interpolation between closest ranks (NumPy's default "linear" method):
// for sorted x of n values and p in [0, 100], rank r = p/100 * (n - 1), result
// x[floor r] + (r - floor r) * (x[floor r + 1] - x[floor r]). Empty input gives 0.
#pragma once
#include <cstddef>
#include <vector>

namespace kvgate::bench::fleet {

double percentile(std::vector<double> v, double p);  // copies: callers keep their order

// Mean of v (0 when empty).
double mean(const std::vector<double>& v);

}  // namespace kvgate::bench::fleet
