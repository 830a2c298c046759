// prefix_affinity: keep the candidates that hold at least `threshold` of the prompt (overlap >=
// threshold x prompt blocks, default 0.8) and whose token load (queued uncached prefill plus this
// request's, as the token_load scorer counts it) is at most `tauTokens` (default 286,720: llm-d's
// example of peak prefill throughput 20,480 tokens/s x a 14 s TTFT penalty). When none is kept,
// the profile keeps every candidate: affinity is dropped once the homes saturate ("sticky until
// saturated", llm-d's prefix-cache-affinity filter).
#include <algorithm>
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class PrefixAffinityFilter : public Filter {
 public:
  PrefixAffinityFilter(double threshold, double tau_tokens)
      : threshold_(threshold), tau_tokens_(tau_tokens) {}
  void apply(const ScoringRequest& r, std::span<uint8_t> keep) const override {
    const double tau = tau_tokens_ / double(std::max<uint32_t>(1, r.block_tokens));
    for (size_t i = 0; i < r.c.size(); ++i) {
      const double token_load = double(r.c[i].pending_blocks) + double(r.uncached(i));
      if (r.prompt_blocks == 0 ||
          double(r.c[i].overlap) < threshold_ * double(r.prompt_blocks) || token_load > tau)
        keep[i] = 0;
    }
  }
  bool readsPending() const override { return true; }

 private:
  double threshold_, tau_tokens_;
};

}  // namespace

std::unique_ptr<Filter> makePrefixAffinityFilter(const config::ScoringPart& p) {
  return std::make_unique<PrefixAffinityFilter>(p.param("threshold"), p.param("tauTokens"));
}

}  // namespace kvgate::routing::scoring
