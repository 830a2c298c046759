// prefix_affinity: keep the candidates that hold at least `threshold` of the prompt (overlap >=
// threshold x prompt blocks, default 0.8) and whose token load (queued uncached prefill plus this
// request's, as the token_load scorer counts it) is at most tau. tau is llm-d's saturation bound,
// peak prefill throughput x max TTFT penalty: with `tauSeconds` > 0 (the penalty), the candidate's
// prefill rate estimated online (endpoints/prefill_rate.h) x tauSeconds once a rate is known;
// else `tauTokens` (default 286,720: llm-d's example, 20,480 tokens/s x 14 s). When none is kept,
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
  PrefixAffinityFilter(double threshold, double tau_tokens, double tau_seconds)
      : threshold_(threshold), tau_tokens_(tau_tokens), tau_seconds_(tau_seconds) {}
  void apply(const ScoringRequest& r, std::span<uint8_t> keep) const override {
    const double block = double(std::max<uint32_t>(1, r.block_tokens));
    for (size_t i = 0; i < r.c.size(); ++i) {
      const double rate = r.c[i].prefill_rate;
      const double tau =
          (tau_seconds_ > 0 && rate > 0 ? rate * tau_seconds_ : tau_tokens_) / block;  // blocks
      const double token_load = double(r.c[i].pending_blocks) + double(r.uncached(i));
      if (r.prompt_blocks == 0 ||
          double(r.c[i].overlap) < threshold_ * double(r.prompt_blocks) || token_load > tau)
        keep[i] = 0;
    }
  }

 private:
  double threshold_, tau_tokens_, tau_seconds_;
};

}  // namespace

std::unique_ptr<Filter> makePrefixAffinityFilter(const config::ScoringPart& p) {
  return std::make_unique<PrefixAffinityFilter>(p.param("threshold"), p.param("tauTokens"),
                                                p.param("tauSeconds"));
}

}  // namespace kvgate::routing::scoring
