// token_load: the prefill a candidate has queued, this request's included: the uncached blocks
// of the streams this gateway sent there that have not started to stream (pending_blocks) plus
// this request's uncached blocks there; normalized min-max and inverted (least token load = 1,
// 1 for all when equal). llm-d's token-load scorer, in blocks. No parameters. Reading it turns
// on the data plane's queued-prefill count for the rule.
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class TokenLoadScorer : public Scorer {
 public:
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    minMax(keep, out,
           [&](size_t i) { return double(r.c[i].pending_blocks) + double(r.uncached(i)); }, true);
  }
};

}  // namespace

std::unique_ptr<Scorer> makeTokenLoadScorer(const config::ScoringPart&) {
  return std::make_unique<TokenLoadScorer>();
}

}  // namespace kvgate::routing::scoring
