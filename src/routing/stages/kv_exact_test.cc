// kv_exact over a real KvIndex: the golden chain of tokens 0..63 (4 blocks of 16), three
// endpoints 10.0.0.1-3 whose publishers hold 4, 2 and 0 leading blocks; overlaps and picks
// worked by hand.
#include "routing/stages/kv_exact.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "../../../tests/support/routing_env.h"
#include "../../../tests/support/test_util.h"
#include "../../../tests/support/tiny_tokenizer.h"
#include "config/rule.h"
#include "kv/speculative.h"
#include "routing/pipeline.h"
#include "routing/stage_registry.h"
#include "tokenizer/request_tokenizer.h"

namespace kvgate::routing {
namespace {

// The chat input of a body whose "messages" is `messages` (as the facts parser converts it).
std::shared_ptr<nlohmann::ordered_json> chatInput(const std::string& messages) {
  return std::make_shared<nlohmann::ordered_json>(
      nlohmann::ordered_json::parse("{\"messages\":" + messages + "}"));
}

common::ManualClock g_clock;

struct Lookup : kv::WorkerLookup {
  kv::WorkerMap m;
  kv::AdapterSet loras;
  std::shared_ptr<const kv::WorkerMap> snapshot() const override {
    return std::make_shared<const kv::WorkerMap>(m);
  }
  std::shared_ptr<const kv::AdapterSet> adapters() const override {
    return std::make_shared<const kv::AdapterSet>(loras);
  }
};

std::vector<uint32_t> iota(uint32_t from, uint32_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

struct Fixture {
  kv::KvIndex index;
  Lookup lookup;
  std::vector<PoolEndpoint> eps;
  config::RuleSpec rule;
  std::vector<bool> excluded;
  RequestFacts facts;
  std::unique_ptr<Stage> stage;
  Fixture(KvExactOptions opts = {}) {
    kv::ApplyStats st;
    const uint32_t held[] = {4, 2, 0};
    for (int i = 0; i < 3; ++i) {
      PoolEndpoint p;
      p.state = std::make_shared<endpoints::EndpointState>(
          static_cast<endpoints::EndpointId>(i + 1), "10.0.0." + std::to_string(i + 1), 8000,
          g_clock);
      eps.push_back(p);
      int w = index.addWorker();
      lookup.m["10.0.0." + std::to_string(i + 1) + ":5557"] = {uint64_t{1} << w, 0};
      if (held[i] == 0) continue;
      engines::KvEventBatch b;
      engines::KvEvent e;
      e.block_size = 16;
      for (uint32_t k = 0; k < held[i]; ++k) e.block_hashes.push_back(100 * (i + 1) + k);
      e.token_ids = iota(0, 16 * held[i]);
      b.events.push_back(e);
      index.apply(w, b, st);
    }
    excluded.assign(3, false);
    for (int t = 0; t < 64; ++t) facts.prompt_token_ids.push_back(t);
    facts.parsed = true;
    StageServices s{g_clock, rule, eps};
    stage = makeKvExact(s, index, lookup, opts);
  }
  StageResult run() {
    RequestContext ctx;
    ctx.facts = &facts;
    CandidateSet c{eps, excluded};
    return stage->evaluate(ctx, c);
  }
};

// A request's routing context over `facts` with a chain cache, as the proxy gives it.
struct CachedCtx {
  CycleState cache;
  RequestContext ctx;
  explicit CachedCtx(const RequestFacts& f) {
    ctx.facts = &f;
    ctx.cycle = &cache;
  }
};

TEST(KvExact, TheWarmestEndpointWins) {
  Fixture f;
  auto r = f.run();
  EXPECT_EQ(r.index, 0);  // overlaps 4, 2, 0 at zero load
  EXPECT_EQ(r.key, DecisionKey::kKvOverlap);
  EXPECT_FALSE(r.spilled);
}

TEST(KvExact, AnExcludedWinnerFallsToTheNextBestOverlap) {
  Fixture f;
  f.excluded[0] = true;  // down or breaker-open: masked before the stage
  EXPECT_EQ(f.run().index, 1);
}

TEST(KvExact, ALoadedWinnerSpillsUnderTheHardLaw) {
  Fixture f;
  // Loads 3, 0, 0: L = 3 + 1 = 4, equal capacities: cap = ceil(1.75 * 4 / 3) = ceil(2.33) = 3;
  // endpoint 0 (load 3) is at its cap, endpoint 1 (overlap 2) is under: a spill to 1.
  f.eps[0].state->active.store(3);
  auto r = f.run();
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
}

TEST(KvExact, GuardsFallThroughWithTheirReasons) {
  {
    Fixture f;
    f.facts.prompt_token_ids.clear();  // no prompt at all
    EXPECT_EQ(f.run().reason, FallReason::kTextEmpty);
    f.facts.has_prompt = true;  // an empty text prompt: text_empty still
    EXPECT_EQ(f.run().reason, FallReason::kTextEmpty);
    f.facts.prompt_text = "hello";  // a text prompt without a model: model_empty comes first
    f.facts.has_model = false;
    f.facts.model.clear();
    EXPECT_EQ(f.run().reason, FallReason::kModelEmpty);
    f.facts.has_model = true;  // with a model, and no tokenizer (serve without --models-dir)
    f.facts.model = "m";
    auto r = f.run();
    EXPECT_EQ(r.index, -1);
    EXPECT_EQ(r.reason, FallReason::kTokenize);
  }
  {
    // Upstream's order: warm-up before the prompt checks (kvWarmupSec with no subscriber
    // connected that long), even for a request with no prompt at all.
    KvExactOptions o;
    o.warmup_sec = 30;
    Fixture f(o);
    f.facts.prompt_token_ids.clear();
    EXPECT_EQ(f.run().reason, FallReason::kWarmup);
  }
  {
    Fixture f;
    f.lookup.m.clear();  // no publisher followed
    EXPECT_EQ(f.run().reason, FallReason::kNoWorker);
  }
  {
    KvExactOptions o;
    o.min_match_tokens = 80;  // best overlap 4 blocks = 64 tokens < 80
    Fixture f(o);
    EXPECT_EQ(f.run().reason, FallReason::kShallow);
  }
  {
    Fixture f;
    f.facts.prompt_token_ids = {5, 6, 7};  // shorter than a block: no overlap anywhere
    EXPECT_EQ(f.run().reason, FallReason::kShallow);
  }
  {
    Fixture f;
    f.excluded.assign(3, true);
    EXPECT_EQ(f.run().reason, FallReason::kAllExcluded);
  }
  {
    KvExactOptions o;
    o.min_match_tokens = 0;  // the minimum off: a prompt nobody holds is still a miss
    Fixture f(o);
    f.facts.prompt_token_ids.assign(64, 77);
    EXPECT_EQ(f.run().reason, FallReason::kNoWorker);
  }
}

// Two endpoints on one address share a publisher key: their caches cannot be told apart, so
// neither is scored (here the only followed one was 10.0.0.1; with both at 10.0.0.1, nothing).
TEST(KvExact, EndpointsSharingAnAddressAreNotScored) {
  Fixture f;
  f.eps[1].state = std::make_shared<endpoints::EndpointState>(9, "10.0.0.1", 8001, g_clock);
  f.lookup.m.erase("10.0.0.3:5557");
  StageServices s{g_clock, f.rule, f.eps};
  f.stage = makeKvExact(s, f.index, f.lookup, {});
  EXPECT_EQ(f.run().reason, FallReason::kNoWorker);
}

TEST(KvExact, CacheSaltsArePartitions) {
  Fixture f;
  f.facts.cache_salt = "tenant-a";  // the cached blocks were stored without a salt
  EXPECT_EQ(f.run().reason, FallReason::kNoWorker);
}

// `n` decisions in a row: each one's pick and whether it was a cold-start seed.
std::pair<std::vector<int>, std::vector<bool>> runTimes(Fixture& f, int n) {
  std::pair<std::vector<int>, std::vector<bool>> out;
  for (int i = 0; i < n; ++i) {
    const auto r = f.run();
    out.first.push_back(r.index);
    out.second.push_back(r.seeded);
  }
  return out;
}

// Endpoints hold 4, 2 and 0 blocks. With min_blocks 3, endpoints 1 and 2 are cold; every 2nd
// hit goes to the lowest-index cold one (1); the others follow the law (0, the warmest).
TEST(KvExact, ColdStartSeedingDivertsEveryNthHit) {
  KvExactOptions o;
  o.coldstart_min_blocks = 3;
  o.coldstart_seed_nth = 2;
  Fixture f(o);
  const auto [picks, seeded] = runTimes(f, 4);
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(seeded, (std::vector<bool>{false, true, false, true}));
  // Endpoint 1 excluded: the next cold one (2) is seeded instead.
  f.excluded[1] = true;
  EXPECT_EQ(f.run().index, 0);
  auto r = f.run();
  EXPECT_EQ(r.index, 2);
  EXPECT_TRUE(r.seeded);
  // Nobody cold (min 0 blocks) or seeding off: never diverted.
  KvExactOptions off = o;
  off.coldstart_seed_nth = 0;
  Fixture g(off);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(g.run().index, 0);
  KvExactOptions warm = o;
  warm.coldstart_min_blocks = 0;
  Fixture h(warm);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(h.run().seeded);
}

// kvWarmupSec: until some followed candidate's subscriber has been connected that long, the
// stage misses with `warmup` (the fixture's publishers connected at t = 0).
TEST(KvExact, WarmupWaitsForAConnectedSubscriber) {
  Fixture f;
  common::ManualClock clock(1'000'000'000);  // t = 1 s
  KvExactOptions o;
  o.warmup_sec = 2;
  StageServices s{clock, f.rule, f.eps};
  f.stage = makeKvExact(s, f.index, f.lookup, o);
  EXPECT_EQ(f.run().reason, FallReason::kWarmup);
  clock.advance(std::chrono::seconds(1));  // t = 2 s: connected 2 s ago
  EXPECT_EQ(f.run().index, 0);
  // Not connected (-1) does not count as warm; one warm candidate is enough.
  for (auto& [k, p] : f.lookup.m) p.connected_ns = -1;
  EXPECT_EQ(f.run().reason, FallReason::kWarmup);
  f.lookup.m["10.0.0.3:5557"].connected_ns = 0;
  EXPECT_EQ(f.run().index, 0);  // 10.0.0.3 is warm; 10.0.0.1 still wins on overlap
  f.excluded[2] = true;         // an excluded warm candidate does not count
  EXPECT_EQ(f.run().reason, FallReason::kWarmup);
}

// A publisher breaking the declared hash contract is not scored: the next-best trusted one wins;
// when no followed candidate is trusted, the miss is `hash_contract`.
TEST(KvExact, BrokenHashContractsAreNotTrusted) {
  Fixture f;
  f.lookup.m["10.0.0.1:5557"].contract_broken = true;
  EXPECT_EQ(f.run().index, 1);
  f.lookup.m["10.0.0.2:5557"].contract_broken = true;
  f.lookup.m["10.0.0.3:5557"].contract_broken = true;
  EXPECT_EQ(f.run().reason, FallReason::kHashContract);
}

// Speculative insert through a real pipeline [kv_exact, rr]: a prompt nobody holds misses and rr
// chooses; the chain is credited to rr's choice, so the next request with that prefix follows it
// by overlap (before any KV event), until the TTL (2 s, the default) passes.
TEST(KvExact, SpeculativeInsertLetsSiblingsFollowTheFirstPick) {
  Fixture f;
  common::ManualClock clock(1'000'000'000);
  kv::SpeculativeOverlay overlay;
  StageServices s{clock, f.rule, f.eps, &f.index, &f.lookup, nullptr, &overlay};
  auto p = Pipeline::build({"kv_exact", "rr"}, s, std::make_shared<PipelineStats>());
  ASSERT_TRUE(p.has_value()) << p.error().what;
  f.facts.prompt_token_ids.clear();
  for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids.push_back(1000 + t);  // cached nowhere
  RequestContext ctx;
  ctx.facts = &f.facts;
  CandidateSet c{f.eps, f.excluded};
  Decision first = (*p)->run(ctx, c);
  ASSERT_GE(first.index, 0);
  EXPECT_EQ(first.key, DecisionKey::kRr);  // kv_exact missed: no_worker
  EXPECT_EQ(overlay.credits(), 4u);        // the 4 blocks, to rr's choice
  for (int i = 0; i < 3; ++i) {
    Decision d = (*p)->run(ctx, c);
    EXPECT_EQ(d.index, first.index);  // followed by overlap, not rr's rotation
    EXPECT_EQ(d.key, DecisionKey::kKvOverlap);
  }
  EXPECT_EQ(overlay.hits(), 12u);
  clock.advance(std::chrono::seconds(3));  // past the TTL: credits of the last pick expired too
  Decision late = (*p)->run(ctx, c);
  EXPECT_EQ(late.key, DecisionKey::kRr);
  // Without an overlay, every sibling misses.
  StageServices none{clock, f.rule, f.eps, &f.index, &f.lookup};
  auto q = Pipeline::build({"kv_exact", "rr"}, none, std::make_shared<PipelineStats>());
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ((*q)->run(ctx, c).key, DecisionKey::kRr);
  EXPECT_EQ((*q)->run(ctx, c).key, DecisionKey::kRr);
}

// LoRA: endpoint 2 (10.0.0.3) holds the prompt's 4 blocks under adapter "sql-lora". A request
// naming the adapter (as its model, or SGLang's lora_path) is scored in that partition; the base
// model's request still finds the base blocks of endpoints 0 and 1.
TEST(KvExact, AdapterRequestsAreScoredInTheAdapterPartition) {
  Fixture f;
  engines::KvEventBatch b;
  engines::KvEvent e;
  e.block_size = 16;
  e.block_hashes = {901, 902, 903, 904};
  e.token_ids = iota(0, 64);
  e.lora_name = "sql-lora";
  b.events.push_back(e);
  kv::ApplyStats st;
  const int w2 = std::countr_zero(f.lookup.m["10.0.0.3:5557"].bits);
  f.index.apply(w2, b, st);
  f.lookup.loras = {"sql-lora"};
  f.facts.has_model = true;
  f.facts.model = "sql-lora";
  EXPECT_EQ(f.run().index, 2);
  f.facts.model = "base-model";
  EXPECT_EQ(f.run().index, 0);
  f.facts.lora_adapter = "sql-lora";  // SGLang names adapters with lora_path
  EXPECT_EQ(f.run().index, 2);
  f.facts.lora_adapter = "other-lora";  // an adapter nobody caches: a miss
  EXPECT_EQ(f.run().reason, FallReason::kNoWorker);
}

// Capacity-weighted caps (hard law, factor 1.75): endpoint 0 (overlap 4) carries 1 request.
// Equal (unknown) capacities: L = 1 + 1 = 2, cap = ceil(1.75 x 2 / 3) = 2 > 1: endpoint 0 keeps it.
// Capacities 100 / 300 / 100 blocks: cap_0 = ceil(1.75 x 2 x 100 / 500) = ceil(0.7) = 1, not above
// its load: a spill to endpoint 1 (overlap 2, cap_1 = ceil(2.1) = 3).
TEST(KvExact, CapacitiesWeightTheHardLawCaps) {
  Fixture f;
  f.eps[0].state->active.store(1);
  EXPECT_EQ(f.run().index, 0);
  f.eps[0].state->kv_capacity_override.store(100);
  f.eps[1].state->kv_capacity_scraped.store(300);  // from /metrics
  f.eps[2].state->kv_capacity_override.store(100);
  auto r = f.run();
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_EQ(f.eps[1].state->kvCapacity(), 300.0);
  f.eps[1].state->kv_capacity_override.store(50);  // the override wins over the scraped value
  EXPECT_EQ(f.eps[1].state->kvCapacity(), 50.0);
}

// The ttft law reads each endpoint's queued prefill (what its leases counted) and reports the
// pick's uncached blocks for the lease to count; a prompt nobody holds is a no_worker miss.
TEST(KvExact, TtftWeighsQueuedPrefill) {
  KvExactOptions o;
  o.law.mode = LawMode::kTtft;
  o.law.ttft_miss_weight = 2;  // (default 8); 2 blocks per in-flight request
  Fixture f(o);
  // Overlaps 4, 2, 0 of 4 blocks, idle: costs 0, 4, 8: endpoint 0, nothing uncached.
  auto r = f.run();
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(r.prefill_blocks, 0u);
  EXPECT_EQ(r.matched_blocks, 4);  // all 4 of the prompt's blocks held there
  // 6 blocks queued on endpoint 0 and one request in flight: 6 + 0 + 2 = 8 > 4: endpoint 1, a
  // spill with 2 uncached blocks.
  f.eps[0].state->pending_prefill_blocks.store(6);
  f.eps[0].state->active.store(1);
  r = f.run();
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_EQ(r.prefill_blocks, 2u);
  EXPECT_EQ(r.matched_blocks, 2);  // endpoint 1 holds 2 of 4
  // A prompt nobody holds (tokens 1000..1063): the rule's fallback places it, and its 4 blocks
  // are what that pick queues (the pipeline hands them to the decision).
  for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids[t] = 1000 + t;
  r = f.run();
  EXPECT_EQ(r.index, -1);
  EXPECT_EQ(r.reason, FallReason::kNoWorker);
  EXPECT_EQ(r.prefill_blocks, 4u);
}

// The predict law (the default of kvExactMode 3 rules): new prefill x batch over every candidate
// on a prompt someone holds; a prompt nobody holds is a Tier 1.5 miss (the rule's selector).
TEST(KvExact, PredictWeighsNewPrefillByBatch) {
  KvExactOptions o;
  o.law.mode = LawMode::kPredict;
  Fixture f(o);
  // Overlaps 4, 2, 0 of 4 blocks, idle: (0 + 1) x 1, (2 + 1) x 1, (4 + 1) x 1: endpoint 0.
  EXPECT_EQ(f.run().index, 0);
  // Loads 5, 5, 0: 1 x 6 = 6, 3 x 6 = 18, 5 x 1 = 5: the cold idle endpoint, a spill (the hard
  // law keeps endpoint 0: L = 11, cap = ceil(1.75 x 11 / 3) = 7 > 5).
  f.eps[0].state->active.store(5);
  f.eps[1].state->active.store(5);
  auto r = f.run();
  EXPECT_EQ(r.index, 2);
  EXPECT_TRUE(r.spilled);
  EXPECT_EQ(r.key, DecisionKey::kKvOverlap);
  for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids[t] = 1000 + t;  // nobody holds these
  r = f.run();
  EXPECT_EQ(r.index, -1);
  EXPECT_EQ(r.reason, FallReason::kNoWorker);
}

// A token-id prompt past kv_exact's 8192-block bound: 8192 + 100 blocks; the chain covers 8192,
// the 100 blocks beyond are its tail, kept with the chain for retries, uncached everywhere.
TEST(KvExact, APromptPastTheBlockBoundKeepsItsTail) {
  KvExactOptions o;
  o.law.mode = LawMode::kPredict;
  Fixture f(o);
  f.facts.prompt_token_ids.resize((8192 + 100) * 16 + 7);  // (7 ids: not a block)
  for (size_t t = 64; t < f.facts.prompt_token_ids.size(); ++t)
    f.facts.prompt_token_ids[t] = static_cast<int64_t>(5000 + t);
  CachedCtx cc(f.facts);
  CycleState& cache = cc.cache;
  RequestContext& ctx = cc.ctx;
  CandidateSet c{f.eps, f.excluded};
  EXPECT_EQ(f.stage->evaluate(ctx, c).index, 0);
  EXPECT_EQ(cache.chain.size(), 8192u);
  EXPECT_EQ(cache.tail_blocks, 100u);
}

// A text prompt's ids, 0..63 (what the fixture's endpoints hold), counting the calls.
struct CountingTokens : PromptTokens {
  mutable int calls = 0;
  size_t cut_ids = 0;  // what the "bound" left out, as reported
  uint32_t needs() const override { return 0; }
  TokensStatus tokens(const RequestFacts&, std::vector<uint32_t>& out,
                      size_t* cut = nullptr) const override {
    ++calls;
    if (cut) *cut = cut_ids;
    out.resize(64);
    std::iota(out.begin(), out.end(), 0u);
    return TokensStatus::kOk;
  }
};

// One tokenize per request: ids already in the request's cache (the quota gate's count asked
// first) are used as they are; without them the stage tokenizes into the cache, and a retry
// reuses the chain; a failed answer in the cache is a tokenize miss without asking again.
TEST(KvExact, TheRequestsIdsAreTokenizedOnce) {
  Fixture f;
  CountingTokens tok;
  StageServices s{g_clock, f.rule, f.eps};
  s.prompt_tokens = &tok;
  auto stage = makeKvExact(s, f.index, f.lookup, {});
  RequestFacts text;
  text.parsed = true;
  text.has_model = true;
  text.model = "m";
  text.prompt_text = "sixty-four tokens";
  CachedCtx cc(text);
  CycleState& cache = cc.cache;
  RequestContext& ctx = cc.ctx;
  CandidateSet c{f.eps, f.excluded};
  // The cache holds ids 0..31 from an earlier ask: the stage scores those (2 blocks: endpoint 0
  // and 1 both hold them; 0 wins on load and index) without calling the tokenizer.
  cache.tokens.resize(32);
  std::iota(cache.tokens.begin(), cache.tokens.end(), 0u);
  cache.tokens_ready = cache.tokens_ok = true;
  EXPECT_EQ(stage->evaluate(ctx, c).index, 0);
  EXPECT_EQ(tok.calls, 0);
  EXPECT_EQ(cache.chain.size(), 2u);
  // A fresh request: the stage asks once, into the cache; its retry asks nothing.
  cache.endRequest();
  EXPECT_EQ(stage->evaluate(ctx, c).index, 0);
  EXPECT_EQ(tok.calls, 1);
  EXPECT_TRUE(cache.tokens_ready);
  EXPECT_EQ(cache.tokens.size(), 64u);
  EXPECT_EQ(cache.chain.size(), 4u);
  EXPECT_EQ(stage->evaluate(ctx, c).index, 0);
  EXPECT_EQ(tok.calls, 1);
  // The earlier ask failed (a tokenizer still loading): a tokenize miss, not a second ask.
  cache.endRequest();
  cache.tokens_ready = true;
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kTokenize);
  EXPECT_EQ(tok.calls, 1);
}

// A text prompt the tokenizer's bound cut (it reports 1,600 ids left out: 100 blocks) counts that
// tail as uncached everywhere, so a full hit on the window is not a full hit. Loads 1, 0, 5:
// without the tail (0 + 1) x 2 = 2, (2 + 1) x 1 = 3, (4 + 1) x 6 = 30: endpoint 0; with it
// (100 + 1) x 2 = 202, (102 + 1) x 1 = 103, (104 + 1) x 6 = 630: endpoint 1.
TEST(KvExact, PredictCountsWhatTheTokenizerCut) {
  Fixture f;
  CountingTokens tok;
  StageServices s{g_clock, f.rule, f.eps};
  s.prompt_tokens = &tok;
  KvExactOptions o;
  o.law.mode = LawMode::kPredict;
  auto stage = makeKvExact(s, f.index, f.lookup, o);
  RequestFacts text;
  text.parsed = true;
  text.has_model = true;
  text.model = "m";
  text.prompt_text = "a long prompt";
  f.eps[0].state->active.store(1);
  f.eps[2].state->active.store(5);
  CachedCtx cc(text);
  CycleState& cache = cc.cache;
  RequestContext& ctx = cc.ctx;
  CandidateSet c{f.eps, f.excluded};
  EXPECT_EQ(stage->evaluate(ctx, c).index, 0);
  tok.cut_ids = 1600;
  cache.endRequest();
  EXPECT_EQ(stage->evaluate(ctx, c).index, 1);
  EXPECT_EQ(cache.tail_blocks, 100u);
  EXPECT_EQ(stage->evaluate(ctx, c).index, 1);  // a retry: the chain and its tail from the cache
  // The quota gate asked first (its ids and its cut in the cache): the same tail, no second ask.
  const int asked = tok.calls;
  cache.endRequest();
  cache.tokens.resize(64);
  std::iota(cache.tokens.begin(), cache.tokens.end(), 0u);
  cache.tokens_cut = 1600;
  cache.tokens_ready = cache.tokens_ok = true;
  EXPECT_EQ(stage->evaluate(ctx, c).index, 1);
  EXPECT_EQ(cache.tail_blocks, 100u);
  EXPECT_EQ(tok.calls, asked);
}

// A peer law places a prompt nobody holds itself, keyed `load` (not a Tier 1.5 hit).
TEST(KvExact, APeerLawsMissIsKeyedLoad) {
  KvExactOptions o;
  o.law.mode = LawMode::kLmetric;
  Fixture f(o);
  for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids[t] = 1000 + t;  // nobody holds these
  f.eps[0].state->active.store(2);
  f.eps[1].state->active.store(1);
  auto r = f.run();
  EXPECT_EQ(r.index, 2);  // (4 + 1) x 1 against x 3 and x 2
  EXPECT_EQ(r.key, DecisionKey::kLoad);
  EXPECT_FALSE(r.spilled);
}

// A scoring profile replaces the law (routing/scoring/profile.h); onMiss says who places a prompt
// nobody holds: the profile (score, keyed load) or the rule's selector (a Tier 1.5 miss).
TEST(KvExact, AScoringProfileReplacesTheLaw) {
  config::RuleSpec r;
  r.service_args = {{"kvExactMode", 3},
                    {"kvScoringProfile", {{"scorers", {{{"name", "load"}}}}}}};
  KvExactOptions o = kvExactOptions(r, defaultRoutingEnv());
  ASSERT_NE(o.profile, nullptr);
  Fixture f(o);
  // Overlaps 4, 2, 0 but a load-only profile: loads 2, 1, 0 -> the idle endpoint 2, a spill.
  f.eps[0].state->active.store(2);
  f.eps[1].state->active.store(1);
  auto res = f.run();
  EXPECT_EQ(res.index, 2);
  EXPECT_TRUE(res.spilled);
  EXPECT_EQ(res.key, DecisionKey::kKvOverlap);
  for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids[t] = 1000 + t;  // nobody holds these
  res = f.run();
  EXPECT_EQ(res.index, 2);  // onMiss score: placed by the profile, keyed load
  EXPECT_EQ(res.key, DecisionKey::kLoad);
  r.service_args["kvScoringProfile"] = "predict";  // onMiss selector
  Fixture g(kvExactOptions(r, defaultRoutingEnv()));
  for (int t = 0; t < 64; ++t) g.facts.prompt_token_ids[t] = 1000 + t;
  EXPECT_EQ(g.run().reason, FallReason::kNoWorker);
  // A profile reading queued prefill turns its tracking on: the pick reports its uncached blocks.
  r.service_args["kvScoringProfile"] = "llm-d-sticky";
  Fixture h(kvExactOptions(r, defaultRoutingEnv()));
  auto sticky = h.run();  // 4 blocks of 4 held by endpoint 0 (>= 0.8): kept alone
  EXPECT_EQ(sticky.index, 0);
  EXPECT_EQ(sticky.prefill_blocks, 0u);
  h.excluded[0] = true;  // endpoint 1 holds 2 of 4: affinity dropped, token loads 2 and 4
  sticky = h.run();
  EXPECT_EQ(sticky.index, 1);
  EXPECT_EQ(sticky.prefill_blocks, 2u);
}

// The built-in "predict-q" profile is the default law (predict-q) as a profile: through the stage
// both pick alike, seed the same hits and place a prompt nobody holds on the least queued prefill.
TEST(KvExact, ThePredictQProfileDecidesAsTheDefaultLaw) {
  for (const bool as_profile : {false, true}) {
    SCOPED_TRACE(as_profile ? "profile" : "law");
    config::RuleSpec r;
    r.service_args = {{"kvExactMode", 3}};
    if (as_profile) r.service_args["kvScoringProfile"] = "predict-q";
    KvExactOptions o = kvExactOptions(r, defaultRoutingEnv());
    EXPECT_EQ(o.profile != nullptr, as_profile);
    if (!as_profile) EXPECT_EQ(o.law.mode, LawMode::kPredictQ);
    o.coldstart_min_blocks = 3;  // endpoints 1 and 2 (2 and 0 blocks held) are cold
    o.coldstart_seed_nth = 2;
    Fixture f(o);
    const auto [picks, seeded] = runTimes(f, 4);
    // (0 + 1) x 1 at endpoint 0 against (2 + 1) x 1 and (4 + 1) x 1: endpoint 0; every 2nd hit
    // seeds the first cold endpoint.
    EXPECT_EQ(picks, (std::vector<int>{0, 1, 0, 1}));
    EXPECT_EQ(seeded, (std::vector<bool>{false, true, false, true}));
    // Nobody holds the prompt: queued prefill 5, 1, 3 blocks -> endpoint 1, keyed load; never
    // seeded (a miss).
    for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids[t] = 2000 + t;
    f.eps[0].state->pending_prefill_blocks.store(5);
    f.eps[1].state->pending_prefill_blocks.store(1);
    f.eps[2].state->pending_prefill_blocks.store(3);
    for (int i = 0; i < 2; ++i) {
      auto miss = f.run();
      EXPECT_EQ(miss.index, 1);
      EXPECT_EQ(miss.key, DecisionKey::kLoad);
      EXPECT_FALSE(miss.seeded);
    }
  }
}

// The environment's default law does not leak into a profile rule: with LOXILB_KV_LB_MODE naming
// a peer law (which places misses itself), the predict profile (onMiss selector) still lets a
// prompt nobody holds fall through, and a profile reading no queued prefill reports none.
TEST(KvExact, TheEnvironmentsLawDoesNotLeakIntoAProfile) {
  config::RuleSpec r;
  r.service_args = {{"kvExactMode", 3}, {"kvScoringProfile", "predict"}};
  const RoutingEnv env = testing::envOf({{"LOXILB_KV_LB_MODE", "llm-d"}});
  Fixture f(kvExactOptions(r, env));
  for (int t = 0; t < 64; ++t) f.facts.prompt_token_ids[t] = 1000 + t;
  EXPECT_EQ(f.run().reason, FallReason::kNoWorker);
  // ... and a law's miss rule does not either: with LOXILB_KV_LB_MODE=lmetric a load-only profile
  // that lets misses fall through still falls.
  r.service_args["kvScoringProfile"] = {{"scorers", {{{"name", "load"}}}}, {"onMiss", "selector"}};
  Fixture g(kvExactOptions(r, testing::envOf({{"LOXILB_KV_LB_MODE", "lmetric"}})));
  for (int t = 0; t < 64; ++t) g.facts.prompt_token_ids[t] = 1000 + t;
  EXPECT_EQ(g.run().reason, FallReason::kNoWorker);
}

// dynamo-v1 through the stage: queued prefill and the active set are both tracked.
TEST(KvExact, DynamoV1TracksQueuedPrefillAndTheActiveSet) {
  KvExactOptions o;
  o.law.mode = LawMode::kDynamoV1;
  Fixture f(o);
  // pending + uncached + active: 0 + 0 + 4 (this prompt's blocks) on endpoint 0: it wins.
  auto r = f.run();
  EXPECT_EQ(r.index, 0);
  EXPECT_TRUE(r.track_chain);
  EXPECT_EQ(r.prefill_blocks, 0u);
  // 40 blocks queued on endpoint 0: 40 + 0 + 4 = 44 against 0 + 2 + 4 = 6 on endpoint 1.
  f.eps[0].state->pending_prefill_blocks.store(40);
  r = f.run();
  EXPECT_EQ(r.index, 1);
  EXPECT_EQ(r.prefill_blocks, 2u);  // its uncached blocks, queued there until the first byte
}

// A retry of the same request reuses the chain its first attempt stored in the request's chain
// cache (no tokenizing or hashing again): here the cache holds the chain of tokens 0..63 while the
// facts say 1000..1063, so the pick follows the cache.
TEST(KvExact, RetriesReuseTheRequestsChain) {
  Fixture f;
  CachedCtx cc(f.facts);
  CycleState& cache = cc.cache;
  RequestContext& ctx = cc.ctx;
  CandidateSet c{f.eps, f.excluded};
  EXPECT_EQ(f.stage->evaluate(ctx, c).index, 0);  // first attempt: computes and stores
  ASSERT_TRUE(cache.chain_ready);
  EXPECT_EQ(cache.chain.size(), 4u);
  for (auto& t : f.facts.prompt_token_ids) t += 1000;  // (what a fresh hash would now see)
  EXPECT_EQ(f.stage->evaluate(ctx, c).index, 0);       // the retry uses the stored chain
  cache.chain_ready = false;
  EXPECT_EQ(f.stage->evaluate(ctx, c).reason, FallReason::kNoWorker);  // recomputed: nobody
}

// kv_exact declares its reasons (metrics: loxilb_pd_kv_tier15_miss_reason_total) in upstream's
// guard order, as docs/metrics.md lists them (empty_pool aside: the pipeline's own).
TEST(KvExact, DeclaresTheTier15MissReasons) {
  std::vector<std::string> names;
  for (FallReason r : kKvExactReasons)
    if (r != FallReason::kEmptyPool) names.push_back(kFallReasonNames[static_cast<size_t>(r)]);
  EXPECT_EQ(names, (std::vector<std::string>{"all_excluded", "api_mode", "warmup", "text_empty",
                                             "model_empty", "tokenize", "hashes", "hash_contract",
                                             "no_worker", "excluded", "shallow", "remote_timeout",
                                             "remote_error", "remote_unknown_key"}));
  EXPECT_EQ(findStage("kv_exact")->reasons.size(), std::size(kKvExactReasons));
}

TEST(KvExact, OnlyExcludedHoldersIsTheExcludedReason) {
  Fixture f;
  f.excluded[0] = f.excluded[1] = true;  // the holders of 4 and 2 blocks; 10.0.0.3 holds none
  EXPECT_EQ(f.run().reason, FallReason::kExcluded);
}

TEST(KvExact, TokenIdsOutOfRangeHaveNoHashes) {
  Fixture f;
  f.facts.prompt_token_ids[3] = -1;
  EXPECT_EQ(f.run().reason, FallReason::kHashes);
  f.facts.prompt_token_ids[3] = int64_t{1} << 32;
  EXPECT_EQ(f.run().reason, FallReason::kHashes);
}

TEST(KvExact, ApiModeGatesChatAndCompletions) {
  KvExactOptions o;
  o.api_mode = ApiMode::kChat;
  Fixture f(o);
  EXPECT_EQ(f.run().reason, FallReason::kApiMode);  // a completions request
  KvExactOptions c;
  c.api_mode = ApiMode::kCompletions;
  Fixture g(c);
  EXPECT_EQ(g.run().index, 0);
  g.facts.chat = chatInput(R"([{"role":"user","content":"x"}])");
  EXPECT_EQ(g.run().reason, FallReason::kApiMode);
}

using testing::envOf;  // (RoutingEnv reads through a lookup, never getenv)

TEST(KvExact, RuleFieldsChooseApiModeAndLawMode) {
  config::RuleSpec r;
  r.service_args = {{"kvExactApiMode", "chat"}, {"kvLbMode", "soft"}};
  auto o = kvExactOptions(r, defaultRoutingEnv());
  EXPECT_EQ(o.api_mode, ApiMode::kChat);
  EXPECT_EQ(o.law.mode, LawMode::kSoft);
  const RoutingEnv off = envOf({{"LOXILB_KV_LB_MODE", "off"}});
  EXPECT_EQ(kvExactOptions(r, off).law.mode, LawMode::kSoft);  // the rule beats the environment
  r.service_args.erase("kvLbMode");
  EXPECT_EQ(kvExactOptions(r, off).law.mode, LawMode::kOff);  // then the environment
  // Then the default: predict (a rule without kvExactMode 3: P/D mode 1 here; the seed's hard
  // until docs/benchmarks.md "P/D: the prefill law") ...
  EXPECT_EQ(kvExactOptions(r, defaultRoutingEnv()).law.mode, LawMode::kPredict);
  r.service_args["kvExactMode"] = 1;
  EXPECT_EQ(kvExactOptions(r, defaultRoutingEnv()).law.mode, LawMode::kPredict);
  // ... and predict-q on single-pool kvExactMode 3 rules (issue 29).
  r.service_args["kvExactMode"] = 3;
  EXPECT_EQ(kvExactOptions(r, defaultRoutingEnv()).law.mode, LawMode::kPredictQ);
  EXPECT_EQ(kvExactOptions(config::RuleSpec{}, defaultRoutingEnv()).api_mode, ApiMode::kBoth);
}

TEST(KvExact, SpillReliefIsOffForPdRulesUnlessTheEnvironmentSaysOtherwise) {
  // Seed 000: unset means on for single-pool mode 3, off for P/D mode 1.
  config::RuleSpec single, pd;
  pd.service_args = {{"pd_disagg_mode", true}, {"kvExactMode", 1}};
  EXPECT_TRUE(kvExactOptions(single, defaultRoutingEnv()).law.spill_relief);
  EXPECT_FALSE(kvExactOptions(pd, defaultRoutingEnv()).law.spill_relief);
  // An explicit value overrides every service.
  EXPECT_TRUE(kvExactOptions(pd, envOf({{"LOXILB_KV_SPILL_RELIEF", "on"}})).law.spill_relief);
  EXPECT_FALSE(kvExactOptions(single, envOf({{"LOXILB_KV_SPILL_RELIEF", "off"}})).law.spill_relief);
}

// Text and chat prompts through a real tokenizer (the tiny one: character i of the alphabet is
// id i), so the text of ids 0..63 is the fixture's cached prompt.
TEST(KvExact, TextAndChatPromptsAreTokenized) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kvgate_kvexact_tok_" + std::to_string(::getpid()));
  testing::writeTinyTokenizer(dir, "m");
  {
    tok::TokenizerRegistry reg(dir);
    tok::RequestTokenizer rt(reg);
    Fixture f;
    StageServices s{g_clock, f.rule, f.eps, nullptr, nullptr, &rt};
    f.stage = makeKvExact(s, f.index, f.lookup, {});
    EXPECT_NE(f.stage->needs() & kNeedPromptText, 0u);
    EXPECT_NE(f.stage->needs() & kNeedChatInput, 0u);
    f.facts.prompt_token_ids.clear();
    f.facts.prompt_text = testing::tinyText(iota(0, 64));
    EXPECT_EQ(f.run().reason, FallReason::kModelEmpty);
    f.facts.model = "m";
    f.facts.has_model = true;
    EXPECT_EQ(f.run().reason, FallReason::kTokenize);  // the first request only starts the load
    ASSERT_TRUE(testing::waitUntil([&] { return rt.find("m") != nullptr; }));
    auto r = f.run();
    EXPECT_EQ(r.index, 0);  // holds all 4 blocks
    EXPECT_EQ(r.key, DecisionKey::kKvOverlap);
    // The same text as a chat message (the template concatenates contents).
    f.facts.prompt_text.clear();
    f.facts.chat =
        chatInput(R"([{"role":"user","content":")" + testing::tinyText(iota(0, 64)) + R"("}])");
    EXPECT_EQ(f.run().index, 0);
    // Only the first two blocks' text: endpoints 0 and 1 tie at 2 blocks, the lower index wins.
    f.facts.chat =
        chatInput(R"([{"role":"user","content":")" + testing::tinyText(iota(0, 40)) + R"("}])");
    EXPECT_EQ(f.run().index, 0);
    f.facts.chat.reset();
    EXPECT_EQ(f.run().reason, FallReason::kTextEmpty);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvgate::routing
