// gpuaware (sel 9): prefix key modulo the pool size, as the upstream gateway's single-pool path.
//
// Algorithm: index = prefix_key % n (else the conversation key, else round-robin); an excluded
// endpoint passes the request to the next index. No load bound: a hot prefix stays on one
// endpoint (use chwbl, sel 8, to bound it). No knobs besides the prefix length K.
#include <atomic>

#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class GpuawareStage : public Stage {
 public:
  uint32_t needs() const override { return kNeedPromptPrefix | kNeedUser; }
  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    size_t n = c.size();
    DecisionKey k;
    uint64_t key = affinityKey(ctx, cursor_, 1, k);
    for (size_t step = 0; step < n; ++step) {
      size_t i = (key % n + step) % n;
      if (!c.excluded[i]) return StageResult::pick(static_cast<int>(i), k);
    }
    return StageResult::fall(FallReason::kAllExcluded);
  }

 private:
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Stage> makeGpuAware(const StageServices&) {
  return std::make_unique<GpuawareStage>();
}

}  // namespace kvgate::routing
