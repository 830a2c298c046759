// The selector stages (sel 0..10) on plain data, through the stage registry.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "routing/request_facts.h"
#include "routing/selectors/selectors.h"
#include "routing/stage_registry.h"

namespace kvgate::routing {
namespace {

common::ManualClock g_clock;
config::RuleSpec g_rule;

std::vector<PoolEndpoint> pool(std::vector<int> weights) {
  std::vector<PoolEndpoint> eps;
  for (size_t i = 0; i < weights.size(); ++i) {
    PoolEndpoint p;
    p.state = std::make_shared<endpoints::EndpointState>(
        static_cast<endpoints::EndpointId>(i + 1), "127.0.0." + std::to_string(i + 1), 80, g_clock);
    p.weight = static_cast<uint8_t>(weights[i]);
    eps.push_back(p);
  }
  return eps;
}

// What a pick decided, in the shape the assertions below read.
struct PickInfo {
  const char* key = "rr";
  bool spilled = false;
};

// A stage looked up by its `sel` alias, picking with a copy of the exclusion mask.
class Sel {
 public:
  explicit Sel(std::unique_ptr<Stage> s) : s_(std::move(s)) {}
  int pick(const std::vector<PoolEndpoint>& eps, std::vector<bool> excluded,
           const RequestContext& ctx, PickInfo& info) {
    CandidateSet c{eps, excluded};
    StageResult r = s_->evaluate(ctx, c);
    info.key = decisionKeyName(r.key);
    info.spilled = r.spilled;
    return r.index;
  }
  int pick(const std::vector<PoolEndpoint>& eps, std::vector<bool> excluded) {
    PickInfo info;
    return pick(eps, std::move(excluded), RequestContext{}, info);
  }

 private:
  std::unique_ptr<Stage> s_;
};

std::unique_ptr<Sel> create(int sel, const std::vector<PoolEndpoint>& eps) {
  const StageInfo* info = findStage(std::to_string(sel));
  EXPECT_NE(info, nullptr) << sel;
  return std::make_unique<Sel>(info->make(StageServices{g_clock, g_rule, eps}));
}

TEST(StageRegistry, NamesAndSelAliases) {
  EXPECT_EQ(findStage("chwbl"), stageForSel(8));
  EXPECT_EQ(findStage("10")->name, "wrr_hash");
  EXPECT_EQ(findStage("rr")->sel, 0);
  EXPECT_EQ(findStage("nope"), nullptr);
  EXPECT_EQ(findStage("5"), nullptr);  // sel 5 is not implemented
  EXPECT_EQ(findStage("8x"), nullptr);
}

// The catalog (config/stage_catalog.h) and the registry agree, and the seed's ladder tiers are
// the stages seed 000 names: Tier 0 session, Tier 1 prefix trie, Tier 1.5 KV-exact, Tier 2 min-load.
TEST(StageRegistry, CatalogFactsAndTiers) {
  for (const auto& f : config::kStageCatalog) {
    const StageInfo* info = findStage(f.name);
    ASSERT_NE(info, nullptr) << f.name;
    EXPECT_NE(info->make, nullptr) << f.name;
  }
  // The upstream gateway's sel numbers (shared/reference/upstream-gateway.md), as stages and in
  // the access log and metrics (config::selectorName; 5-7 are not built here).
  const std::map<int, std::string_view> seed_sel = {{0, "rr"},      {1, "hash"},     {2, "wrr"},
                                                    {3, "persist"}, {4, "lc"},       {8, "chwbl"},
                                                    {9, "gpuaware"}, {10, "wrr_hash"}};
  for (int sel = -1; sel <= 11; ++sel) {
    const auto it = seed_sel.find(sel);
    const StageInfo* info = stageForSel(sel);
    if (it == seed_sel.end()) {
      EXPECT_EQ(info, nullptr) << sel;
      continue;
    }
    ASSERT_NE(info, nullptr) << sel;
    EXPECT_EQ(info->name, it->second);
    EXPECT_EQ(std::string_view(config::selectorName(sel)), it->second);
  }
  EXPECT_STREQ(config::selectorName(5), "n2");
  EXPECT_STREQ(config::selectorName(7), "reserved");
  EXPECT_STREQ(config::selectorName(11), "");
  EXPECT_EQ(stageForTier(Ladder::kTier0).name, "session");
  EXPECT_EQ(stageForTier(Ladder::kTier1).name, "prefix_trie");
  EXPECT_EQ(stageForTier(Ladder::kTier15).name, "kv_exact");
  EXPECT_EQ(stageForTier(Ladder::kTier2).name, "min_load");
  // The rule field `selector` names exactly the stages without a sel number that pick alone
  // (docs/rest-api.md lists them).
  std::vector<std::string_view> sel_field;
  for (const auto& f : config::kStageCatalog)
    if (f.selector_field) sel_field.push_back(f.name);
  EXPECT_EQ(sel_field, (std::vector<std::string_view>{"random", "lc_light", "sglang",
                                                      "sglang-cli", "smg"}));
  // Environment knobs in a rule's `effective` block come from the stage's own entry.
  RoutingEnv env;
  env.session_max = 7;
  env.lc_light_below_x100 = 250;
  nlohmann::json out = nlohmann::json::object();
  findStage("session")->env_knobs(out, env);
  findStage("lc_light")->env_knobs(out, env);
  env.trie_max_nodes = 99;
  findStage("prefix_trie")->env_knobs(out, env);
  EXPECT_EQ(out, (nlohmann::json{
                     {"session_max", 7}, {"lc_light_below_x100", 250}, {"trie_max_nodes", 99}}));
  EXPECT_EQ(findStage("rr")->env_knobs, nullptr);
}

TEST(SmoothWrr, MatchesNginxSequenceForFiveOneOne) {
  // nginx's documented smooth WRR order for weights {5,1,1}: a a b a c a a.
  EXPECT_EQ(smoothWrrSchedule({5, 1, 1}), (std::vector<int>{0, 0, 1, 0, 2, 0, 0}));
  EXPECT_EQ(smoothWrrSchedule({0, 0}), (std::vector<int>{0, 1}));  // all zero: equal shares
  EXPECT_EQ(smoothWrrSchedule({0, 2}), (std::vector<int>{1, 1}));
}

TEST(RoundRobin, CyclesAndSkipsExcluded) {
  auto eps = pool({1, 1, 1});
  auto s = create(0, eps);
  std::vector<bool> none(3, false);
  EXPECT_EQ(s->pick(eps, none), 0);
  EXPECT_EQ(s->pick(eps, none), 1);
  EXPECT_EQ(s->pick(eps, none), 2);
  EXPECT_EQ(s->pick(eps, none), 0);
  std::vector<bool> ex{false, true, false};
  std::map<int, int> n;
  for (int i = 0; i < 30; ++i) n[s->pick(eps, ex)]++;
  EXPECT_EQ(n[1], 0);
  EXPECT_EQ(n[0] + n[2], 30);
  EXPECT_EQ(s->pick(eps, std::vector<bool>(3, true)), -1);
}

TEST(Random, UniformOverTheNonExcludedOnly) {
  auto eps = pool({1, 1, 1, 1});
  const StageInfo* info = findStage("random");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->sel, -1);  // no sel number: chosen with the rule field `selector`
  Sel s(info->make(StageServices{g_clock, g_rule, eps}));
  std::vector<bool> ex{false, true, false, false};
  std::map<int, int> n;
  for (int i = 0; i < 30000; ++i) n[s.pick(eps, ex)]++;
  EXPECT_EQ(n[1], 0);
  // 10,000 expected each; a binomial sd of ~82 makes +-600 over seven sds.
  for (int i : {0, 2, 3}) EXPECT_NEAR(n[i], 10000, 600) << i;
  EXPECT_EQ(s.pick(eps, std::vector<bool>(4, true)), -1);
}

// n token ids from `first` on, and a pick of a token-id prompt (the cache_aware tests).
std::vector<int64_t> tokenIds(int64_t first, size_t n) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<int64_t>(i);
  return v;
}
int pickIds(Sel& s, const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
            std::vector<int64_t> prompt, PickInfo& info) {
  RequestFacts f;
  f.parsed = true;
  f.prompt_token_ids = std::move(prompt);
  RequestContext ctx;
  ctx.facts = &f;
  return s.pick(eps, excluded, ctx, info);
}

// SMG's current cache_aware (sglang_cache_aware.cc "smg"), worked by hand with its command-line
// defaults (threshold 0.3, gate rel 1.5 / abs 64) and LeastLoad's constants (1024 tokens a
// request, 2000 tokens/s, 0.15 s x k/(1 - k)).
TEST(SmgCacheAware, HoldersBehindALoadGateElseTheLeastExpectedWait) {
  auto eps = pool({1, 1, 1});
  std::vector<bool> none(3, false);
  auto ids = tokenIds;
  auto pickWith = [&](Sel& s, std::vector<int64_t> prompt, PickInfo& info) {
    return pickIds(s, eps, none, std::move(prompt), info);
  };
  {
    Sel s(findStage("smg")->make(StageServices{g_clock, g_rule, eps}));
    PickInfo info;
    // No engine metrics anywhere: a miss goes to the shortest queue (loads 2, 0, 1).
    eps[0].state->active.store(2);
    eps[2].state->active.store(1);
    EXPECT_EQ(pickWith(s, ids(0, 64), info), 1);
    EXPECT_STREQ(info.key, "load");
    // The same prompt: endpoint 1 holds it all (1 > 0.3) and passes the gate: a hit.
    EXPECT_EQ(pickWith(s, ids(0, 64), info), 1);
    EXPECT_STREQ(info.key, "prefix");
    EXPECT_FALSE(info.spilled);
    // Loads 10, 300, 0: mean 103.3; 300 > 1.5 x 103.3 and > 103.3 + 64: the holder is gated, a
    // spill to the least expected wait among the others (no metrics: the shortest queue, 2).
    eps[0].state->active.store(10);
    eps[1].state->active.store(300);
    eps[2].state->active.store(0);
    EXPECT_EQ(pickWith(s, ids(0, 64), info), 2);
    EXPECT_TRUE(info.spilled);
    EXPECT_STREQ(info.key, "prefix");
    // Loads 10, 100, 0: mean 36.7; 100 > 55 but not > 100.7: endpoint 1 passes the gate. Both 1
    // and 2 hold the prompt now (the spill inserted it): the least expected wait among them,
    // the shorter queue, 2; no spill.
    eps[1].state->active.store(100);
    EXPECT_EQ(pickWith(s, ids(0, 64), info), 2);
    EXPECT_FALSE(info.spilled);
  }
  for (auto& e : eps) e.state->active.store(0);
  {
    // Engine metrics: waiting 5, 1, 4 -> (w x 1024) / 2000 = 2.56, 0.512, 2.048: endpoint 1.
    Sel s(findStage("smg")->make(StageServices{g_clock, g_rule, eps}));
    PickInfo info;
    eps[0].state->engine_waiting.store(5);
    eps[1].state->engine_waiting.store(1);
    eps[2].state->engine_waiting.store(4);
    for (auto& e : eps) e.state->scrape_fresh.store(true);
    EXPECT_EQ(pickWith(s, ids(10000, 64), info), 1);
    // One dispatched since its last scrape: (1024 + 1024) / 2000 = 1.024: endpoint 1 again.
    EXPECT_EQ(pickWith(s, ids(20000, 64), info), 1);
    // Two: (1024 + 2048) / 2000 = 1.536 < 2.048: still 1. A scrape resets the count.
    EXPECT_EQ(pickWith(s, ids(30000, 64), info), 1);
    eps[1].state->scrapes_ok.fetch_add(1);
    EXPECT_EQ(pickWith(s, ids(40000, 64), info), 1);  // 0.512 again
    // KV pressure: k = 0.95 on endpoint 1 adds 0.15 x 19 = 2.85 (0.512 + 1 x 0.512 = 1.024 +
    // 2.85 = 3.874) against endpoint 2's 2.048: endpoint 2.
    eps[1].state->kv_usage_ppm.store(950000);
    EXPECT_EQ(pickWith(s, ids(50000, 64), info), 2);
    // An endpoint without metrics scores the best reporting score + in-flight x 1024 / 2000:
    // endpoint 2 (one dispatched) (4096 + 1024) / 2000 = 2.56 is the best; endpoint 0 with 3 in
    // flight 2.56 + 1.536; endpoint 1 3.874: endpoint 2.
    eps[0].state->engine_waiting.store(-1);
    eps[0].state->active.store(3);
    EXPECT_EQ(pickWith(s, ids(60000, 64), info), 2);
    // A failed scrape leaves stale values: not trusted. Endpoint 2's last scrape failed: only
    // endpoint 1 reports, (1024 + 1024) / 2000 + 2.85 = 3.874; endpoint 2 scores that + 0 in
    // flight x 1024 / 2000 (a tie), endpoint 0 3.874 + 1.536: 1 or 2, never 0.
    eps[2].state->scrape_fresh.store(false);
    const int p = pickWith(s, ids(70000, 64), info);
    EXPECT_TRUE(p == 1 || p == 2) << p;
  }
  for (auto& e : eps) {
    e.state->active.store(0);
    e.state->engine_waiting.store(-1);
    e.state->kv_usage_ppm.store(-1);
    e.state->scrape_fresh.store(false);
  }
}

// SGLang's cache_aware, re-implemented (sglang_cache_aware.cc), worked by hand with the library
// defaults: threshold 0.5, balance abs 32, rel 1.1.
TEST(SglangCacheAware, PrefixMatchSmallestTreeAndImbalance) {
  auto eps = pool({1, 1, 1});
  Sel s(findStage("sglang")->make(StageServices{g_clock, g_rule, eps}));
  std::vector<bool> none(3, false);
  auto ids = tokenIds;
  auto pick = [&](std::vector<int64_t> prompt, PickInfo& info) {
    return pickIds(s, eps, none, std::move(prompt), info);
  };
  PickInfo info;
  // Empty trees: no match (rate 0 <= 0.5), all trees size 0: the lowest index.
  EXPECT_EQ(pick(ids(0, 64), info), 0);
  // Another prompt: no match; the smallest tree is endpoint 1's (0 blocks vs 4).
  EXPECT_EQ(pick(ids(1000, 64), info), 1);
  // The first prompt again: endpoint 0 matches 64/64 > 0.5.
  EXPECT_EQ(pick(ids(0, 64), info), 0);
  // Half of it (2 of 4 blocks, then other tokens): 32/64 = 0.5 is not above the threshold:
  // the smallest tree, endpoint 2.
  auto half = ids(0, 32);
  auto other = ids(5000, 32);
  half.insert(half.end(), other.begin(), other.end());
  EXPECT_EQ(pick(half, info), 2);
  // Imbalanced: loads 40, 0, 5: 40 - 0 > 32 and 40 > 1.1 x 0: the least loaded, whatever the
  // cache says (a spill).
  eps[0].state->active.store(40);
  eps[2].state->active.store(5);
  EXPECT_EQ(pick(ids(0, 64), info), 1);
  EXPECT_TRUE(info.spilled);
  // Loads 40, 20, 30: 40 - 20 = 20 is not above 32: balanced, the match decides again.
  eps[1].state->active.store(20);
  eps[2].state->active.store(30);
  EXPECT_EQ(pick(ids(1000, 64), info), 1);
  EXPECT_FALSE(info.spilled);
  // Both conditions are needed: loads 400, 365, 380 differ by 35 > 32, but 400 is not above
  // 1.1 x 365 = 401.5: balanced, so the prefix decides (endpoint 0 holds ids(0, 64) best).
  eps[0].state->active.store(400);
  eps[1].state->active.store(365);
  eps[2].state->active.store(380);
  EXPECT_EQ(pick(ids(0, 64), info), 0);
  EXPECT_FALSE(info.spilled);
  // Short prompts (under one block) still grow the trees: the next one lands on another
  // endpoint than an empty-tree tie would give.
  for (auto& e : eps) e.state->active.store(0);
  auto s2 = findStage("sglang")->make(StageServices{g_clock, g_rule, eps});
  Sel fresh(std::move(s2));
  auto pickFresh = [&](std::vector<int64_t> prompt) {
    RequestFacts f;
    f.parsed = true;
    f.prompt_token_ids = std::move(prompt);
    RequestContext ctx;
    ctx.facts = &f;
    PickInfo pi;
    return fresh.pick(eps, none, ctx, pi);
  };
  EXPECT_EQ(pickFresh(ids(1, 5)), 0);
  EXPECT_EQ(pickFresh(ids(100, 5)), 1);  // endpoint 0's tree holds one entry now
  EXPECT_EQ(pickFresh(ids(1, 5)), 0);    // and the same short prompt matches it whole
}

TEST(WeightedRoundRobin, DistributesByWeight) {
  auto eps = pool({3, 1, 0});
  auto s = create(2, eps);
  std::map<int, int> n;
  std::vector<bool> none(3, false);
  for (int i = 0; i < 400; ++i) n[s->pick(eps, none)]++;
  EXPECT_EQ(n[0], 300);
  EXPECT_EQ(n[1], 100);
  EXPECT_EQ(n[2], 0);  // weight 0 takes no traffic
  EXPECT_EQ(s->pick(eps, {true, true, false}), -1);
}

TEST(LeastConnections, PicksLowestInFlightAndRotatesTies) {
  auto eps = pool({1, 1, 1});
  auto s = create(4, eps);
  eps[0].state->active = 5;
  eps[1].state->active = 2;
  eps[2].state->active = 7;
  std::vector<bool> none(3, false);
  EXPECT_EQ(s->pick(eps, none), 1);
  EXPECT_EQ(s->pick(eps, {false, true, false}), 0);
  eps[0].state->active = 0;
  eps[1].state->active = 0;
  eps[2].state->active = 0;
  std::map<int, int> n;
  for (int i = 0; i < 30; ++i) n[s->pick(eps, none)]++;
  EXPECT_EQ(n[0], 10);
  EXPECT_EQ(n[1], 10);
  EXPECT_EQ(n[2], 10);
}

// lc_light: least connections while the mean in-flight per eligible endpoint is below 4 (the
// default LOXILB_LC_LIGHT_BELOW=400), round-robin at or above it; worked by hand.
TEST(LcLight, LeastConnectionsWhenLightRoundRobinWhenBusy) {
  auto eps = pool({1, 1, 1, 1});
  const StageInfo* info = findStage("lc_light");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->sel, -1);  // chosen with the rule field `selector`
  Sel s(info->make(StageServices{g_clock, g_rule, eps}));
  std::vector<bool> none(4, false);
  auto load = [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    eps[0].state->active = a;
    eps[1].state->active = b;
    eps[2].state->active = c;
    eps[3].state->active = d;
  };
  load(2, 2, 2, 1);  // mean 7/4 = 1.75 < 4: the least loaded, whatever the rotation
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.pick(eps, none), 3);
  load(1, 0, 3, 2);  // mean 1.5
  PickInfo pi;
  EXPECT_EQ(s.pick(eps, none, RequestContext{}, pi), 1);
  EXPECT_STREQ(pi.key, "load");  // the metric's key: least connections decided
  // mean 2.75: still light under the default (it was busy under 200)
  load(3, 3, 3, 2);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.pick(eps, none), 3);
  load(4, 4, 4, 4);  // mean exactly 4: busy, so rotation: each endpoint once per four picks
  std::map<int, int> n;
  for (int i = 0; i < 40; ++i) n[s.pick(eps, none)]++;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(n[i], 10) << i;
  s.pick(eps, none, RequestContext{}, pi);
  EXPECT_STREQ(pi.key, "rr");  // the rotation decided
  // mean 4.25 although three are idle: rotation, the busy one included
  load(17, 0, 0, 0);
  n.clear();
  for (int i = 0; i < 40; ++i) n[s.pick(eps, none)]++;
  EXPECT_EQ(n[0], 10);
  // An excluded endpoint neither counts in the mean nor gets picked: over {1, 2, 3} the mean is
  // 1 (light), so the idle one among them wins.
  load(0, 1, 2, 0);
  EXPECT_EQ(s.pick(eps, {true, false, false, false}), 3);
  load(0, 5, 5, 5);  // over {1, 2, 3} the mean is 5 (busy): never the excluded idle endpoint 0
  n.clear();
  for (int i = 0; i < 30; ++i) n[s.pick(eps, {true, false, false, false})]++;
  EXPECT_EQ(n[0], 0);
  // The rotation counts the eligible ones: each gets a third (the excluded one's turns are not
  // all handed to its successor).
  EXPECT_EQ(n[1], 10);
  EXPECT_EQ(n[2], 10);
  EXPECT_EQ(n[3], 10);
  EXPECT_EQ(s.pick(eps, std::vector<bool>(4, true)), -1);
}

TEST(LcLight, ThresholdKnobZeroMeansAlwaysRoundRobin) {
  auto eps = pool({1, 1});
  RoutingEnv env;
  env.lc_light_below_x100 = 0;  // (LOXILB_LC_LIGHT_BELOW=0)
  StageServices svc{g_clock, g_rule, eps};
  svc.env = &env;
  Sel s(findStage("lc_light")->make(svc));
  eps[0].state->active = 0;
  eps[1].state->active = 0;
  std::map<int, int> n;
  for (int i = 0; i < 20; ++i) n[s.pick(eps, {false, false})]++;
  EXPECT_EQ(n[0], 10);  // idle pool, yet rotation
  EXPECT_EQ(n[1], 10);
  eps[1].state->active = 50;  // and the busy one keeps its turn
  n.clear();
  for (int i = 0; i < 20; ++i) n[s.pick(eps, {false, false})]++;
  EXPECT_EQ(n[1], 10);
}

int pickWith(Sel& s, const std::vector<PoolEndpoint>& eps, const std::vector<bool>& ex,
             RequestContext ctx, PickInfo* out = nullptr) {
  PickInfo info;
  int i = s.pick(eps, ex, ctx, info);
  if (out) *out = info;
  return i;
}

TEST(Chwbl, SamePrefixKeyStaysOnItsHomeEndpoint) {
  auto eps = pool({1, 1, 1});
  auto s = create(8, eps);
  std::vector<bool> none(3, false);
  RequestContext ctx;
  ctx.prefix_key = 0x1234567890abcdefULL;
  PickInfo info;
  int home = pickWith(*s, eps, none, ctx, &info);
  ASSERT_GE(home, 0);
  EXPECT_STREQ(info.key, "prefix");
  EXPECT_FALSE(info.spilled);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(pickWith(*s, eps, none, ctx), home);
  // Different keys spread over the pool (256 vnodes each): 300 keys reach every endpoint.
  std::map<int, int> seen;
  for (uint64_t k = 0; k < 300; ++k) {
    RequestContext c;
    c.prefix_key = k * 0x9E3779B97F4A7C15ULL;
    seen[pickWith(*s, eps, none, c)]++;
  }
  EXPECT_EQ(seen.size(), 3u);
  for (auto& [i, n] : seen) EXPECT_GT(n, 50) << i;  // roughly a third each
}

TEST(Chwbl, SpillsOnlyAboveTheBoundedLoadCap) {
  auto eps = pool({1, 1, 1});
  auto s = create(8, eps);
  std::vector<bool> none(3, false);
  RequestContext ctx;
  ctx.prefix_key = 42;
  int home = pickWith(*s, eps, none, ctx);
  // Home carries 1 of 1 in flight: cap = ceil(1.75 * (1 + 1) / 3) = 2 > 1, so it stays.
  eps[home].state->active = 1;
  PickInfo info;
  EXPECT_EQ(pickWith(*s, eps, none, ctx, &info), home);
  EXPECT_FALSE(info.spilled);
  // Home carries 4 of 4: cap = ceil(1.75 * 5 / 3) = 3 <= 4, so the request spills.
  eps[home].state->active = 4;
  int other = pickWith(*s, eps, none, ctx, &info);
  EXPECT_NE(other, home);
  EXPECT_TRUE(info.spilled);
  // An excluded home is not a spill: the next endpoint on the ring is the key's home now.
  eps[home].state->active = 0;
  std::vector<bool> ex(3, false);
  ex[static_cast<size_t>(home)] = true;
  int next = pickWith(*s, eps, ex, ctx, &info);
  EXPECT_NE(next, home);
  EXPECT_FALSE(info.spilled);
}

TEST(Chwbl, FallsBackToConversationThenRoundRobin) {
  auto eps = pool({1, 1});
  auto s = create(8, eps);
  std::vector<bool> none(2, false);
  RequestContext conv;
  conv.conversation_key = 7;
  PickInfo info;
  int a = pickWith(*s, eps, none, conv, &info);
  EXPECT_STREQ(info.key, "conversation");
  EXPECT_EQ(pickWith(*s, eps, none, conv), a);
  std::map<int, int> seen;
  for (int i = 0; i < 40; ++i) seen[pickWith(*s, eps, none, RequestContext{}, &info)]++;
  EXPECT_STREQ(info.key, "rr");
  EXPECT_EQ(seen.size(), 2u);
}

TEST(WrrHash, WeightZeroNeverServesAndWeightsShapeTheSpread) {
  auto eps = pool({3, 1, 0});
  auto s = create(10, eps);
  std::vector<bool> none(3, false);
  std::map<int, int> seen;
  for (uint64_t k = 0; k < 2000; ++k) {
    RequestContext c;
    c.prefix_key = k * 0x9E3779B97F4A7C15ULL;
    seen[pickWith(*s, eps, none, c)]++;
  }
  EXPECT_EQ(seen[2], 0);
  // 768 vs 256 ring points: about 3:1 (allow hashing noise).
  EXPECT_GT(seen[0], 2 * seen[1]);
}

TEST(GpuAware, PrefixKeyModuloPoolSize) {
  auto eps = pool({1, 1, 1});
  auto s = create(9, eps);
  RequestContext c;
  c.prefix_key = 10;  // 10 % 3 = 1
  EXPECT_EQ(pickWith(*s, eps, {false, false, false}, c), 1);
  EXPECT_EQ(pickWith(*s, eps, {false, true, false}, c), 2);  // excluded: next index
}

TEST(SourceHash, SourceKeyModuloPoolSize) {
  auto eps = pool({1, 1, 1, 1});
  auto s = create(1, eps);
  RequestContext c;
  c.source_key = 7;  // 7 % 4 = 3
  EXPECT_EQ(pickWith(*s, eps, {false, false, false, false}, c), 3);
  EXPECT_EQ(pickWith(*s, eps, {false, false, false, true}, c), 0);
}

TEST(Persist, SessionSticksAndReturnsAfterAnOutage) {
  auto eps = pool({1, 1, 1});
  auto s = create(3, eps);
  RequestContext c;
  c.session_key = 99;
  std::vector<bool> none(3, false);
  int a = pickWith(*s, eps, none, c);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(pickWith(*s, eps, none, c), a);
  std::vector<bool> ex(3, false);
  ex[static_cast<size_t>(a)] = true;
  int b = pickWith(*s, eps, ex, c);
  EXPECT_NE(b, a);
  EXPECT_EQ(pickWith(*s, eps, none, c), a);
  PickInfo info;
  pickWith(*s, eps, none, RequestContext{}, &info);
  EXPECT_STREQ(info.key, "source");
}

}  // namespace
}  // namespace kvgate::routing
