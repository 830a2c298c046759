// sel 9 gpuaware: prefix key modulo the pool size, as the upstream gateway's single-pool path.
//
// Algorithm: index = prefix_key % n (else the conversation key, else round-robin); an excluded
// endpoint passes the request to the next index. No load bound: a hot prefix stays on one
// endpoint (use chwbl, sel 8, to bound it). No knobs besides the prefix length K.
#include <atomic>

#include "routing/selectors/key_selectors.h"

namespace kvgate::routing {
namespace {

class GpuAware : public Selector {
 public:
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
           const RequestContext& ctx, PickInfo& info) override {
    size_t n = eps.size();
    if (n == 0) return -1;
    uint64_t key = affinityKey(ctx, cursor_, 1, info);
    for (size_t step = 0; step < n; ++step) {
      size_t i = (key % n + step) % n;
      if (!excluded[i]) return static_cast<int>(i);
    }
    return -1;
  }

 private:
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Selector> makeGpuAware() { return std::make_unique<GpuAware>(); }

}  // namespace kvgate::routing
