// predict: the predict law's cost as a score (stages/selection_law.h): cost_i = (uncached_i + 1)
// x (batch_i + batchOffset) / share_i, share_i = capacity_i / the kept candidates' mean capacity
// (unknown capacity = the mean of the known ones, or 1), batch_i = load_i - started_i +
// decodeWeight x started_i (started: event streams past their first token there); score_i = min
// cost / cost_i, so the cheapest candidate scores 1 and one twice as dear 0.5. Parameters:
// decodeWeight (0..1, default 0.5) and batchOffset (1..64, default 1), the law's defaults (a
// profile does not read LOXILB_KV_PREDICT_DECODE_WEIGHT_PCT or LOXILB_KV_PREDICT_BATCH_OFFSET: set
// them here), and capacityShare (1, default: divide by share_i; 0: not, LMetric's new prefill x
// batch, the lmetric law with decodeWeight 1 and batchOffset 1). predict_q: predict on a prompt
// some candidate holds; when no candidate holds any of it (every candidate the stage passes,
// filters or not, as the law and the stage judge a miss), the predict-q law's miss rule: the least
// queued prefill (pending_blocks), then, among candidates with prefill queued, the one picked
// least recently (last_pick_ns), as one min-max value (lower better); what still ties (empty
// queues among them) is the picker's (less load, then its cursor), as the law's.
#include <algorithm>
#include <memory>
#include <vector>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {
namespace {

class PredictScorer : public Scorer {
 public:
  PredictScorer(double decode_weight, double batch_offset, bool capacity_share, bool miss_queued)
      : decode_weight_(decode_weight),
        batch_offset_(batch_offset),
        capacity_share_(capacity_share),
        miss_queued_(miss_queued) {}
  void score(const ScoringRequest& r, std::span<const uint8_t> keep,
             std::span<double> out) const override {
    if (miss_queued_) {
      bool held = false;
      for (size_t i = 0; i < r.c.size() && !held; ++i) held = r.c[i].overlap > 0;
      if (!held) {
        // The queue, then, where prefill is queued, how recently the candidate was picked (its
        // rank among the kept ones: 0 the least recent), as one value: the law's order, ties
        // (empty queues among them) left to the picker.
        const size_t n = r.c.size();
        std::vector<int64_t> picks;  // the kept candidates' pick times, sorted
        picks.reserve(n);
        for (size_t i = 0; i < n; ++i)
          if (keep[i]) picks.push_back(r.c[i].last_pick_ns);
        std::sort(picks.begin(), picks.end());
        std::vector<double> value(n, 0.0);
        for (size_t i = 0; i < n; ++i) {
          const double q = double(r.c[i].pending_blocks);
          if (!keep[i] || q == 0) continue;
          const auto rank = std::lower_bound(picks.begin(), picks.end(), r.c[i].last_pick_ns) -
                            picks.begin();  // kept candidates picked before it
          value[i] = q * double(n) + double(rank);
        }
        minMax(
            keep, out, [&](size_t i) { return value[i]; }, true);
        return;
      }
    }
    double known = 0, cap_known = 0, kept = 0;
    for (size_t i = 0; i < r.c.size(); ++i) {
      if (!keep[i]) continue;
      ++kept;
      if (r.c[i].capacity > 0) {
        ++known;
        cap_known += r.c[i].capacity;
      }
    }
    if (kept == 0) return;
    const double cap_default = known > 0 ? cap_known / known : 1.0;
    auto cap = [&](size_t i) {
      return !capacity_share_ ? 1.0 : r.c[i].capacity > 0 ? r.c[i].capacity : cap_default;
    };
    double cap_total = 0;
    for (size_t i = 0; i < r.c.size(); ++i)
      if (keep[i]) cap_total += cap(i);
    const double cap_mean = cap_total / kept;
    double lo = 0;
    bool any = false;
    for (size_t i = 0; i < r.c.size(); ++i) {
      if (!keep[i]) continue;
      out[i] = (double(r.uncached(i)) + 1) *
               (predictBatch(r.c[i], decode_weight_) + batch_offset_) * cap_mean / cap(i);
      lo = any ? std::min(lo, out[i]) : out[i];
      any = true;
    }
    for (size_t i = 0; i < r.c.size(); ++i)
      if (keep[i]) out[i] = lo / out[i];
  }

 private:
  double decode_weight_;
  double batch_offset_;
  bool capacity_share_;
  bool miss_queued_;
};

}  // namespace

std::unique_ptr<Scorer> makePredictScorer(const config::ScoringPart& p) {
  return std::make_unique<PredictScorer>(p.param("decodeWeight"), p.param("batchOffset"),
                                         p.param("capacityShare") != 0, false);
}

std::unique_ptr<Scorer> makePredictQScorer(const config::ScoringPart& p) {
  return std::make_unique<PredictScorer>(p.param("decodeWeight"), p.param("batchOffset"),
                                         p.param("capacityShare") != 0, true);
}

}  // namespace kvgate::routing::scoring
