// kv_utilization: the engine's free KV cache, 1 - usage (vllm:kv_cache_usage_perc and its peers,
// scraped from /metrics, clamped to 0..1); 1 when unknown. llm-d's kv-cache-utilization scorer.
// No parameters.
#include <algorithm>
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class KvUtilizationScorer : public Scorer {
 public:
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    for (size_t i = 0; i < r.c.size(); ++i)
      if (keep[i])
        out[i] = r.c[i].kv_usage < 0 ? 1.0 : 1.0 - std::clamp(r.c[i].kv_usage, 0.0, 1.0);
  }
};

}  // namespace

std::unique_ptr<Scorer> makeKvUtilizationScorer(const config::ScoringPart&) {
  return std::make_unique<KvUtilizationScorer>();
}

}  // namespace kvgate::routing::scoring
