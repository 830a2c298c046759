// load: this gateway's in-flight requests on the candidate, normalized min-max and inverted:
// (max - l) / (max - min), 1 for all when equal. The least-connections signal as a score.
// No parameters.
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class LoadScorer : public Scorer {
 public:
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    minMax(keep, out, [&](size_t i) { return double(r.c[i].load); }, true);
  }
};

}  // namespace

std::unique_ptr<Scorer> makeLoadScorer(const config::ScoringPart&) {
  return std::make_unique<LoadScorer>();
}

}  // namespace kvgate::routing::scoring
