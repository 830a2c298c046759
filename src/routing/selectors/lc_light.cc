// lc_light (rule field `selector: "lc_light"`) least connections while the pool is lightly
// loaded, round-robin otherwise.
//
// Algorithm: over the endpoints not excluded, the mean in-flight count (this gateway's view,
// counted from the moment of each pick). Below the threshold, the lowest in-flight count wins
// (ties broken by a rotating start, as lc); at or above it, the next endpoint in rotation wins
// (as rr). Falls through only when every endpoint is excluded.
//
// Why: behind Tier 1.5 (kvExactMode 3) this stage places what the KV index does not: the first
// request of a prefix nobody holds, and the hard law's spills. That placement is also where the
// prefix will live. At low load what counts is the request's own wait: the least-loaded endpoint
// is the one not busy with another's full prefill. Near saturation what counts is how evenly the
// prefixes' homes are spread: rotation gives each endpoint the same number of new prefixes, while
// least connections follows the noise of the moment and unbalances the homes for good
// (docs/benchmarks.md, "misses placed by least connections").
//
// Knob: env LOXILB_LC_LIGHT_BELOW, the threshold as mean in-flight requests per endpoint x 100
// (0..100000, default 400: least connections while fewer than 4 requests per endpoint are in
// flight; 0 = always round-robin). Measured on GSP (docs/benchmarks.md, "lc_light"): 400 closes
// the low-load gap behind the soft law, 200 does not (the fleet is rarely under 2 per endpoint).
#include <atomic>

#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class LcLightStage : public Stage {
 public:
  explicit LcLightStage(int64_t below_x100) : below_x100_(below_x100) {}

  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    const size_t n = c.size();
    auto load = [&](size_t i) {
      int64_t v = c.endpoints[i].state->active.load(std::memory_order_relaxed);
      return v < 0 ? 0 : v;
    };
    int64_t total = 0, eligible = 0;
    for (size_t i = 0; i < n; ++i)
      if (!c.excluded[i]) {
        total += load(i);
        ++eligible;
      }
    if (eligible == 0) return StageResult::fall(FallReason::kAllExcluded);
    // The rotation counts eligible endpoints only, so an excluded one's turns are spread over
    // all the others rather than handed to its successor.
    uint64_t k = cursor_.fetch_add(1, std::memory_order_relaxed) % static_cast<uint64_t>(eligible);
    size_t first = 0;
    for (size_t i = 0; i < n; ++i)
      if (!c.excluded[i] && k-- == 0) {
        first = i;
        break;
      }
    // mean < below / 100  <=>  total * 100 < below * eligible
    if (total * 100 >= below_x100_ * eligible)
      return StageResult::pick(static_cast<int>(first));  // busy: the rotation (key `rr`)
    // Light: the least in flight, ties to the first from the rotation's position (key `load`).
    size_t best = first;
    int64_t best_load = load(first);
    for (size_t j = 1; j < n; ++j) {
      size_t i = (first + j) % n;
      if (c.excluded[i]) continue;
      if (int64_t l = load(i); l < best_load) {
        best = i;
        best_load = l;
      }
    }
    return StageResult::pick(static_cast<int>(best), DecisionKey::kLoad);
  }

 private:
  int64_t below_x100_;
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Stage> makeLcLight(const StageServices& s) {
  return std::make_unique<LcLightStage>(s.envOrDefault().lc_light_below_x100);
}

}  // namespace kvgate::routing
