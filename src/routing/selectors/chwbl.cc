// chwbl (sel 8) and wrr_hash (sel 10): consistent hashing with bounded loads.
//
// Algorithm: the request's key (prefix key, else conversation key, else round-robin) is placed on
// a hash ring with kVnodes points per endpoint (wrr-hash: points proportional to the weight,
// at least one for a positive weight). Walking clockwise from the key, the first endpoint whose
// in-flight count (this gateway's view) is under its cap serves the request:
//   cap_i = ceil(kLoadFactor / 100 * (total_in_flight + 1) * share_i)
// share_i = 1/n for chwbl, weight_i / sum(weights) for wrr-hash, over the endpoints not excluded.
// Moving off the key's first (home) endpoint is a spill. Same-prefix requests therefore land on
// one endpoint until it carries 1.75x its fair share, then overflow to the ring's next endpoints.
// Knobs: kLoadFactor 175 and kVnodes 256, fixed as in the upstream gateway (its chwbl_* fields
// are stored but not applied); the prefix length K is `serve --prefix-key-bytes`.
#include <atomic>
#include <cmath>

#include "routing/selectors/hash_ring.h"
#include "routing/selectors/selectors.h"

namespace kvgate::routing {
namespace {

constexpr int kVnodes = 256;
constexpr int kLoadFactor = 175;

std::vector<int> vnodeCounts(const std::vector<PoolEndpoint>& eps, bool weighted) {
  std::vector<int> v(eps.size(), kVnodes);
  if (!weighted) return v;
  int max_w = 0;
  for (auto& e : eps) max_w = std::max<int>(max_w, e.weight);
  for (size_t i = 0; i < eps.size(); ++i) {
    if (max_w == 0) {
      v[i] = kVnodes;
    } else if (eps[i].weight == 0) {
      v[i] = 0;
    } else {
      v[i] = std::max(1, kVnodes * eps[i].weight / max_w);
    }
  }
  return v;
}

class ChwblStage : public Stage {
 public:
  ChwblStage(const std::vector<PoolEndpoint>& eps, bool weighted)
      : weighted_(weighted), ring_(eps, vnodeCounts(eps, weighted)) {}
  uint32_t needs() const override { return kNeedPromptPrefix | kNeedUser; }

  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    if (ring_.size() == 0) return StageResult::fall(FallReason::kEmptyPool);
    const auto& eps = c.endpoints;
    const auto& excluded = c.excluded;
    // No key: a golden-ratio step around the ring keeps the round-robin spread even.
    DecisionKey k;
    uint64_t key = affinityKey(ctx, cursor_, 0x9E3779B97F4A7C15ULL, k);
    // Fair shares over the endpoints that may serve this request.
    int64_t total = 0;
    double weight_sum = 0;
    for (size_t i = 0; i < eps.size(); ++i) {
      if (excluded[i] || (weighted_ && eps[i].weight == 0)) continue;
      total += eps[i].state->active.load(std::memory_order_relaxed);
      weight_sum += weighted_ ? eps[i].weight : 1.0;
    }
    if (weight_sum == 0) return StageResult::fall(FallReason::kAllExcluded);
    size_t start = ring_.lowerBound(key);
    int home = -1;
    int least = -1;
    int64_t least_load = 0;
    for (size_t step = 0; step < ring_.size(); ++step) {
      int i = ring_.endpointAt(start + step);
      if (excluded[static_cast<size_t>(i)]) continue;
      int64_t load = eps[static_cast<size_t>(i)].state->active.load(std::memory_order_relaxed);
      if (home < 0) home = i;
      if (least < 0 || load < least_load) {
        least = i;
        least_load = load;
      }
      double share = (weighted_ ? eps[static_cast<size_t>(i)].weight : 1.0) / weight_sum;
      auto cap = static_cast<int64_t>(
          std::ceil(kLoadFactor / 100.0 * static_cast<double>(total + 1) * share));
      if (load < cap) return StageResult::pick(i, k, i != home);
    }
    // Every endpoint at its cap: the least loaded one.
    if (least < 0) return StageResult::fall(FallReason::kAllExcluded);
    return StageResult::pick(least, k, least != home);
  }

 private:
  bool weighted_;
  HashRing ring_;
  std::atomic<uint64_t> cursor_{0};
};

}  // namespace

std::unique_ptr<Stage> makeChwbl(const StageServices& s) {
  return std::make_unique<ChwblStage>(s.endpoints, /*weighted=*/false);
}
std::unique_ptr<Stage> makeWrrHash(const StageServices& s) {
  return std::make_unique<ChwblStage>(s.endpoints, /*weighted=*/true);
}

}  // namespace kvgate::routing
