// bounded_load: the seed's capacity-weighted bounded load as a filter (stages/selection_law.h,
// the hard, adaptive and taper laws): keep the candidates under their cap,
//   cap_i = ceil(f x L x capacity_i / C),
// L the candidates' in-flight requests plus this one, C their total KV capacity (unknown capacity
// = the mean of the known ones, or 1), over every candidate the stage passes (a filter before it
// included). The factor f by `shape`: 0 fixed, f = factorPct / 100 (100..300, default 175: the
// hard law's LOXILB_KV_MEAN_LOAD_FACTOR); 1 the seed's adaptive law, f = clamp(175 + 125 x
// (L' - 16) / 10, 175, 300) / 100 with L' the loads without this request; 2 taper, f = clamp(3.0 -
// 1.75 x (m - 2) / 14, 1.25, 3.0) with m = L / candidates. Some candidate is always under its cap
// (the caps sum to at least f x L > the loads), so the filter never empties the set.
// Followed by the prefix scorer this is the law with spill relief (single-pool rules' default):
// the most affine candidate under its cap, and when every holder is over its cap the least
// loaded under-cap candidate (the picker's tie-break: less load).
#include <algorithm>
#include <cmath>
#include <memory>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class BoundedLoadFilter : public Filter {
 public:
  BoundedLoadFilter(double factor_pct, int shape) : factor_pct_(factor_pct), shape_(shape) {}
  void apply(const ScoringRequest& r, std::span<uint8_t> keep) const override {
    const auto& c = r.c;
    if (c.empty()) return;
    double load_sum = 0, cap_known = 0, known = 0;
    for (const auto& x : c) {
      load_sum += x.load;
      if (x.capacity > 0) {
        cap_known += x.capacity;
        ++known;
      }
    }
    const double total = load_sum + 1;
    const double cap_default = known > 0 ? cap_known / known : 1.0;
    auto capacity = [&](const LawCandidate& x) {
      return x.capacity > 0 ? x.capacity : cap_default;
    };
    double cap_total = 0;
    for (const auto& x : c) cap_total += capacity(x);
    double f = factor_pct_ / 100.0;
    if (shape_ == 1)
      f = std::clamp(175 + 125 * (load_sum - 16) / 10, 175.0, 300.0) / 100.0;
    else if (shape_ == 2)
      f = std::clamp(3.0 - 1.75 * (total / static_cast<double>(c.size()) - 2) / 14, 1.25, 3.0);
    for (size_t i = 0; i < c.size(); ++i) {
      // (ceil of a product that is an integer in exact arithmetic: no float error rounded up)
      const double cap = std::ceil(f * total * capacity(c[i]) / cap_total - 1e-9);
      if (!(c[i].load < cap)) keep[i] = 0;
    }
  }

 private:
  double factor_pct_;
  int shape_;
};

}  // namespace

std::unique_ptr<Filter> makeBoundedLoadFilter(const config::ScoringPart& p) {
  return std::make_unique<BoundedLoadFilter>(p.param("factorPct"),
                                             static_cast<int>(p.param("shape")));
}

}  // namespace kvgate::routing::scoring
