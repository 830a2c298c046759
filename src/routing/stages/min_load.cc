// min_load: Tier 2 of the P/D ladder, and the decode pick (seed 000, "Tier 2 — min-load with RR
// tie-break" and "Decode selection").
//
// Algorithm: score = active + queued for each candidate left (this gateway's requests in flight
// there, counted from each pick, plus the requests the admission gate parked for it); the lowest
// score wins. Only a genuine tie consults the round-robin cursor, which then advances: it is a
// tie-breaker, not the algorithm. Falls through only when every candidate is excluded (the
// ladder's terminal tier). Knobs: none. Each pipeline has its own instance, so the decode pick
// keeps its own cursor.
#include <atomic>

#include "routing/stages/pd_ladder.h"

namespace kvgate::routing {
namespace {

class MinLoadStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    const size_t n = c.size();
    int64_t best = 0;
    size_t ties = 0;
    int first = -1;  // the first endpoint with the best score
    for (size_t i = 0; i < n; ++i) {
      if (c.excluded[i]) continue;
      const int64_t s = score(*c.endpoints[i].state);
      if (ties == 0 || s < best) {
        best = s;
        ties = 1;
        first = static_cast<int>(i);
      } else if (s == best) {
        ++ties;
      }
    }
    if (ties == 0) return StageResult::fall(FallReason::kAllExcluded);
    if (ties == 1) return StageResult::pick(first, DecisionKey::kLoad);
    // The k-th (cursor mod ties) of the tied endpoints, in pool order.
    const size_t k = cursor_.fetch_add(1, std::memory_order_relaxed) % ties;
    size_t seen = 0;
    for (size_t i = 0; i < n; ++i) {
      if (c.excluded[i] || score(*c.endpoints[i].state) != best) continue;
      if (seen++ == k) return StageResult::pick(static_cast<int>(i), DecisionKey::kRr);
    }
    // Other threads moved the loads between the two passes: the first best one.
    return StageResult::pick(first, DecisionKey::kRr);
  }

 private:
  static int64_t score(const endpoints::EndpointState& s) {
    return s.active.load(std::memory_order_relaxed) + s.queued.load(std::memory_order_relaxed);
  }
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Stage> makeMinLoad(const StageServices&) {
  return std::make_unique<MinLoadStage>();
}

}  // namespace kvgate::routing
