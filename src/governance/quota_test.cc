// The quota ledger on a manual clock, against hand-worked figures: RPS buckets (the API keys'
// rate_limit_rps, as before the ledger), TPM reservation, rollback, settlement, debt and refill.
#include "governance/quota.h"

#include <gtest/gtest.h>

namespace kvgate::governance {
namespace {

constexpr int64_t kS = 1'000'000'000;

BucketSpec rps(const std::string& key, double rate, double cap) {
  return {key, LimitReason::kKeyRps, rate, cap};
}
BucketSpec tpm(const std::string& key, int64_t per_min, LimitReason r = LimitReason::kTenantTpm,
               int64_t burst_pct = 0) {
  return {key, r, double(per_min) / 60.0, tpmCapacity(per_min, burst_pct)};
}

TEST(QuotaLedger, RpsBurstThenRefillAtTheRate) {
  QuotaLedger l;
  const std::vector<BucketSpec> s{rps("k|a", 2, 3)};
  // 2 rps, burst 3: three at once, the fourth waits (1 token / 2 per s = 0.5 s, rounded up: 1).
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.admit(s, 0, 0).ok) << i;
  auto v = l.admit(s, 0, 0);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.reason, LimitReason::kKeyRps);
  EXPECT_EQ(v.retry_after_s, 1);
  // 0.5 s later one token is back, not two.
  EXPECT_TRUE(l.admit(s, 0, kS / 2).ok);
  EXPECT_FALSE(l.admit(s, 0, kS / 2).ok);
  // After 10 s the bucket is full again: three, never more than the burst.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.admit(s, 0, 10 * kS).ok);
  EXPECT_FALSE(l.admit(s, 0, 10 * kS).ok);
}

TEST(QuotaLedger, SlowRatesAndRetryAfterCap) {
  QuotaLedger l;
  // 0.01 rps, capacity 1: the next token in 100 s.
  const std::vector<BucketSpec> slow{rps("k|slow", 0.01, 1)};
  EXPECT_TRUE(l.admit(slow, 0, 0).ok);
  auto v = l.admit(slow, 0, 0);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.retry_after_s, 100);
  EXPECT_FALSE(l.admit(slow, 0, 99 * kS).ok);
  EXPECT_TRUE(l.admit(slow, 0, 100 * kS).ok);
  // A rate so slow the wait would overflow: Retry-After is capped at a day.
  const std::vector<BucketSpec> tiny{rps("k|tiny", 1e-6, 1)};
  EXPECT_TRUE(l.admit(tiny, 0, 0).ok);
  EXPECT_EQ(l.admit(tiny, 0, 0).retry_after_s, 86400);
  // 1000 rps, capacity 1: a refill of one millisecond each time admits every request.
  const std::vector<BucketSpec> fast{rps("k|fast", 1000, 1)};
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(l.admit(fast, 0, int64_t(i) * 1'000'000).ok) << i;
}

TEST(QuotaLedger, TpmReservesSettlesAndGoesIntoDebt) {
  QuotaLedger l;
  // 600 tokens per minute = 10 per second, capacity 600.
  const std::vector<BucketSpec> s{tpm("tq|acme", 600)};
  auto a = l.admit(s, 500, 0);  // reserve 500: level 100
  ASSERT_TRUE(a.ok);
  ASSERT_EQ(a.held.size(), 1u);
  EXPECT_DOUBLE_EQ(a.held[0].amount, 500);
  EXPECT_DOUBLE_EQ(l.level("tq|acme", 10, 600, 0), 100);
  // A second request of 200 needs 200 > 100: refused, Retry-After (200-100)/10 = 10 s.
  auto b = l.admit(s, 200, 0);
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.reason, LimitReason::kTenantTpm);
  EXPECT_EQ(b.retry_after_s, 10);
  // Settlement: the engine used 50 of the 500 reserved: level 100 + 500 - 50 = 550.
  l.settle(a.held, 50, 0);
  EXPECT_DOUBLE_EQ(l.level("tq|acme", 10, 600, 0), 550);
  // Now a request that reserves 100 but uses 1500 (more than the whole bucket): debt.
  auto c = l.admit(s, 100, 0);  // level 450
  ASSERT_TRUE(c.ok);
  l.settle(c.held, 1500, 0);  // 450 + 100 - 1500 = -950
  EXPECT_DOUBLE_EQ(l.level("tq|acme", 10, 600, 0), -950);
  // In debt even a request reserving nothing is refused, until the level is back at 0:
  // 950 / 10 = 95 s.
  auto d = l.admit(s, 0, 0);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.retry_after_s, 95);
  EXPECT_FALSE(l.admit(s, 0, 94 * kS).ok);
  EXPECT_TRUE(l.admit(s, 0, 95 * kS).ok);
  // Refill stops at the capacity.
  EXPECT_DOUBLE_EQ(l.level("tq|acme", 10, 600, 1000 * kS), 600);
}

TEST(QuotaLedger, ARequestLargerThanTheBucketPassesAFullBucket) {
  QuotaLedger l;
  const std::vector<BucketSpec> s{tpm("tq|t", 60)};  // 1 token/s, capacity 60
  auto a = l.admit(s, 1000, 0);  // holds min(1000, 60) = 60: a full bucket passes it
  ASSERT_TRUE(a.ok);
  EXPECT_DOUBLE_EQ(a.held[0].amount, 60);
  EXPECT_DOUBLE_EQ(l.level("tq|t", 1, 60, 0), 0);
  // Only a full bucket passes it again: 60 / 1 = 60 s.
  EXPECT_EQ(l.admit(s, 1000, 0).retry_after_s, 60);
  // Settled at 1000 used: 0 + 60 - 1000 = -940 (debt), then 1000 s until it is full again.
  l.settle(a.held, 1000, 0);
  EXPECT_DOUBLE_EQ(l.level("tq|t", 1, 60, 0), -940);
  EXPECT_EQ(l.admit(s, 1000, 0).retry_after_s, 1000);
}

TEST(QuotaLedger, BurstPctSetsCapacityNotRate) {
  EXPECT_DOUBLE_EQ(tpmCapacity(600, 0), 600);
  EXPECT_DOUBLE_EQ(tpmCapacity(600, 150), 900);
  EXPECT_DOUBLE_EQ(tpmCapacity(600, 5000), 6000);  // clamped at 1000 %
  EXPECT_DOUBLE_EQ(tpmCapacity(600, 1), 6);
  QuotaLedger l;
  const std::vector<BucketSpec> s{tpm("tq|b", 600, LimitReason::kTenantTpm, 150)};
  EXPECT_TRUE(l.admit(s, 900, 0).ok);  // capacity 900
  EXPECT_FALSE(l.admit(s, 10, 0).ok);
  EXPECT_EQ(l.admit(s, 10, 0).retry_after_s, 1);  // refill stays 10/s: 10 tokens in 1 s
}

TEST(QuotaLedger, ARefusalRollsBackWhatEarlierBucketsGave) {
  QuotaLedger l;
  // tenant TPM 6000 (admits), then tenant+model TPM 60 (refuses a 100-token request after one).
  const std::vector<BucketSpec> s{rps("t|acme", 100, 100), tpm("tq|acme", 6000),
                                  tpm("tm|acme|m", 60, LimitReason::kTenantModelTpm)};
  auto a = l.admit(s, 100, 0);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(a.held.size(), 2u);
  auto b = l.admit(s, 100, 0);
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.reason, LimitReason::kTenantModelTpm);
  EXPECT_TRUE(b.held.empty());
  // The refused request left the earlier buckets as they were: tenant 6000 - 100, rps 100 - 1.
  EXPECT_DOUBLE_EQ(l.level("tq|acme", 100, 6000, 0), 5900);
  EXPECT_DOUBLE_EQ(l.level("t|acme", 100, 100, 0), 99);
}

TEST(QuotaLedger, ALoweredLimitAppliesAtOnceAndBucketsAreSeparate) {
  QuotaLedger l;
  EXPECT_TRUE(l.admit({rps("k|x", 10, 10)}, 0, 0).ok);  // level 9
  EXPECT_TRUE(l.admit({rps("k|x", 1, 1)}, 0, 0).ok);    // clamped to 1, then 0
  EXPECT_FALSE(l.admit({rps("k|x", 1, 1)}, 0, 0).ok);
  EXPECT_TRUE(l.admit({rps("k|y", 1, 1)}, 0, 0).ok);
}

TEST(QuotaMetrics, HitsAndTokensPerTenantEscapedAndBounded) {
  QuotaMetrics m;
  m.hit("acme", LimitReason::kKeyRps);
  m.hit("acme", LimitReason::kKeyRps);
  m.hit("acme", LimitReason::kTenantTpm);
  m.hit("we\"ird\n", LimitReason::kVipRps);
  m.settled("acme", 120, 0, false);
  m.settled("acme", 0, 30, true);
  LimitTable t;
  TenantLimit row;
  row.tenant_id = "acme";
  row.tokens_per_min = 600;
  t.tenants["acme"] = row;
  QuotaLedger l;
  ASSERT_TRUE(l.admit({tpm("tq|acme", 600)}, 150, 0).ok);  // a quarter of 600 used
  const std::string s = m.render(t, l, 0);
  EXPECT_NE(s.find("loxilb_ai_rate_limit_hits_total{tenant=\"acme\",reason=\"key_rps\"} 2\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("loxilb_ai_rate_limit_hits_total{tenant=\"acme\",reason=\"tenant_tpm\"} 1\n"),
            std::string::npos);
  EXPECT_NE(s.find("loxilb_ai_token_quota_denied_total{tenant=\"acme\"} 1\n"), std::string::npos);
  EXPECT_NE(s.find("tenant=\"we\\\"ird\\n\",reason=\"vip_rps\""), std::string::npos);
  EXPECT_NE(s.find("loxilb_ai_tokens_consumed_total{tenant=\"acme\"} 120\n"), std::string::npos);
  EXPECT_NE(s.find("loxilb_ai_tokens_estimated_total{tenant=\"acme\"} 30\n"), std::string::npos);
  EXPECT_NE(s.find("loxilb_ai_tokens_missing_total{tenant=\"acme\"} 1\n"), std::string::npos);
  EXPECT_NE(s.find("loxilb_ai_token_quota_limit_tokens{tenant=\"acme\"} 600\n"), std::string::npos);
  EXPECT_NE(s.find("loxilb_ai_token_quota_utilization{tenant=\"acme\"} 0.2500\n"),
            std::string::npos);
  // The tenant label is bounded: past kMaxTenants, others share "_other".
  for (size_t i = 0; i < QuotaMetrics::kMaxTenants + 10; ++i)
    m.hit("t" + std::to_string(i), LimitReason::kUserRps);
  const std::string s2 = m.render(t, l, 0);
  EXPECT_NE(s2.find("tenant=\"_other\",reason=\"user_rps\"} "), std::string::npos);
  EXPECT_EQ(s2.find("tenant=\"t1030\""), std::string::npos);
}

}  // namespace
}  // namespace kvgate::governance
