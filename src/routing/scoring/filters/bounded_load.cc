// bounded_load: the seed's capacity-weighted bounded load as a filter (stages/selection_law.h,
// the hard, adaptive and taper laws): keep the candidates under their cap,
//   cap_i = ceil(f x L x capacity_i / C),
// L the candidates' in-flight requests plus this one, C their total KV capacity (unknown capacity
// = the mean of the known ones, or 1), over every candidate the stage passes (a filter before it
// included). The factor f by `shape`: 0 fixed, f = factorPct / 100 (100..300, default 175: the
// hard law's LOXILB_KV_MEAN_LOAD_FACTOR); 1 the seed's adaptive law, f = clamp(175 + 125 x
// (L' - 16) / 10, 175, 300) / 100 with L' the loads without this request; 2 taper, f = clamp(3.0 -
// 1.75 x (m - 2) / 14, 1.25, 3.0) with m = L / candidates. Some candidate is always under its cap
// (the caps sum to at least f x L > the loads), so as the first filter it never empties the set
// (after another filter it may drop every candidate left: the profile then undoes it, and the
// cap is lost for that decision).
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
    const FleetTotals t = fleetTotals(c);
    const double total = t.load_sum + 1;
    const double f = shape_ == 1   ? adaptiveCapFactor(t.load_sum)
                     : shape_ == 2 ? taperCapFactor(total, c.size())
                                   : factor_pct_ / 100.0;
    for (size_t i = 0; i < c.size(); ++i) {
      // (ceil of a product that is an integer in exact arithmetic: no float error rounded up)
      const double cap = std::ceil(f * total * t.capacity(c[i]) / t.cap_total - 1e-9);
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
