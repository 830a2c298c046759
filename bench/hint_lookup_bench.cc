// LookupRoute's decision in-process (no gRPC): an index of 1M blocks over 16 replicas (chains of
// 512 blocks, each chain reported by one replica), a lookup walks a whole 512-block chain: the
// worst case of the leading-run walk. Figures in docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <random>

#include "hints/hint_index.h"
#include "hints/lookup.h"

namespace {

using namespace kvgate::hints;

std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[size_t(i)] = static_cast<char>(v & 0xff);
  return s;
}

struct World {
  kvgate::common::ManualClock clock;
  HintIndex index{clock, CachePolicy{}};
  std::vector<std::vector<std::string>> chains;
  World() {
    std::mt19937_64 rng(42);
    const int n_chains = 1'000'000 / 512;
    chains.resize(n_chains);
    for (int c = 0; c < n_chains; ++c) {
      UpdateIn u = makeUpdate("replica-" + std::to_string(c % 16), "m", "t", "vllm");
      PrefixIn p;
      for (int b = 0; b < 512; ++b) {
        chains[c].push_back(be8(rng() | 1));
        p.block_hashes.push_back(chains[c].back());
        p.block_token_counts.push_back(16);
      }
      u.prefixes.push_back(std::move(p));
      index.report(u);
    }
  }
};

World& world() {
  static World w;
  return w;
}

void BM_LookupChain512(benchmark::State& state) {
  World& w = world();
  std::mt19937_64 rng(7);
  std::vector<std::string_view> views;
  std::vector<int32_t> counts(512, 16);
  for (auto _ : state) {
    const auto& c = w.chains[rng() % w.chains.size()];
    views.assign(c.begin(), c.end());
    LookupRequest q;
    q.model = "m", q.tenant = "t", q.scheme = "vllm";
    q.block_hashes = views.data();
    q.n_blocks = views.size();
    q.block_token_counts = counts.data();
    q.n_counts = counts.size();
    LookupOutcome o = lookupRoute(w.index, q, nullptr, 0);
    if (o.reason != Reason::kPrefixMatch) state.SkipWithError("not a prefix match");
    benchmark::DoNotOptimize(o);
  }
  state.counters["holdings"] = double(w.index.holdings());
  state.counters["bytes_per_block"] = double(w.index.memoryBytes()) / double(w.index.holdings());
}
BENCHMARK(BM_LookupChain512)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
