#include "routing/selectors/selector.h"

#include "routing/selectors/key_selectors.h"

namespace kvgate::routing {
namespace {

class RoundRobin : public Selector {
 public:
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
           const RequestContext&, PickInfo&) override {
    size_t n = eps.size();
    if (n == 0) return -1;
    uint64_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      size_t idx = (start + i) % n;
      if (!excluded[idx]) return static_cast<int>(idx);
    }
    return -1;
  }

 private:
  std::atomic<uint64_t> cursor_{0};
};

class WeightedRoundRobin : public Selector {
 public:
  explicit WeightedRoundRobin(const std::vector<PoolEndpoint>& eps) {
    std::vector<int> w;
    for (auto& e : eps) w.push_back(e.weight);
    schedule_ = smoothWrrSchedule(w);
  }
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
           const RequestContext&, PickInfo&) override {
    if (schedule_.empty()) return -1;
    uint64_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < schedule_.size(); ++i) {
      int idx = schedule_[(start + i) % schedule_.size()];
      if (!excluded[static_cast<size_t>(idx)]) return idx;
    }
    return -1;  // every weighted endpoint excluded (weight-0 ones never take traffic)
  }

 private:
  std::vector<int> schedule_;
  std::atomic<uint64_t> cursor_{0};
};

class LeastConnections : public Selector {
 public:
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
           const RequestContext&, PickInfo&) override {
    size_t n = eps.size();
    if (n == 0) return -1;
    uint64_t start = cursor_.fetch_add(1, std::memory_order_relaxed);
    int best = -1;
    int64_t best_load = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t idx = (start + i) % n;
      if (excluded[idx]) continue;
      int64_t load = eps[idx].state->active.load(std::memory_order_relaxed);
      if (best < 0 || load < best_load) {
        best = static_cast<int>(idx);
        best_load = load;
      }
    }
    return best;
  }

 private:
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

std::unique_ptr<Selector> Selector::create(int sel, const std::vector<PoolEndpoint>& eps) {
  switch (sel) {
    case 0:
      return std::make_unique<RoundRobin>();
    case 2:
      return std::make_unique<WeightedRoundRobin>(eps);
    case 4:
      return std::make_unique<LeastConnections>();
    case 1:
      return makeSourceHash();
    case 3:
      return makePersist(eps);
    case 8:
      return makeChwbl(eps, /*weighted=*/false);
    case 9:
      return makeGpuAware();
    case 10:
      return makeChwbl(eps, /*weighted=*/true);
    default:
      return nullptr;
  }
}

}  // namespace kvgate::routing
