// prefix: the share of the prompt the candidate's cache holds, overlap / prompt blocks (a cut
// tail counts as uncached), 0 for an empty prompt. llm-d's prefix-cache scorer scores the same
// ratio. No parameters.
//
// prefix_minmax: the matched blocks normalized min-max across the candidates,
// (m - min) / (max - min); 1 for all when equal, 0 for all when nobody matches. llm-d's precise
// prefix-cache scorer (and our llm-d law's prefix term). No parameters.
#include <algorithm>
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class PrefixScorer : public Scorer {
 public:
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    for (size_t i = 0; i < r.c.size(); ++i)
      if (keep[i])
        out[i] = r.prompt_blocks == 0
                     ? 0
                     : std::min(1.0, double(r.c[i].overlap) / double(r.prompt_blocks));
  }
};

class PrefixMinMaxScorer : public Scorer {
 public:
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    uint32_t top = 0;
    for (size_t i = 0; i < r.c.size(); ++i)
      if (keep[i]) top = std::max(top, r.c[i].overlap);
    if (top == 0) {
      for (size_t i = 0; i < r.c.size(); ++i)
        if (keep[i]) out[i] = 0;
      return;
    }
    minMax(keep, out, [&](size_t i) { return double(r.c[i].overlap); }, false);
  }
};

}  // namespace

std::unique_ptr<Scorer> makePrefixScorer(const config::ScoringPart&) {
  return std::make_unique<PrefixScorer>();
}
std::unique_ptr<Scorer> makePrefixMinMaxScorer(const config::ScoringPart&) {
  return std::make_unique<PrefixMinMaxScorer>();
}

}  // namespace kvgate::routing::scoring
