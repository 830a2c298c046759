// persist (sel 3): session stickiness on a consistent-hash ring.
//
// Algorithm: the session value named by `session_header_name` (a header name, `cookie:NAME` or
// `query:NAME`; the source IP when it is empty or the request lacks the value) is hashed onto a
// ring of 256 points per endpoint; the first endpoint clockwise that is not excluded serves it.
// No load bound: stickiness wins over balance. A pool change moves only the sessions of the
// endpoints that changed. Knob: session_header_name.
#include "routing/selectors/hash_ring.h"
#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class PersistStage : public Stage {
 public:
  explicit PersistStage(const std::vector<PoolEndpoint>& eps)
      : ring_(eps, std::vector<int>(eps.size(), 256)) {}
  uint32_t needs() const override { return kNeedSession | kNeedSource; }
  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    if (ring_.size() == 0) return StageResult::fall(FallReason::kEmptyPool);
    uint64_t key = ctx.session_key ? *ctx.session_key : ctx.source_key;
    DecisionKey k = ctx.session_key ? DecisionKey::kSession : DecisionKey::kSource;
    size_t start = ring_.lowerBound(key);
    for (size_t step = 0; step < ring_.size(); ++step) {
      int i = ring_.endpointAt(start + step);
      if (!c.excluded[static_cast<size_t>(i)]) return StageResult::pick(i, k);
    }
    return StageResult::fall(FallReason::kAllExcluded);
  }

 private:
  HashRing ring_;
};

}  // namespace

std::unique_ptr<Stage> makePersist(const StageServices& s) {
  return std::make_unique<PersistStage>(s.endpoints);
}

}  // namespace kvgate::routing
