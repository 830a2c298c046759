// CachePolicy parsing: defaults from shared/reference/inference-cache.md §3, clear errors.
#include "hints/policy.h"

#include <gtest/gtest.h>

namespace kvgate::hints {
namespace {

TEST(CachePolicy, EmptyDocumentKeepsTheReferenceDefaults) {
  auto p = parsePolicy("{}");
  ASSERT_TRUE(p) << p.error().what;
  EXPECT_EQ(p->eviction, Eviction::kLru);
  EXPECT_EQ(p->eviction_ttl_ms, 30 * 60 * 1000);
  EXPECT_EQ(p->minimum_prefix_tokens, 0);
  EXPECT_EQ(p->minimum_matched_tokens, 64);
  EXPECT_DOUBLE_EQ(p->routing_floor_score, 0.1);
  EXPECT_EQ(p->lookup_timeout_ms, 0);
  EXPECT_TRUE(p->enable_chain_matching);
  EXPECT_FALSE(p->require_chain);
  EXPECT_TRUE(p->enable_tenant_hot);
  EXPECT_TRUE(p->affinity_routing);
}

TEST(CachePolicy, ResourceSpecWithEveryKnob) {
  auto p = parsePolicy(R"({"apiVersion":"x","kind":"CachePolicy","spec":{
    "eviction":"LFU","evictionTTL":"1h30m","minimumPrefixTokens":32,"minimumMatchedTokens":0,
    "routingFloorScore":"2.5","lookupTimeoutMs":3,"affinityRouting":"Disabled",
    "strategy":{"enableChainMatching":false,"enableTenantHot":false},"maxEntries":1000,
    "blockSize":32}})");
  ASSERT_TRUE(p) << p.error().what;
  EXPECT_EQ(p->eviction, Eviction::kLfu);
  EXPECT_EQ(p->eviction_ttl_ms, 90 * 60 * 1000);
  EXPECT_EQ(p->minimum_prefix_tokens, 32);
  EXPECT_EQ(p->minimum_matched_tokens, 0);
  EXPECT_DOUBLE_EQ(p->routing_floor_score, 2.5);
  EXPECT_EQ(p->lookup_timeout_ms, 3);
  EXPECT_FALSE(p->affinity_routing);
  EXPECT_FALSE(p->enable_chain_matching);
  EXPECT_FALSE(p->enable_tenant_hot);
  EXPECT_EQ(p->max_entries, 1000u);
  EXPECT_EQ(p->block_size, 32u);
}

TEST(CachePolicy, EvictionTtlAsGoNanoseconds) {
  // The upstream control plane sends a Go duration as integer nanoseconds.
  auto p = parsePolicy(R"({"evictionTTL": 90000000000})");
  ASSERT_TRUE(p) << p.error().what;
  EXPECT_EQ(p->eviction_ttl_ms, 90'000);
}

TEST(CachePolicy, BadInputIsRefusedWithTheFieldNamed) {
  struct Case {
    const char* doc;
    const char* field;
  } cases[] = {
      {R"({"eviction":"FIFO"})", "eviction"},
      {R"({"evictionTTL":"30 minutes"})", "evictionTTL"},
      {R"({"evictionTTL":"-5m"})", "evictionTTL"},
      {R"({"routingFloorScore":"01"})", "routingFloorScore"},
      {R"({"routingFloorScore":"0.1234567"})", "routingFloorScore"},
      {R"({"routingFloorScore":"123456789"})", "routingFloorScore"},
      {R"({"routingFloorScore":0.1})", "routingFloorScore"},
      {R"({"minimumMatchedTokens":-1})", "minimumMatchedTokens"},
      {R"({"minimumMatchedTokens":"64"})", "minimumMatchedTokens"},
      {R"({"strategy":{"enableChainMatching":"yes"}})", "enableChainMatching"},
      {R"({"strategy":{"requireChain":true,"enableChainMatching":false}})", "requireChain"},
      {R"({"affinityRouting":true})", "affinityRouting"},
      {R"({"minimumMatchedToken":64})", "minimumMatchedToken"},
      {R"({"strategy":{"chain":true}})", "chain"},
      {R"({"blockSize":0})", "blockSize"},
      {R"([1,2])", "policy"},
      {R"({"spec":)", "policy"},
  };
  for (const auto& c : cases) {
    auto p = parsePolicy(c.doc);
    ASSERT_FALSE(p) << c.doc;
    EXPECT_EQ(p.error().source, c.field) << c.doc;
  }
  std::string big(70 * 1024, ' ');
  EXPECT_FALSE(parsePolicy("{}" + big));
}

TEST(CachePolicy, FloorScorePattern) {
  EXPECT_DOUBLE_EQ(*parseFloorScore("0"), 0.0);
  EXPECT_DOUBLE_EQ(*parseFloorScore("12345678.123456"), 12345678.123456);
  EXPECT_FALSE(parseFloorScore(""));
  EXPECT_FALSE(parseFloorScore("."));
  EXPECT_FALSE(parseFloorScore("1."));
  EXPECT_FALSE(parseFloorScore("-1"));
  EXPECT_FALSE(parseFloorScore("1e3"));
}

}  // namespace
}  // namespace kvgate::hints
