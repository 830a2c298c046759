// HintIndex ingest, events and eviction (TTL sweep, LRU and LFU capacity) on a manual clock.
#include "hints/hint_index.h"

#include <gtest/gtest.h>

#include <chrono>

#include "hints/lookup.h"

namespace kvgate::hints {
namespace {

using namespace std::chrono_literals;

std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[size_t(i)] = static_cast<char>(v & 0xff);
  return s;
}

UpdateIn exact(const std::string& replica, std::vector<uint64_t> keys, std::string scheme = "vllm",
               std::string adapter = "") {
  UpdateIn u = makeUpdate(replica, "m", "t", scheme, adapter);
  for (uint64_t k : keys) {
    PrefixIn p;
    p.prefix_hash = be8(k);
    p.token_count = 64;
    u.prefixes.push_back(p);
  }
  return u;
}

Reason lookupExact(const HintIndex& ix, uint64_t key, std::vector<ScoreOut>* scores = nullptr,
                   std::string adapter = "") {
  std::string k = be8(key);
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm", q.prefix_hash = k, q.adapter = adapter;
  auto o = lookupRoute(ix, q, nullptr, 0);
  if (scores) *scores = o.scores;
  return o.reason;
}

struct IndexTest : ::testing::Test {
  common::ManualClock clock;
  CachePolicy pol;
  void SetUp() override {
    pol.minimum_matched_tokens = 0;
    pol.affinity_routing = false;
    pol.enable_tenant_hot = false;
  }
};

TEST_F(IndexTest, ReportValidatesAndDropsMalformedEntriesOnly) {
  HintIndex ix(clock, pol);
  EXPECT_FALSE(ix.report(makeUpdate("", "m", "t", "vllm")).accepted);
  EXPECT_FALSE(ix.report(makeUpdate("r", "", "t", "vllm")).accepted);
  UpdateIn no_scheme = exact("r1", {1});
  no_scheme.hash_scheme = "";
  auto ns = ix.report(no_scheme);
  EXPECT_FALSE(ns.accepted);
  EXPECT_EQ(ix.holdings(), 0u);  // an empty scheme is not a domain: nothing indexed
  UpdateIn u = exact("r1", {1});
  PrefixIn bad;  // chain arrays of different lengths: this entry only is dropped
  bad.block_hashes = {be8(2), be8(3)};
  bad.block_token_counts = {16};
  u.prefixes.push_back(bad);
  PrefixIn empty;  // no key at all
  u.prefixes.push_back(empty);
  auto r = ix.report(u);
  EXPECT_TRUE(r.accepted);
  EXPECT_EQ(r.dropped, 2u);
  EXPECT_EQ(ix.holdings(), 1u);
  EXPECT_EQ(lookupExact(ix, 1), Reason::kPrefixMatch);
}

TEST_F(IndexTest, ChainEntriesIndexEachBlockWithCumulativeTokens) {
  HintIndex ix(clock, pol);
  UpdateIn u = makeUpdate("r1", "m", "t", "vllm");
  PrefixIn p;
  p.block_hashes = {be8(10), be8(11), be8(12)};
  p.block_token_counts = {16, 16, 8};
  p.prefix_hash = be8(99);
  p.token_count = 40;
  u.prefixes.push_back(p);
  ASSERT_TRUE(ix.report(u).accepted);
  EXPECT_EQ(ix.holdings(), 4u);
  std::vector<ScoreOut> s;
  ASSERT_EQ(lookupExact(ix, 11, &s), Reason::kPrefixMatch);
  EXPECT_EQ(s[0].matched_tokens, 32);
  ASSERT_EQ(lookupExact(ix, 12, &s), Reason::kPrefixMatch);
  EXPECT_EQ(s[0].matched_tokens, 40);
  EXPECT_EQ(ix.summary("m", "t").total_prefixes, 4);
}

TEST_F(IndexTest, TtlSweepFreesHoldingsAndScopes) {
  HintIndex ix(clock, pol);
  ix.report(exact("r1", {1, 2}));
  clock.advance(20min);
  ix.report(exact("r2", {3}));
  clock.advance(10min);  // r1's holdings are now 30 min old: the TTL
  while (!ix.sweep(1)) {
  }
  EXPECT_EQ(ix.holdings(), 1u);
  EXPECT_EQ(ix.counters().evicted_ttl[0].load(), 2u);
  EXPECT_EQ(lookupExact(ix, 3), Reason::kPrefixMatch);
  clock.advance(20min);
  while (!ix.sweep()) {
  }
  EXPECT_EQ(ix.holdings(), 0u);
  // Every scope freed: the index is empty again, so a miss is NO_HINT, not UNKNOWN_TENANT.
  EXPECT_EQ(lookupExact(ix, 3), Reason::kNoHint);
  EXPECT_TRUE(ix.entriesByModel().empty());
}

TEST_F(IndexTest, LruCapacityEvictsTheLeastRecentlyReported) {
  pol.max_entries = 4;
  HintIndex ix(clock, pol);
  for (uint64_t k = 1; k <= 4; ++k) {
    ix.report(exact("r1", {k}));
    clock.advance(1s);
  }
  ix.report(exact("r1", {1}));  // refresh key 1: key 2 is now the oldest
  clock.advance(1s);
  ix.report(exact("r1", {5}));
  EXPECT_EQ(ix.holdings(), 4u);
  EXPECT_EQ(ix.counters().evicted_capacity[0].load(), 1u);
  EXPECT_EQ(lookupExact(ix, 2), Reason::kNoHint);
  for (uint64_t k : {1, 3, 4, 5}) EXPECT_EQ(lookupExact(ix, k), Reason::kPrefixMatch) << k;
}

TEST_F(IndexTest, LfuCapacityKeepsWhatLookupsHit) {
  pol.max_entries = 3;
  pol.eviction = Eviction::kLfu;
  HintIndex ix(clock, pol);
  ix.report(exact("r1", {1, 2, 3}));
  clock.advance(1s);
  // Key 1 is the oldest (tied) but was hit twice, key 3 once: key 2 goes first.
  EXPECT_EQ(lookupExact(ix, 1), Reason::kPrefixMatch);
  EXPECT_EQ(lookupExact(ix, 1), Reason::kPrefixMatch);
  EXPECT_EQ(lookupExact(ix, 3), Reason::kPrefixMatch);
  ix.report(exact("r1", {4}));
  EXPECT_EQ(lookupExact(ix, 2), Reason::kNoHint);
  EXPECT_EQ(lookupExact(ix, 1), Reason::kPrefixMatch);
  EXPECT_EQ(lookupExact(ix, 3), Reason::kPrefixMatch);
  // Lookups that miss never change membership.
  EXPECT_EQ(ix.holdings(), 3u);
}

TEST_F(IndexTest, EventsEvictClearAndRefresh) {
  HintIndex ix(clock, pol);
  ix.report(exact("r1", {1, 2}));
  ix.report(exact("r1", {1}, "vllm", "lora-a"));
  ix.report(exact("r2", {1}));
  using E = HintIndex::EventType;
  // PREFIX_EVICTED with no adapter: every partition of (tenant, model).
  EXPECT_TRUE(ix.event(E::kEvicted, "r1", "m", "t", be8(1), "", false).accepted);
  std::vector<ScoreOut> s;
  ASSERT_EQ(lookupExact(ix, 1, &s), Reason::kPrefixMatch);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].replica, "r2");
  EXPECT_EQ(lookupExact(ix, 1, nullptr, "lora-a"), Reason::kNoHint);
  // REPLICA_UPDATED is a heartbeat: it keeps no holding alive past its TTL.
  clock.advance(25min);
  ix.report(exact("r2", {1}));
  EXPECT_TRUE(ix.event(E::kReplicaUpdated, "r1", "m", "t", "", "", false).accepted);
  EXPECT_FALSE(ix.event(E::kReplicaUpdated, "nobody", "m", "t", "", "", false).accepted);
  clock.advance(10min);
  while (!ix.sweep()) {
  }
  EXPECT_EQ(lookupExact(ix, 2), Reason::kNoHint);  // r1's key 2 aged out
  EXPECT_EQ(lookupExact(ix, 1), Reason::kPrefixMatch);  // r2 re-reported it
  ix.report(exact("r1", {3}));
  // ALL_CLEARED drops every holding of the replica in (tenant, model).
  EXPECT_TRUE(ix.event(E::kAllCleared, "r1", "m", "t", "", "", false).accepted);
  EXPECT_EQ(ix.holdings(), 1u);  // r2's
  EXPECT_EQ(lookupExact(ix, 3), Reason::kNoHint);
  // PREFIX_ADDED carries neither a scheme nor a token count: acknowledged, indexes nothing
  // (additions come through ReportCacheState).
  auto added = ix.event(E::kAdded, "r1", "m", "t", be8(7), "", false);
  EXPECT_TRUE(added.accepted);
  EXPECT_EQ(added.reason, "IGNORED");
  EXPECT_EQ(ix.holdings(), 1u);
}

// Issue 28 §1.5: at scale the capacity eviction samples (the worst of 16 random holdings per
// over-bound insert) instead of sorting every holding under the lock. The bound holds exactly,
// and the survivors are mostly the recent ones: with 16 samples the victim's age rank is on
// average in the oldest 1/17 of the index, so of the newest 1,000 keys far more than 70 %
// survive (a loose, one-sided bound: the seed is the process's secret).
TEST_F(IndexTest, SampledCapacityEvictionKeepsTheBoundAndMostlyTheRecent) {
  pol.max_entries = 1000;
  HintIndex ix(clock, pol);
  for (uint64_t k = 1; k <= 5000; ++k) {
    ix.report(exact("r1", {k}));
    clock.advance(1ms);
    ASSERT_LE(ix.holdings(), 1000u) << k;
  }
  EXPECT_EQ(ix.holdings(), 1000u);
  EXPECT_EQ(ix.counters().evicted_capacity[0].load(), 4000u);
  size_t recent = 0;
  for (uint64_t k = 4001; k <= 5000; ++k) recent += lookupExact(ix, k) == Reason::kPrefixMatch;
  EXPECT_GT(recent, 700u);
}

// The third review: in a sparse slab (most entries freed, new ones reusing freed slots) the
// random samples may all miss; the clock hand still finds a victim, so the bound holds after
// every report. A lowered bound is reached in one batch pass.
TEST_F(IndexTest, TheBoundHoldsInASparseSlabAndWhenLowered) {
  pol.max_entries = 1000;
  HintIndex ix(clock, pol);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 20000; ++k) keys.push_back(k);
  ix.report(exact("r1", keys));  // 20,000 entries made, 19,000 freed again: a sparse slab
  EXPECT_LE(ix.holdings(), 1000u);
  for (uint64_t k = 100001; k <= 105000; ++k) {
    ix.report(exact("r2", {k}));
    clock.advance(1ms);
    ASSERT_LE(ix.holdings(), 1000u) << k;
  }
  pol.max_entries = 10;
  ix.setPolicy(pol);
  EXPECT_EQ(ix.holdings(), 10u);
}

TEST_F(IndexTest, HostileReportersCannotGrowScopesWithoutBound) {
  pol.max_entries = 100;
  HintIndex ix(clock, pol);
  for (int i = 0; i < 1000; ++i) ix.report(exact("r1", {uint64_t(i) + 1}, "vllm", "a" + std::to_string(i)));
  EXPECT_LE(ix.holdings(), 100u);
  // Enormous keys are refused.
  UpdateIn u = makeUpdate("r1", "m", "t", "vllm");
  PrefixIn p;
  p.prefix_hash = std::string(1000, 'x');
  u.prefixes.push_back(p);
  EXPECT_EQ(ix.report(u).dropped, 1u);
}

TEST_F(IndexTest, SummaryCountsKeysAndHotKeysExactlyOrBySample) {
  HintIndex ix(clock, pol);
  std::vector<uint64_t> old_keys, new_keys;
  for (uint64_t k = 1; k <= 100; ++k) old_keys.push_back(k);
  for (uint64_t k = 101; k <= 150; ++k) new_keys.push_back(k);
  ASSERT_TRUE(ix.report(exact("r1", old_keys)).accepted);
  clock.advance(std::chrono::minutes(6));  // older than the 5-minute "hot" window
  ASSERT_TRUE(ix.report(exact("r2", new_keys)).accepted);
  auto s = ix.summary("m", "t");
  EXPECT_EQ(s.total_prefixes, 150);
  EXPECT_EQ(s.hot_prefixes, 50);
  EXPECT_EQ(ix.summary("other", "").total_prefixes, 0);
  // Past kSummaryScan entries the hot count is a strided sample: 100k old keys fill the first
  // half of the slab and 100k new ones the second; an even stride estimates half hot (2%).
  HintIndex big(clock, pol);
  for (uint64_t b = 0; b < 100; ++b) {
    std::vector<uint64_t> ks;
    for (uint64_t k = 0; k < 1000; ++k) ks.push_back(1 + b * 2000 + k);
    ASSERT_TRUE(big.report(exact("r1", ks)).accepted);
  }
  clock.advance(std::chrono::minutes(6));
  for (uint64_t b = 0; b < 100; ++b) {
    std::vector<uint64_t> ks;
    for (uint64_t k = 0; k < 1000; ++k) ks.push_back(1 + b * 2000 + 1000 + k);
    ASSERT_TRUE(big.report(exact("r2", ks)).accepted);
  }
  auto bs = big.summary("m", "t");
  EXPECT_EQ(bs.total_prefixes, 200000);
  EXPECT_NEAR(double(bs.hot_prefixes), 100000.0, 2000.0);
}

TEST_F(IndexTest, JunkReplicaIdsCannotLockOutNewReplicas) {
  HintIndex ix(clock, pol);
  // Updates with nothing well formed create no replica record: 5000 of them, then a real one.
  for (int i = 0; i < 5000; ++i) {
    UpdateIn u = makeUpdate("junk-" + std::to_string(i), "m", "t", "vllm");
    PrefixIn p;  // neither a chain nor a key: malformed
    u.prefixes.push_back(p);
    ASSERT_TRUE(ix.report(u).accepted);
  }
  ASSERT_TRUE(ix.report(exact("real-1", {1})).accepted);
  // Stats-only replicas do take records; 4096 fill the table (real-1 holds one of them) ...
  for (int i = 0; i < 4095; ++i) {
    UpdateIn u = makeUpdate("stats-" + std::to_string(i), "m", "t", "vllm");
    u.has_stats = true;
    ASSERT_TRUE(ix.report(u).accepted);
  }
  // ... and a new replica reuses one that holds nothing; real-1 keeps its holding.
  IngestResult r = ix.report(exact("real-2", {2}));
  EXPECT_TRUE(r.accepted) << r.reason;
  std::vector<ScoreOut> scores;
  ASSERT_EQ(lookupExact(ix, 1, &scores), Reason::kPrefixMatch);
  EXPECT_EQ(scores[0].replica, "real-1");
  ASSERT_EQ(lookupExact(ix, 2, &scores), Reason::kPrefixMatch);
  EXPECT_EQ(scores[0].replica, "real-2");
}

TEST_F(IndexTest, KnowsModelFollowsPartitions) {
  pol.eviction_ttl_ms = 1000;
  HintIndex ix(clock, pol);
  EXPECT_FALSE(ix.knowsModel("m"));
  ASSERT_TRUE(ix.report(exact("r1", {1})).accepted);
  EXPECT_TRUE(ix.knowsModel("m"));
  EXPECT_FALSE(ix.knowsModel("n"));
  clock.advance(std::chrono::seconds(2));
  while (!ix.sweep()) {
  }
  EXPECT_EQ(ix.holdings(), 0u);
  EXPECT_FALSE(ix.knowsModel("m"));
}

}  // namespace
}  // namespace kvgate::hints
