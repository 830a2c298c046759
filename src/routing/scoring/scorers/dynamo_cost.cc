// dynamo_cost: NVIDIA Dynamo's KV router cost as a score (stages/selection_law.h, the dynamo
// law, prefill_load_scale 1, overlap credit 1): cost_i = uncached_i + active_i, active_i the
// distinct blocks in flight there with this prompt's added (Dynamo's ActiveSequences), normalized
// min-max and inverted.
// dynamo_v1_cost: Dynamo 1.x's (the dynamo-v1 law): cost_i = pending_i + uncached_i + active_i,
// its active prefill being the uncached blocks of streams sent there not yet started (on P/D
// rules: of prefill legs not yet answered).
// Both read the active blocks: a profile naming them has the data plane track each request's
// chain on its endpoint, as the dynamo laws do. No parameters.
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class DynamoCostScorer : public Scorer {
 public:
  explicit DynamoCostScorer(bool active_prefill) : active_prefill_(active_prefill) {}
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    minMax(
        keep, out,
        [&](size_t i) {
          return (active_prefill_ ? double(r.c[i].pending_blocks) : 0.0) + double(r.uncached(i)) +
                 double(r.c[i].active_blocks);
        },
        true);
  }

 private:
  bool active_prefill_;
};

}  // namespace

std::unique_ptr<Scorer> makeDynamoCostScorer(const config::ScoringPart&) {
  return std::make_unique<DynamoCostScorer>(false);
}

std::unique_ptr<Scorer> makeDynamoV1CostScorer(const config::ScoringPart&) {
  return std::make_unique<DynamoCostScorer>(true);
}

}  // namespace kvgate::routing::scoring
