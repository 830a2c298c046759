// The API keys' requests-per-second buckets on a manual clock, against hand-worked figures.
#include "governance/rate_limit.h"

#include <gtest/gtest.h>

namespace kvgate::governance {
namespace {

constexpr int64_t kS = 1'000'000'000;

TEST(RpsLimiter, BurstThenRefillAtTheRate) {
  RpsLimiter l;
  // 2 rps, burst 3: three at once, the fourth waits (1 token / 2 per s = 0.5 s, rounded up: 1).
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.take("k", 2, 3, 0).ok) << i;
  auto v = l.take("k", 2, 3, 0);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.retry_after_s, 1);
  // 0.5 s later one token is back, not two.
  EXPECT_TRUE(l.take("k", 2, 3, kS / 2).ok);
  EXPECT_FALSE(l.take("k", 2, 3, kS / 2).ok);
  // After 10 s the bucket is full again: three, never more than the burst.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.take("k", 2, 3, 10 * kS).ok);
  EXPECT_FALSE(l.take("k", 2, 3, 10 * kS).ok);
}

TEST(RpsLimiter, DefaultBurstSlowRatesAndUnlimited) {
  RpsLimiter l;
  // burst 0: capacity ceil(rps) = 1 for 0.01 rps; the next token in 100 s.
  EXPECT_TRUE(l.take("slow", 0.01, 0, 0).ok);
  auto v = l.take("slow", 0.01, 0, 0);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.retry_after_s, 100);
  EXPECT_FALSE(l.take("slow", 0.01, 0, 99 * kS).ok);
  EXPECT_TRUE(l.take("slow", 0.01, 0, 100 * kS).ok);
  // rps 0: unlimited, and no bucket is kept.
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(l.take("free", 0, 0, 0).ok);
  EXPECT_EQ(l.buckets(), 1u);
  // Keys are separate.
  EXPECT_TRUE(l.take("other", 0.01, 0, 0).ok);
}

TEST(RpsLimiter, BucketsOfRemovedKeysAreFreed) {
  RpsLimiter l;
  EXPECT_TRUE(l.take("a", 1, 1, 0).ok);
  EXPECT_TRUE(l.take("b", 1, 1, 0).ok);
  KeyTable t;
  t.by_id["a"] = std::make_shared<const ApiKey>();
  l.retain(t);
  EXPECT_EQ(l.buckets(), 1u);
  EXPECT_FALSE(l.take("a", 1, 1, 0).ok);  // a's state kept
  EXPECT_TRUE(l.take("b", 1, 1, 0).ok);   // b starts over (a re-created key gets a full bucket)
}

TEST(RpsLimiter, ExtremeRatesStayBounded) {
  RpsLimiter l;
  // A rate so slow the wait would overflow: Retry-After is capped at a day.
  EXPECT_TRUE(l.take("tiny", 1e-6, 1, 0).ok);
  auto v = l.take("tiny", 1e-6, 1, 0);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.retry_after_s, 86400);
  // 1000 rps: a thousand refills of one millisecond each still admit every request.
  RpsLimiter f;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(f.take("fast", 1000, 1, int64_t(i) * 1'000'000).ok) << i;
}

TEST(RpsLimiter, HitsOfTenantsWithoutKeysArePruned) {
  RpsLimiter l;
  l.countHit("gone");
  l.countHit("kept");
  KeyTable t;
  ApiKey k;
  k.tenant_id = "kept";
  t.by_id["x"] = std::make_shared<const ApiKey>(k);
  l.retain(t);
  const std::string m = l.renderHits();
  EXPECT_EQ(m.find("gone"), std::string::npos);
  EXPECT_NE(m.find("tenant=\"kept\""), std::string::npos);
}

TEST(RpsLimiter, HitsAreExposedPerTenantEscaped) {
  RpsLimiter l;
  l.countHit("acme");
  l.countHit("acme");
  l.countHit("we\"ird\n");
  const std::string m = l.renderHits();
  EXPECT_NE(m.find("loxilb_ai_rate_limit_hits_total{tenant=\"acme\",reason=\"key_rps\"} 2"),
            std::string::npos);
  EXPECT_NE(m.find("tenant=\"we\\\"ird\\n\""), std::string::npos) << m;
}

}  // namespace
}  // namespace kvgate::governance
