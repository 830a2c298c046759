// lc (sel 4) least connections: the lowest in-flight count (this gateway's view, counted from the
// moment of each pick), ties broken round-robin so equal endpoints share the load. Falls through
// when every endpoint is excluded. Knobs: none.
#include <atomic>

#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class LcStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    size_t n = c.size();
    uint64_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
    int best = -1;
    int64_t best_load = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t idx = (start + i) % n;
      if (c.excluded[idx]) continue;
      int64_t load = c.endpoints[idx].state->active.load(std::memory_order_relaxed);
      if (best < 0 || load < best_load) {
        best = static_cast<int>(idx);
        best_load = load;
      }
    }
    return best < 0 ? StageResult::fall(FallReason::kAllExcluded) : StageResult::pick(best);
  }

 private:
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Stage> makeLeastConnections(const StageServices&) {
  return std::make_unique<LcStage>();
}

}  // namespace kvgate::routing
