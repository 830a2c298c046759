// Limit records: strict parsing of the REST bodies, and which buckets a request must pass
// (precedence: explicit row > rule defaults > global defaults > unlimited).
#include "governance/limits.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "governance/api_keys.h"

namespace kvgate::governance {
namespace {
using json = nlohmann::json;

std::vector<std::string> keys(const std::vector<BucketSpec>& v) {
  std::vector<std::string> k;
  for (const auto& b : v) k.push_back(b.key);
  return k;
}

const BucketSpec* find(const std::vector<BucketSpec>& v, const std::string& key) {
  for (const auto& b : v)
    if (b.key == key) return &b;
  return nullptr;
}

TEST(Limits, ParsesAndRefusesBodies) {
  auto t = parseTenantLimit(json::parse(R"({"tenant_id":"acme","rps":5,"tokens_per_min":6000,
      "burst_pct":150,"model_limits":[{"model":"llama","tokens_per_min":600}]})"),
                            nullptr);
  ASSERT_TRUE(t) << t.error().what;
  EXPECT_EQ(t->burst_pct, 150);
  ASSERT_EQ(t->model_limits.size(), 1u);
  EXPECT_EQ(toJson(*t)["model_limits"][0]["tokens_per_min"], 600);
  // Omitted model_limits keep the stored ones (tenant rows).
  auto t2 = parseTenantLimit(json::parse(R"({"tenant_id":"acme","rps":1})"), &*t);
  ASSERT_TRUE(t2);
  EXPECT_EQ(t2->model_limits.size(), 1u);
  EXPECT_EQ(t2->tokens_per_min, 0);  // (the rest of the row is replaced)

  for (const char* bad : {
           R"([])", R"({"rps":1})", R"({"tenant_id":""})", R"({"tenant_id":"a|b"})",
           R"({"tenant_id":"tm:x"})", R"({"tenant_id":"a","rps":-1})",
           R"({"tenant_id":"a","rps":"5"})", R"({"tenant_id":"a","tokens_per_min":1.5})",
           R"({"tenant_id":"a","extra":1})", R"({"tenant_id":"a","model_limits":{}})",
           R"({"tenant_id":"a","model_limits":[{"tokens_per_min":5}]})",
           R"({"tenant_id":"a","model_limits":[{"model":"m"},{"model":"m"}]})",
           R"({"tenant_id":"a\u0000b"})", R"({"tenant_id":"a","rps":1e300})"}) {
    EXPECT_FALSE(parseTenantLimit(json::parse(bad), nullptr)) << bad;
  }
  EXPECT_FALSE(parseUserLimit(json::parse(R"({"tenant_id":"a"})")));  // user_id required
  EXPECT_FALSE(parseUserLimit(json::parse(R"({"tenant_id":"a","user_id":"uq:v"})")));
  auto u = parseUserLimit(json::parse(R"({"tenant_id":"a","user_id":"bob","rps":7,
      "burst_size":14,"tokens_per_min":900})"));
  ASSERT_TRUE(u);
  EXPECT_EQ(u->burst_size, 14);

  EXPECT_FALSE(parseDefaults(json::parse(R"({"scope":"global"})")));  // no non-zero limit
  EXPECT_FALSE(parseDefaults(json::parse(R"({"scope":"global","rule_ident":"x","default_user_rps":1})")));
  EXPECT_FALSE(parseDefaults(json::parse(R"({"scope":"rule","default_user_rps":1})")));
  EXPECT_FALSE(parseDefaults(json::parse(R"({"scope":"other","default_user_rps":1})")));
  EXPECT_FALSE(parseDefaults(json::parse(R"({"scope":"rule","rule_ident":"v:svc","default_user_rps":1})")));
  auto d = parseDefaults(json::parse(R"({"scope":"rule","rule_ident":"10.0.0.1:8080","vip_shared_tpm":10})"));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->vip_shared_tpm, 10);
}

TEST(Limits, ExplicitRowBeatsRuleDefaultsBeatsGlobal) {
  LimitTable t;
  LimitDefaults g;
  g.default_tenant_rps = 100;
  g.default_tenant_tpm = 60000;
  g.default_user_tpm = 6000;
  t.global = g;
  LimitDefaults r;
  r.scope = "rule";
  r.rule_ident = "10.0.0.1:80";
  r.default_tenant_tpm = 1200;  // beats the global 60000 on this rule
  t.rules[r.rule_ident] = r;
  TenantLimit row;
  row.tenant_id = "acme";
  row.tokens_per_min = 600;  // beats both for acme
  row.burst_pct = 200;
  row.model_limits = {{"llama", 60}};
  t.tenants["acme"] = row;

  Principal acme{nullptr, "acme", ""};
  auto a = planBuckets(t, acme, "llama", "10.0.0.1:80", "");
  EXPECT_EQ(keys(a), (std::vector<std::string>{"t|acme", "tq|acme", "tm|acme|llama"}));
  EXPECT_DOUBLE_EQ(find(a, "t|acme")->rate_per_s, 100);  // rps: row 0 falls through to global
  EXPECT_DOUBLE_EQ(find(a, "tq|acme")->capacity, 1200);  // 600 x 200 %
  EXPECT_DOUBLE_EQ(find(a, "tq|acme")->rate_per_s, 10);
  EXPECT_DOUBLE_EQ(find(a, "tm|acme|llama")->capacity, 120);  // burst_pct covers model buckets

  Principal other{nullptr, "other", ""};
  auto b = planBuckets(t, other, "llama", "10.0.0.1:80", "");
  EXPECT_DOUBLE_EQ(find(b, "tq|other")->capacity, 1200);  // rule defaults
  auto c = planBuckets(t, other, "llama", "10.0.0.2:80", "");
  EXPECT_DOUBLE_EQ(find(c, "tq|other")->capacity, 60000);  // global defaults
  // A rule row may be named by the rule's name instead of vip:port.
  t.rules["svc"] = r;
  auto n = planBuckets(t, other, "llama", "10.9.9.9:80", "svc");
  EXPECT_DOUBLE_EQ(find(n, "tq|other")->capacity, 1200);

  // No limits at all: nothing to pass.
  LimitTable empty;
  EXPECT_TRUE(planBuckets(empty, acme, "llama", "x:1", "").empty());
}

TEST(Limits, KeyUserAndSharedVipBuckets) {
  LimitTable t;
  LimitDefaults g;
  g.vip_shared_rps = 5;
  g.vip_shared_tpm = 1000;
  g.default_user_rps = 2;
  t.global = g;
  UserLimit u;
  u.tenant_id = "acme";
  u.user_id = "bob";
  u.tokens_per_min = 900;
  u.burst_size = 4;
  u.rps = 3;
  u.model_limits = {{"llama", 90}};
  t.users[userKey("acme", "bob")] = u;
  ApiKey k;
  k.key_id = "00ff";
  k.tenant_id = "acme";
  k.rate_limit_rps = 1;
  k.burst_size = 2;
  k.tokens_per_min = 300;

  // A key: its own RPS and TPM buckets; the shared VIP TPM bucket (every metered request), not
  // the shared VIP RPS one (keyless traffic only).
  auto a = planBuckets(t, Principal{&k, "acme", ""}, "llama", "1.2.3.4:80", "");
  EXPECT_EQ(keys(a), (std::vector<std::string>{"k|00ff", "kq|00ff", "vq|1.2.3.4:80"}));
  EXPECT_DOUBLE_EQ(find(a, "k|00ff")->capacity, 2);
  // A JWT user with a row: user RPS (burst_size), user TPM and user+model TPM.
  auto b = planBuckets(t, Principal{nullptr, "acme", "bob"}, "llama", "1.2.3.4:80", "");
  EXPECT_EQ(keys(b), (std::vector<std::string>{"u|acme|bob", "uq|acme|bob", "um|acme|bob|llama",
                                               "vq|1.2.3.4:80"}));
  EXPECT_DOUBLE_EQ(find(b, "u|acme|bob")->capacity, 4);
  // Another user falls back to default_user_rps.
  auto c = planBuckets(t, Principal{nullptr, "acme", "eve"}, "llama", "1.2.3.4:80", "");
  EXPECT_DOUBLE_EQ(find(c, "u|acme|eve")->rate_per_s, 2);
  // Keyless traffic: the shared VIP RPS and TPM buckets of the rule.
  auto d = planBuckets(t, Principal{}, "llama", "1.2.3.4:80", "");
  EXPECT_EQ(keys(d), (std::vector<std::string>{"v|1.2.3.4:80", "vq|1.2.3.4:80"}));
}

}  // namespace
}  // namespace kvgate::governance
