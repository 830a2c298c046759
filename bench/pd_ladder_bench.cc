// The P/D ladder's decision cost (issue 12 §5), Google Benchmark. Goal: the ladder adds at most
// 10 us p99 over the single-pool path, tokenization excluded.
//  - BM_Decision/pd:1: a P/D rule's whole pick as the data plane makes it: the prefill pipeline
//    (session -> prefix_trie -> kv_exact -> min_load) over 8 prefill endpoints, the decode pick
//    (min_load over 4 decode endpoints) and the session pin; 1024 conversations whose prompts
//    (16 KiB rendered each, the trie's most: 64 chunks) were routed before, so Tier 0 and Tier 1
//    look up and insert for real. Cycles through the conversations, half of the requests without
//    a conversation key (they go on to the trie).
//  - BM_Decision/pd:0: the single-pool path on the same requests: kv_exact -> lc (sel 4).
// kv_exact runs without a KV index in both (it falls through at once), so the difference is the
// ladder's own cost; its scoring is measured by kv_index_bench (BM_Score). Reports p50 and p99
// per decision. Run: build/pd_ladder_bench (docs/benchmarks.md has the figures).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "routing/pipeline.h"
#include "routing/stages/pd_ladder.h"
#include "routing/stages/prefix_trie.h"
#include "routing/stages/session_table.h"

namespace {

using namespace kvgate;
using namespace kvgate::routing;

struct Setup {
  const common::SteadyClock& clock = common::SteadyClock::instance();
  config::RuleSpec rule;
  std::vector<PoolEndpoint> eps;
  std::shared_ptr<SessionTable> sessions = std::make_shared<SessionTable>();
  std::shared_ptr<PrefixTrie> trie = std::make_shared<PrefixTrie>();
  std::unique_ptr<Pipeline> prefill, decode, single;
  std::vector<RequestFacts> facts;
  std::vector<bool> pmask, dmask, smask;

  Setup() {
    rule.cb_enable = true;
    rule.service_args = {
        {"pd_disagg_mode", true}, {"pd_cache_aware_mode", true}, {"kvExactMode", 1}};
    for (int i = 0; i < 12; ++i) {
      PoolEndpoint p;
      p.state = std::make_shared<endpoints::EndpointState>(
          static_cast<endpoints::EndpointId>(i + 1), "10.0.0." + std::to_string(i + 1), 8000,
          clock);
      p.role = i < 8 ? 1 : 2;
      p.state->active = i % 3;  // a little load, ties included
      eps.push_back(p);
    }
    StageServices s{clock, rule, eps};
    s.sessions = sessions.get();
    s.trie = trie.get();
    prefill = *Pipeline::build({"session", "prefix_trie", "kv_exact", "min_load"}, s,
                               std::make_shared<PipelineStats>());
    decode = *Pipeline::build({"min_load"}, s, std::make_shared<PipelineStats>());
    single = *Pipeline::build({"kv_exact", "lc"}, s, std::make_shared<PipelineStats>());
    for (int c = 0; c < 1024; ++c) {
      RequestFacts f;
      f.parsed = f.has_prompt = true;
      f.model = "m";
      f.prompt_prefix = "system: you are a helpful assistant of tenant " + std::to_string(c % 16);
      while (f.prompt_prefix.size() < kTrieRenderBytes)
        f.prompt_prefix += " conversation " + std::to_string(c) + " turn text";
      f.prompt_prefix.resize(kTrieRenderBytes);
      f.prompt_render_total = f.prompt_prefix.size() * 2;
      facts.push_back(std::move(f));
    }
    for (size_t i = 0; i < eps.size(); ++i) {
      pmask.push_back(eps[i].role != 1);
      dmask.push_back(eps[i].role != 2);
      smask.push_back(false);
    }
  }
};

void BM_Decision(benchmark::State& state) {
  static Setup* s = new Setup();
  const bool pd = state.range(0) == 1;
  std::vector<double> ns;
  ns.reserve(1 << 20);
  uint64_t run = 0;
  std::vector<bool> ex, dex;
  CycleState cycle;  // the connection's, reused request after request
  for (auto _ : state) {
    const size_t c = run % s->facts.size();
    RequestContext ctx;
    ctx.facts = &s->facts[c];
    ++run;
    cycle.endRequest();
    ctx.cycle = &cycle;
    if (run % 2 == 0) ctx.conversation_key = 0x9E3779B97F4A7C15ULL * (c + 1);
    const auto t0 = std::chrono::steady_clock::now();
    if (pd) {
      ex = s->pmask;  // the data plane's masks (health, role)
      dex = s->dmask;
      CandidateSet pc{s->eps, ex};
      Decision d = s->prefill->run(ctx, pc);
      CandidateSet dc{s->eps, dex};
      Decision dd = d.peer >= 0 ? d : s->decode->run(ctx, dc);
      if (ctx.conversation_key)
        s->sessions->pin(*ctx.conversation_key,
                         {s->eps[static_cast<size_t>(d.index)].state->id,
                          s->eps[static_cast<size_t>(d.peer >= 0 ? d.peer : dd.index)].state->id},
                         s->clock.nowNs());
      benchmark::DoNotOptimize(dd);
    } else {
      ex = s->smask;
      CandidateSet sc{s->eps, ex};
      Decision d = s->single->run(ctx, sc);
      benchmark::DoNotOptimize(d);
    }
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  state.counters["p50_us"] = ns[ns.size() / 2] / 1000;
  state.counters["p99_us"] = ns[ns.size() * 99 / 100] / 1000;
}
BENCHMARK(BM_Decision)->ArgName("pd")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
