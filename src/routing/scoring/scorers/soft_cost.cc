// soft_cost: the seed's soft law's cost as a score (stages/selection_law.h): cost_i = uncached_i x
// 1000 + lambda x load_i / capacity_i (capacity in KV blocks; unknown = the mean of the known
// ones, or 1; over every candidate the stage passes), normalized min-max and inverted (the
// cheapest 1). Parameters: lambda (0..1,000,000, default 32, the seed's), adaptive (0 or 1: the
// seed's adaptive-soft law, lambda = clamp(50000 + 5000 x (L - 16), 50000, 100000) with L the
// candidates' in-flight requests). With this scorer alone a profile picks as the law.
#include <algorithm>
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class SoftCostScorer : public Scorer {
 public:
  SoftCostScorer(double lambda, bool adaptive) : lambda_(lambda), adaptive_(adaptive) {}
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    const FleetTotals t = fleetTotals(r.c);
    const double lambda = adaptive_ ? adaptiveSoftLambda(t.load_sum) : lambda_;
    minMax(
        keep, out,
        [&](size_t i) {
          return double(r.uncached(i)) * 1000 + lambda * double(r.c[i].load) / t.capacity(r.c[i]);
        },
        true);
  }

 private:
  double lambda_;
  bool adaptive_;
};

}  // namespace

std::unique_ptr<Scorer> makeSoftCostScorer(const config::ScoringPart& p) {
  return std::make_unique<SoftCostScorer>(p.param("lambda"), p.param("adaptive") != 0);
}

}  // namespace kvgate::routing::scoring
