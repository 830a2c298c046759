// ttft_cost: our ttft law's cost as a score (stages/selection_law.h), an estimated time to first
// token in prefill blocks: cost_i = pending_i + missWeight x uncached_i + loadBlocks x load_i
// (pending: the uncached blocks of streams sent there not yet started), normalized min-max and
// inverted. Parameters: missWeightPct (0..10000, default 800, the law's
// LOXILB_KV_TTFT_MISS_WEIGHT_PCT) and loadBlocks (0..1,000,000, default 2,
// LOXILB_KV_TTFT_LOAD_BLOCKS).
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class TtftCostScorer : public Scorer {
 public:
  TtftCostScorer(double miss_weight, double load_blocks)
      : miss_weight_(miss_weight), load_blocks_(load_blocks) {}
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    minMax(
        keep, out,
        [&](size_t i) {
          return double(r.c[i].pending_blocks) + miss_weight_ * double(r.uncached(i)) +
                 load_blocks_ * double(r.c[i].load);
        },
        true);
  }

 private:
  double miss_weight_, load_blocks_;
};

}  // namespace

std::unique_ptr<Scorer> makeTtftCostScorer(const config::ScoringPart& p) {
  return std::make_unique<TtftCostScorer>(p.param("missWeightPct") / 100.0, p.param("loadBlocks"));
}

}  // namespace kvgate::routing::scoring
