// LookupRoute decisions against hand-computed expectations (shared/reference/inference-cache.md
// §2-§4 for the order, the ranking factors and the affinity formula; golden fingerprints from
// shared/golden/xxh3_fingerprint.json; affinity indices computed with Python's hashlib).
#include "hints/lookup.h"

#include <gtest/gtest.h>

#include <chrono>

namespace kvgate::hints {
namespace {

using namespace std::chrono_literals;

std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[size_t(i)] = static_cast<char>(v & 0xff);
  return s;
}

// Golden prefix fingerprints of tokens 0..63 in blocks of 16.
const uint64_t kG[4] = {15310707395893867146ull, 13769157705258532664ull,
                        11879827756109914528ull, 3888788807566526800ull};

struct Fixture : ::testing::Test {
  common::ManualClock clock;
  CachePolicy pol;
  std::unique_ptr<HintIndex> ix;
  void SetUp() override {
    pol.minimum_matched_tokens = 0;
    ix = std::make_unique<HintIndex>(clock, pol);
  }
  void setPolicy() { ix->setPolicy(pol); }
  void reportChain(const std::string& replica, std::vector<uint64_t> blocks,
                   std::string tenant = "t", std::string model = "m",
                   std::string scheme = "vllm") {
    UpdateIn u = makeUpdate(replica, model, tenant, scheme, "");
    PrefixIn p;
    for (uint64_t b : blocks) {
      p.block_hashes.push_back(be8(b));
      p.block_token_counts.push_back(16);
    }
    u.prefixes.push_back(p);
    ASSERT_TRUE(ix->report(u).accepted);
  }
  void stats(const std::string& replica, float hit_rate, float pressure) {
    UpdateIn u = makeUpdate(replica, "m", "t", "vllm", "");
    u.has_stats = true;
    u.stats.hit_rate = hit_rate;
    u.stats.pressure = pressure;
    ASSERT_TRUE(ix->report(u).accepted);
  }
  std::vector<std::string> chain_store;
  std::vector<std::string_view> chain_bytes;
  std::vector<int32_t> chain_counts;
  LookupRequest chainReq(std::vector<uint64_t> blocks) {
    chain_store.clear();
    chain_bytes.clear();
    chain_counts.clear();
    for (uint64_t b : blocks) {
      chain_store.push_back(be8(b));
      chain_counts.push_back(16);
    }
    chain_bytes.assign(chain_store.begin(), chain_store.end());
    LookupRequest q;
    q.model = "m", q.tenant = "t", q.scheme = "vllm";
    q.block_hashes = chain_bytes.data();
    q.n_blocks = chain_bytes.size();
    q.block_token_counts = chain_counts.data();
    q.n_counts = chain_counts.size();
    return q;
  }
  LookupOutcome run(const LookupRequest& q, int64_t deadline = 0) {
    return lookupRoute(*ix, q, nullptr, deadline);
  }
};

TEST_F(Fixture, TokenIdsResolveToTheGoldenChain) {
  reportChain("r1", {kG[0], kG[1], kG[2], kG[3]});
  std::vector<uint32_t> toks(64);
  for (uint32_t i = 0; i < 64; ++i) toks[i] = i;
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm";
  q.token_ids = toks.data();
  q.n_tokens = toks.size();
  auto o = run(q);
  EXPECT_EQ(o.reason, Reason::kPrefixMatch);
  ASSERT_EQ(o.scores.size(), 1u);
  EXPECT_EQ(o.scores[0].replica, "r1");
  EXPECT_EQ(o.scores[0].matched_tokens, 64);
  EXPECT_FLOAT_EQ(o.scores[0].score, 64.0f);  // fresh 1, no pressure, no SLO, one replica
  EXPECT_FLOAT_EQ(o.scores[0].prob, 1.0f);
  EXPECT_TRUE(o.echoed_tokens.empty());  // echoed only for prompt_text
  // 10 tokens: no full block, fail open.
  q.n_tokens = 10;
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
}

TEST_F(Fixture, ChainLeadingRunWithAReplicaThatDropsOut) {
  reportChain("r1", {kG[0], kG[1], kG[2], kG[3]});
  reportChain("r2", {kG[0], kG[1], kG[3]});  // misses block 2: cannot rejoin at block 3
  reportChain("r3", {999});                   // serves the scope, matches nothing
  auto o = run(chainReq({kG[0], kG[1], kG[2], kG[3]}));
  ASSERT_EQ(o.reason, Reason::kPrefixMatch);
  ASSERT_EQ(o.scores.size(), 2u);
  // T = 3 serving replicas. r1: 64 tokens, m = 1 -> dp 2/3. r2: 32 tokens, m = 2 -> dp 1/3.
  EXPECT_EQ(o.scores[0].replica, "r1");
  EXPECT_EQ(o.scores[0].matched_tokens, 64);
  EXPECT_NEAR(o.scores[0].score, 64.0 * 2 / 3, 1e-4);
  EXPECT_EQ(o.scores[1].replica, "r2");
  EXPECT_EQ(o.scores[1].matched_tokens, 32);
  EXPECT_NEAR(o.scores[1].score, 32.0 / 3, 1e-4);
}

TEST_F(Fixture, SharedPrefixHasNoDistinguishingPower) {
  // Every serving replica holds the block: dp = 0, the top score 0 is under the 0.1 floor and the
  // answer falls to affinity (enabled by default).
  reportChain("r1", {kG[0]});
  reportChain("r2", {kG[0]});
  auto o = run(chainReq({kG[0]}));
  EXPECT_EQ(o.reason, Reason::kAffinityHint);
  ASSERT_EQ(o.scores.size(), 1u);
  EXPECT_EQ(o.scores[0].score, 0.0f);
  pol.affinity_routing = false;
  setPolicy();
  EXPECT_EQ(run(chainReq({kG[0]})).reason, Reason::kNoHint);
}

TEST_F(Fixture, FreshnessPressureAndSloBiasOnAManualClock) {
  reportChain("r1", {kG[0], kG[1]});
  clock.advance(15min);  // half the 30 min TTL: freshness 0.5
  stats("r1", 0.0f, 0.25f);  // pressure 0.25 -> factor 0.75 (fresh stats)
  auto q = chainReq({kG[0], kG[1]});
  auto o = run(q);
  ASSERT_EQ(o.reason, Reason::kPrefixMatch);
  EXPECT_NEAR(o.scores[0].score, 32 * 0.5 * 0.75, 1e-4);
  EXPECT_NEAR(o.scores[0].prob, 0.5, 1e-6);
  q.ttft_ms = 100;  // tight SLO: x (1 + freshness)
  EXPECT_NEAR(run(q).scores[0].score, 32 * 0.5 * 0.75 * 1.5, 1e-4);
  q.ttft_ms = 200;  // not below the 200 ms threshold
  EXPECT_NEAR(run(q).scores[0].score, 32 * 0.5 * 0.75, 1e-4);
  // The chain's freshness is its oldest block's: refresh block 1 only.
  reportChain("r1", {kG[1]});
  EXPECT_NEAR(run(chainReq({kG[0], kG[1]})).scores[0].prob, 0.5, 1e-6);
  // Past the TTL a holding no longer matches.
  clock.advance(15min);
  auto late = run(chainReq({kG[0], kG[1]}));
  EXPECT_NE(late.reason, Reason::kPrefixMatch);
}

TEST_F(Fixture, FloorsDropReplicasThenTheWholeAnswer) {
  reportChain("r1", {kG[0], kG[1], kG[2], kG[3]});
  reportChain("r2", {kG[0], kG[1]});
  reportChain("r3", {7});
  pol.minimum_matched_tokens = 64;
  pol.affinity_routing = false;
  setPolicy();
  auto o = run(chainReq({kG[0], kG[1], kG[2], kG[3]}));
  ASSERT_EQ(o.reason, Reason::kPrefixMatch);
  ASSERT_EQ(o.scores.size(), 1u);  // r2 (32 tokens) is under the 64-token floor
  EXPECT_EQ(o.scores[0].replica, "r1");
  // r1's score: 64 x (1 - 1/3) = 42.67. A floor of 42 keeps it, 43 drops the answer.
  pol.routing_floor_score = 42;
  setPolicy();
  EXPECT_EQ(run(chainReq({kG[0], kG[1], kG[2], kG[3]})).reason, Reason::kPrefixMatch);
  pol.routing_floor_score = 43;
  setPolicy();
  EXPECT_EQ(run(chainReq({kG[0], kG[1], kG[2], kG[3]})).reason, Reason::kNoHint);
}

TEST_F(Fixture, ExactMatchUsesTheIngestedTokenCount) {
  UpdateIn u = makeUpdate("r1", "m", "t", "sglang", "");
  PrefixIn p;
  p.prefix_hash = "abc";  // not 8 bytes: folded with XXH3
  p.token_count = 100;
  u.prefixes.push_back(p);
  ASSERT_TRUE(ix->report(u).accepted);
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "sglang", q.prefix_hash = "abc";
  q.prefix_token_count = 7;  // not used for the score
  auto o = run(q);
  ASSERT_EQ(o.reason, Reason::kPrefixMatch);
  EXPECT_EQ(o.scores[0].matched_tokens, 100);
  EXPECT_FLOAT_EQ(o.scores[0].score, 100.0f);
  // The same key under another scheme never matches: the vLLM domain is disjoint.
  q.scheme = "vllm";
  EXPECT_EQ(run(q).reason, Reason::kUnknownHashScheme);
}

TEST_F(Fixture, TenantHotForAnExactMissWithFreshStats) {
  reportChain("r1", {1});
  reportChain("r2", {2});
  stats("r1", 0.5f, 0.0f);
  stats("r2", 0.05f, 0.0f);  // under the 0.1 hit-rate floor
  clock.advance(60s);        // recency 1 - 1/5 = 0.8
  const std::string key = be8(12345);
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm", q.prefix_hash = key;
  auto o = run(q);
  ASSERT_EQ(o.reason, Reason::kTenantHot);
  ASSERT_EQ(o.scores.size(), 1u);
  EXPECT_EQ(o.scores[0].replica, "r1");
  EXPECT_NEAR(o.scores[0].score, 0.5 * 0.8, 1e-6);
  EXPECT_EQ(o.scores[0].matched_tokens, 0);
  EXPECT_NEAR(o.scores[0].prob, 0.5, 1e-6);
  // A chain request never gets TENANT_HOT.
  EXPECT_NE(run(chainReq({12345})).reason, Reason::kTenantHot);
  // Stats five minutes old are no longer hot.
  clock.advance(4min);
  EXPECT_NE(run(q).reason, Reason::kTenantHot);
  // Disabled by policy: NO_HINT, not a classification.
  pol.enable_tenant_hot = false;
  pol.affinity_routing = false;
  setPolicy();
  stats("r1", 0.5f, 0.0f);
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
}

TEST_F(Fixture, MissClassifierOuterKeyFirstNeverOnAnEmptyIndex) {
  const std::string key = be8(5);
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm", q.prefix_hash = key;
  EXPECT_EQ(run(q).reason, Reason::kNoHint);  // cold index: not a misconfiguration
  reportChain("r1", {1});
  q.tenant = "other";
  EXPECT_EQ(run(q).reason, Reason::kUnknownTenant);
  q.tenant = "t", q.model = "other";
  EXPECT_EQ(run(q).reason, Reason::kUnknownModel);
  q.model = "m", q.scheme = "vllm-v1";
  EXPECT_EQ(run(q).reason, Reason::kUnknownHashScheme);
  // UNKNOWN_* wins over affinity; a known scope with a novel prefix gets affinity.
  q.scheme = "vllm";
  EXPECT_EQ(run(q).reason, Reason::kAffinityHint);
  // Empty keys are NO_HINT, never UNKNOWN_*.
  q.tenant = "";
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
  q.tenant = "t", q.scheme = "";
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
}

TEST_F(Fixture, AffinityFormulaAgainstHashlib) {
  // sorted(serving) = [r-a, r-b, r-c]; BE_u64(SHA256(seed)[:8]) % 3 computed with Python:
  // seed 01..08 (an exact prefix_hash) -> 2; chain [aa x8, bb x8] length-prefixed -> 0.
  reportChain("r-c", {1});
  reportChain("r-a", {2});
  reportChain("r-b", {3});
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm";
  std::string seed = {1, 2, 3, 4, 5, 6, 7, 8};
  q.prefix_hash = seed;
  pol.enable_tenant_hot = false;
  setPolicy();
  auto o = run(q);
  ASSERT_EQ(o.reason, Reason::kAffinityHint);
  ASSERT_EQ(o.scores.size(), 1u);
  EXPECT_EQ(o.scores[0].replica, "r-c");
  EXPECT_EQ(o.scores[0].score, 0.0f);
  EXPECT_EQ(o.scores[0].matched_tokens, 0);
  auto c = run(chainReq({0xaaaaaaaaaaaaaaaaull, 0xbbbbbbbbbbbbbbbbull}));
  ASSERT_EQ(c.reason, Reason::kAffinityHint);
  EXPECT_EQ(c.scores[0].replica, "r-a");
}

TEST_F(Fixture, PolicyGatesDeadlineAndHostileInput) {
  reportChain("r1", {kG[0]});
  const std::string key = be8(kG[0]);
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm", q.prefix_hash = key;
  pol.require_chain = true;
  setPolicy();
  EXPECT_EQ(run(q).reason, Reason::kPolicyRequiresChain);
  EXPECT_EQ(run(chainReq({kG[0]})).reason, Reason::kPrefixMatch);
  pol.require_chain = false;
  setPolicy();
  // A deadline already past.
  EXPECT_EQ(run(q, clock.nowNs()).reason, Reason::kTimeout);
  EXPECT_EQ(run(q, clock.nowNs() + 1'000'000'000).reason, Reason::kPrefixMatch);
  // Chain arrays of different lengths: NO_HINT (and not affinity).
  auto bad = chainReq({kG[0], 2});
  bad.n_counts = 1;
  EXPECT_EQ(run(bad).reason, Reason::kNoHint);
  // Enormous token list: fail open.
  std::vector<uint32_t> huge((size_t(1) << 20) + 1, 7);
  LookupRequest t;
  t.model = "m", t.tenant = "t", t.scheme = "vllm";
  t.token_ids = huge.data();
  t.n_tokens = huge.size();
  EXPECT_EQ(run(t).reason, Reason::kNoHint);
  // Negative block counts cannot produce a negative match.
  auto neg = chainReq({kG[0]});
  chain_counts[0] = -50;
  EXPECT_NE(run(neg).reason, Reason::kPrefixMatch);
  // The reserved probe tenant.
  q.tenant = kProbeTenant;
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
  // prompt_text without a tokenizer fails open.
  LookupRequest p;
  p.model = "m", p.tenant = "t", p.scheme = "vllm", p.prompt_text = "hello";
  EXPECT_EQ(run(p).reason, Reason::kNoHint);
}

TEST_F(Fixture, MinimumPrefixTokensDowngrade) {
  reportChain("r1", {kG[0], kG[1]});
  reportChain("r2", {9});
  pol.minimum_prefix_tokens = 48;
  setPolicy();
  // 32 tokens < 48: the match is downgraded to affinity.
  EXPECT_EQ(run(chainReq({kG[0], kG[1]})).reason, Reason::kAffinityHint);
  pol.affinity_routing = false;
  setPolicy();
  EXPECT_EQ(run(chainReq({kG[0], kG[1]})).reason, Reason::kNoHint);
  pol.minimum_prefix_tokens = 32;
  setPolicy();
  EXPECT_EQ(run(chainReq({kG[0], kG[1]})).reason, Reason::kPrefixMatch);
}

// Reference order (inference-cache.md §2): 4 match then both floors, 5 TENANT_HOT, 6 the
// classifier, 7 the minimumPrefixTokens downgrade.
TEST_F(Fixture, FloorsComeBeforeTenantHotAndTheClassifierBeforeTheDowngrade) {
  // An exact match under the matched-tokens floor is no match: the lookup goes on to TENANT_HOT.
  UpdateIn u = makeUpdate("r1", "m", "t", "vllm", "");
  PrefixIn p;
  p.prefix_hash = be8(77);
  p.token_count = 32;
  u.prefixes.push_back(p);
  ASSERT_TRUE(ix->report(u).accepted);
  stats("r1", 0.5f, 0.0f);
  pol.minimum_matched_tokens = 64;
  setPolicy();
  LookupRequest q;
  q.model = "m", q.tenant = "t", q.scheme = "vllm";
  const std::string key = be8(77);
  q.prefix_hash = key;
  auto o = run(q);
  EXPECT_EQ(o.reason, Reason::kTenantHot);
  ASSERT_EQ(o.scores.size(), 1u);
  EXPECT_EQ(o.scores[0].matched_tokens, 0);
  // A short prompt for an unknown tenant hears UNKNOWN_TENANT (step 6) even with affinity off,
  // where the downgrade (step 7) would have answered NO_HINT.
  pol.minimum_matched_tokens = 0;
  pol.minimum_prefix_tokens = 1000;
  pol.affinity_routing = false;
  setPolicy();
  q.tenant = "nobody";
  EXPECT_EQ(run(q).reason, Reason::kUnknownTenant);
  q.tenant = "t";
  EXPECT_EQ(run(q).reason, Reason::kNoHint);  // known, matched, downgraded
}

TEST_F(Fixture, ChainCountsMustBePositive) {
  reportChain("r1", {kG[0], kG[1]});
  auto q = chainReq({kG[0], kG[1]});
  chain_counts[1] = -16;
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
  chain_counts[1] = 0;
  EXPECT_EQ(run(q).reason, Reason::kNoHint);
  chain_counts[1] = 16;
  EXPECT_EQ(run(q).reason, Reason::kPrefixMatch);
}

TEST_F(Fixture, PromptTextIsTokenizedAndEchoed) {
  reportChain("r1", {kG[0]});
  PromptTokenizer tok = [](std::string_view model, std::string_view text) {
    std::vector<uint32_t> t(16);
    for (uint32_t i = 0; i < 16; ++i) t[i] = i;
    return std::optional<std::vector<uint32_t>>(t);
  };
  LookupRequest p;
  p.model = "m", p.tenant = "t", p.scheme = "vllm", p.prompt_text = "anything";
  auto o = lookupRoute(*ix, p, tok, 0);
  EXPECT_EQ(o.reason, Reason::kPrefixMatch);
  EXPECT_EQ(o.echoed_tokens.size(), 16u);
  EXPECT_EQ(o.scores[0].matched_tokens, 16);
}

}  // namespace
}  // namespace kvgate::hints
