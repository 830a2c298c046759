// random (no sel number; rule field `selector: "random"`): a uniformly random non-excluded
// endpoint, the baseline policy of every published routing comparison (llm-d, SGLang). Each
// data-plane thread draws from its own splitmix64 stream (seeded from a global counter), so
// threads never contend. Falls through only when every endpoint is excluded. Knobs: none.
#include <atomic>

#include "common/splitmix.h"
#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

uint64_t nextRandom() {
  static std::atomic<uint64_t> seeds{0x6b76676174652d72ULL};
  thread_local common::SplitMix64 rng{
      seeds.fetch_add(0x9E3779B97F4A7C15ULL, std::memory_order_relaxed)};
  return rng.next();
}

class RandomStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    size_t left = 0;
    for (bool x : c.excluded) left += x ? 0 : 1;
    if (left == 0) return StageResult::fall(FallReason::kAllExcluded);
    size_t k = nextRandom() % left;  // the k-th non-excluded endpoint
    for (size_t i = 0; i < c.size(); ++i)
      if (!c.excluded[i] && k-- == 0) return StageResult::pick(static_cast<int>(i));
    return StageResult::fall(FallReason::kAllExcluded);
  }
};

}  // namespace

std::unique_ptr<Stage> makeRandom(const StageServices&) { return std::make_unique<RandomStage>(); }

}  // namespace kvgate::routing
