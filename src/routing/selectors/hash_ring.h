// Consistent-hash ring shared by the persist, chwbl and wrr-hash selectors.
//
// Each endpoint owns `vnodes` points at XXH3-64("<ip:port>#<i>"); a key is served by the first
// point at or after it, clockwise. Adding or removing an endpoint moves only the keys of its
// points. Built once per rule snapshot; lookups are a binary search.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "routing/stage.h"

namespace kvgate::routing {

class HashRing {
 public:
  // vnodes[i] points for endpoint i (0 = the endpoint is not on the ring).
  HashRing(const std::vector<PoolEndpoint>& eps, const std::vector<int>& vnodes);
  size_t size() const { return points_.size(); }
  // Index into the ring of the first point at or after `key` (wrapping).
  size_t lowerBound(uint64_t key) const;
  int endpointAt(size_t ring_index) const { return points_[ring_index % points_.size()].second; }

 private:
  std::vector<std::pair<uint64_t, int>> points_;  // sorted by hash
};

uint64_t hashBytes(const void* data, size_t len, uint64_t seed = 0);

}  // namespace kvgate::routing
