#include "routing/selectors/hash_ring.h"

#include <xxhash.h>

#include <algorithm>
#include <string>

namespace kvgate::routing {

uint64_t hashBytes(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

HashRing::HashRing(const std::vector<PoolEndpoint>& eps, const std::vector<int>& vnodes) {
  for (size_t i = 0; i < eps.size(); ++i) {
    for (int v = 0; v < vnodes[i]; ++v) {
      std::string id = eps[i].state->label + "#" + std::to_string(v);
      points_.emplace_back(hashBytes(id.data(), id.size()), static_cast<int>(i));
    }
  }
  std::sort(points_.begin(), points_.end());
}

size_t HashRing::lowerBound(uint64_t key) const {
  auto it = std::lower_bound(points_.begin(), points_.end(), std::make_pair(key, -1));
  return it == points_.end() ? 0 : static_cast<size_t>(it - points_.begin());
}

}  // namespace kvgate::routing
