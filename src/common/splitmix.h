// splitmix64 (Steele, Lea and Flood): the project's small deterministic generator (simulated
// output, step jitter, benchmark workloads, the random selector's per-thread streams).
#pragma once
#include <cstdint>

namespace kvgate::common {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so -log(uniform()) is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
};

}  // namespace kvgate::common
