// The choice among 16 candidates, given their signals (overlap, load, capacity, queue, KV usage,
// queued prefill): a selection law in one formula (stages/selection_law.cc) against the same
// policy composed of a scoring profile's parts (routing/scoring/), and a five-part custom
// profile. What the framework costs per decision; the overlap walk over the index (kv_index_bench
// BM_Score) and the chain come before either and are the same for both.
//   build/scoring_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <vector>

#include "common/splitmix.h"
#include "config/scoring_profile.h"
#include "routing/scoring/profile.h"

namespace kvgate::routing {
namespace {

// 64 fleets of 16 candidates with random signals, cycled so no branch pattern is learned.
const std::vector<std::vector<LawCandidate>>& fleets() {
  static const auto* f = [] {
    auto* v = new std::vector<std::vector<LawCandidate>>(64, std::vector<LawCandidate>(16));
    common::SplitMix64 rng{7};
    for (auto& fleet : *v)
      for (auto& x : fleet) {
        x.overlap = static_cast<uint32_t>(rng.next() % 513);
        x.load = static_cast<uint32_t>(rng.next() % 64);
        x.capacity = 20000 + static_cast<double>(rng.next() % 20000);
        x.waiting = static_cast<int64_t>(rng.next() % 32);
        x.kv_usage = rng.uniform();
        x.pending_blocks = rng.next() % 4096;
      }
    return v;
  }();
  return *f;
}

LawParams params(uint64_t k) {
  LawParams p;
  p.prompt_blocks = 512;  // an 8k-token prompt
  p.rotate = k;
  return p;
}

void BM_Law(benchmark::State& state) {
  const LawMode mode = state.range(0) == 0   ? LawMode::kLlmdSticky
                       : state.range(0) == 1 ? LawMode::kLlmd
                                             : LawMode::kPredict;
  uint64_t k = 0;
  for (auto _ : state) {
    LawParams p = params(k);
    p.mode = mode;
    benchmark::DoNotOptimize(applyLaw(fleets()[k % 64], p));
    ++k;
  }
}
BENCHMARK(BM_Law)->ArgName("llmd_sticky0_llmd1_predict2")->Arg(0)->Arg(1)->Arg(2);

void BM_Profile(benchmark::State& state) {
  const nlohmann::json custom = nlohmann::json::parse(R"({
    "filters": [{"name": "kv_usage_below", "threshold": 0.9}, {"name": "prefix_affinity"}],
    "scorers": [{"name": "prefix", "weight": 3}, {"name": "load"}, {"name": "queue"}]})");
  const nlohmann::json which = state.range(0) == 0   ? nlohmann::json("llm-d-sticky")
                               : state.range(0) == 1 ? nlohmann::json("llm-d")
                               : state.range(0) == 2 ? nlohmann::json("predict")
                                                     : custom;
  auto spec = config::parseScoringProfile(which, "bench");
  auto profile = scoring::ScoringProfile::build(*spec);
  uint64_t k = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize((*profile)->pick(fleets()[k % 64], params(k)));
    ++k;
  }
}
BENCHMARK(BM_Profile)
    ->ArgName("llmd_sticky0_llmd1_predict2_custom3")
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3);

}  // namespace
}  // namespace kvgate::routing

BENCHMARK_MAIN();
