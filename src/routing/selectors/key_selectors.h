// Factories of the key-based selectors (internal to routing/selectors).
#pragma once
#include <memory>
#include <vector>

#include "routing/selectors/selector.h"

namespace kvgate::routing {

std::unique_ptr<Selector> makeSourceHash();                                   // sel 1, hash.cc
std::unique_ptr<Selector> makePersist(const std::vector<PoolEndpoint>& eps);  // sel 3
std::unique_ptr<Selector> makeChwbl(const std::vector<PoolEndpoint>& eps, bool weighted);  // 8, 10
std::unique_ptr<Selector> makeGpuAware();  // sel 9, gpuaware.cc

}  // namespace kvgate::routing
