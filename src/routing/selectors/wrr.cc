// wrr (sel 2) weighted round-robin: a smooth interleaved schedule (nginx's smooth WRR, computed
// once per snapshot) walked by an atomic cursor; weight 0 takes no traffic unless every weight
// is 0 (then all count as 1). Falls through when every weighted endpoint is excluded.
// Knobs: the endpoint weights.
#include <atomic>

#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

class WrrStage : public Stage {
 public:
  explicit WrrStage(const std::vector<PoolEndpoint>& eps) {
    std::vector<int> w;
    for (auto& e : eps) w.push_back(e.weight);
    schedule_ = smoothWrrSchedule(w);
  }
  StageResult evaluate(const RequestContext&, CandidateSet& c) override {
    if (schedule_.empty()) return StageResult::fall(FallReason::kEmptyPool);
    uint64_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < schedule_.size(); ++i) {
      int idx = schedule_[(start + i) % schedule_.size()];
      if (!c.excluded[static_cast<size_t>(idx)]) return StageResult::pick(idx);
    }
    return StageResult::fall(FallReason::kAllExcluded);
  }

 private:
  std::vector<int> schedule_;
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::vector<int> smoothWrrSchedule(const std::vector<int>& weights) {
  std::vector<int> w = weights;
  bool all_zero = true;
  for (int x : w) all_zero &= x == 0;
  if (all_zero)
    for (int& x : w) x = 1;
  int total = 0;
  for (int x : w) total += x;
  std::vector<int> current(w.size(), 0), out;
  out.reserve(static_cast<size_t>(total));
  for (int step = 0; step < total; ++step) {
    int best = -1;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) continue;
      current[i] += w[i];
      if (best < 0 || current[i] > current[static_cast<size_t>(best)]) best = static_cast<int>(i);
    }
    current[static_cast<size_t>(best)] -= total;
    out.push_back(best);
  }
  return out;
}

std::unique_ptr<Stage> makeWeightedRoundRobin(const StageServices& s) {
  return std::make_unique<WrrStage>(s.endpoints);
}

}  // namespace kvgate::routing
