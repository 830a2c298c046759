// queue: the engine's waiting requests (vllm:num_requests_waiting and its peers, scraped from
// /metrics), normalized min-max and inverted across the candidates whose count is known:
// (max - w) / (max - min); 1 for a candidate whose count is unknown, and for all when the known
// counts are equal. llm-d's queue scorer. No parameters.
#include <algorithm>
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class QueueScorer : public Scorer {
 public:
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    int64_t lo = -1, hi = -1;
    for (size_t i = 0; i < r.c.size(); ++i) {
      if (!keep[i] || r.c[i].waiting < 0) continue;
      lo = lo < 0 ? r.c[i].waiting : std::min(lo, r.c[i].waiting);
      hi = std::max(hi, r.c[i].waiting);
    }
    for (size_t i = 0; i < r.c.size(); ++i) {
      if (!keep[i]) continue;
      const int64_t w = r.c[i].waiting;
      out[i] = w < 0 || hi <= lo ? 1.0 : double(hi - w) / double(hi - lo);
    }
  }
};

}  // namespace

std::unique_ptr<Scorer> makeQueueScorer(const config::ScoringPart&) {
  return std::make_unique<QueueScorer>();
}

}  // namespace kvgate::routing::scoring
