// rr (sel 0) round-robin: an atomic cursor modulo the pool size; excluded endpoints are skipped.
// Falls through only when every endpoint is excluded. Knobs: none.
#include <atomic>

#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class RrStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    size_t n = c.size();
    uint64_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      size_t idx = (start + i) % n;
      if (!c.excluded[idx]) return StageResult::pick(static_cast<int>(idx));
    }
    return StageResult::fall(FallReason::kAllExcluded);
  }

 private:
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Stage> makeRoundRobin(const StageServices&) { return std::make_unique<RrStage>(); }

}  // namespace kvgate::routing
