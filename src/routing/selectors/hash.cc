// hash (sel 1): the client's source address picks the endpoint.
//
// Algorithm: hash(source IP) modulo the pool size; an excluded endpoint passes the request to the
// next index. No load bound and no knobs: the L4 "hash" selector of the upstream gateway, applied
// per request.
#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class HashStage : public Stage {
 public:
  uint32_t needs() const override { return kNeedSource; }
  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    size_t n = c.size();
    for (size_t step = 0; step < n; ++step) {
      size_t i = (ctx.source_key + step) % n;
      if (!c.excluded[i]) return StageResult::pick(static_cast<int>(i), DecisionKey::kSource);
    }
    return StageResult::fall(FallReason::kAllExcluded);
  }
};

}  // namespace

std::unique_ptr<Stage> makeSourceHash(const StageServices&) {
  return std::make_unique<HashStage>();
}

}  // namespace kvgate::routing
