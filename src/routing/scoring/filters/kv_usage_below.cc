// kv_usage_below: drop the candidates whose engine reports a KV-cache usage above `threshold`
// (0..1, default 0.95; vllm:kv_cache_usage_perc and its peers from /metrics), so a nearly full
// cache is not sent a prompt that would evict what others need. A candidate whose usage is
// unknown is kept; when every candidate is above, the profile keeps them all.
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class KvUsageBelowFilter : public Filter {
 public:
  explicit KvUsageBelowFilter(double threshold) : threshold_(threshold) {}
  void apply(const ScoringRequest& r, std::span<uint8_t> keep) const override {
    for (size_t i = 0; i < r.c.size(); ++i)
      if (r.c[i].kv_usage >= 0 && r.c[i].kv_usage > threshold_) keep[i] = 0;
  }

 private:
  double threshold_;
};

}  // namespace

std::unique_ptr<Filter> makeKvUsageBelowFilter(const config::ScoringPart& p) {
  return std::make_unique<KvUsageBelowFilter>(p.param("threshold"));
}

}  // namespace kvgate::routing::scoring
