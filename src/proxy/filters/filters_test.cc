// The request filters (proxy/filters/) with their governance services injected: the tests give
// each filter registries of their own, never the process-wide ones (which stay empty and not
// loaded here, so a filter that reached them would refuse with 503).
#include <gtest/gtest.h>

#include <optional>

#include "governance/api_keys.h"
#include "governance/jwt_auth.h"
#include "governance/limits.h"
#include "governance/quota.h"
#include "governance/services.h"
#include "proxy/filters/credentials.h"
#include "proxy/filters/quota.h"

namespace kvgate::proxy {
namespace {

struct Fixture {
  governance::KeyRegistry keys;
  governance::JwtRegistry jwt;
  governance::LimitRegistry limits;
  governance::QuotaLedger ledger;
  governance::QuotaMetrics quota_metrics;
  governance::Services gov;
  ProxyOptions opts;
  DataPlaneStats stats;
  Route route;
  std::string raw_key;  // the one key of the table: kvg-<id>-<secret>
  std::string key_id;

  Fixture() {
    gov.keys = &keys;
    gov.jwt = &jwt;
    gov.limits = &limits;
    gov.ledger = &ledger;
    gov.quota_metrics = &quota_metrics;
    governance::ApiKey k;
    k.tenant_id = "acme";
    k.allowed_models = {"m1"};
    k.rate_limit_rps = 1;  // one request, then the key's RPS bucket refuses for a second
    k.burst_size = 1;
    raw_key = governance::mintKey(k);
    key_id = k.key_id;
    auto t = std::make_shared<governance::KeyTable>();
    t->loaded = true;
    t->by_id[k.key_id] = std::make_shared<const governance::ApiKey>(k);
    keys.publish(t);
    auto lt = std::make_shared<governance::LimitTable>();
    lt->loaded = true;
    lt->index();
    limits.publish(lt);
  }
};

// A request head parsed from `text` (kept alive in `buf`).
struct Req {
  std::string buf;
  Request req;
  explicit Req(std::string text) : buf(std::move(text)) {
    http::ParseError perr;
    const int n = http::parseRequestHead(buf.data(), buf.size(), 64 * 1024, req.head, perr);
    EXPECT_GT(n, 0) << perr.reason;
    req.head_bytes = static_cast<size_t>(n);
  }
};

FilterEnv envOf(Fixture& f, Req& r, RequestCtx& rq, std::string_view model, bool metered = true) {
  return FilterEnv{r.req, rq, f.route, model, metered, f.gov, f.opts, nullptr, f.stats,
                   1'000'000'000'000};
}

std::vector<std::string> names(const std::vector<RequestFilter>& chain) {
  std::vector<std::string> out;
  for (const auto& f : chain) out.emplace_back(f.name);
  return out;
}

Verdict runAsync(const RequestFilter& f, FilterEnv& env) {
  asio::io_context io;
  std::optional<Verdict> out;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> { out = co_await f.check_async(env); },
                 asio::detached);
  io.run();
  EXPECT_TRUE(out.has_value());
  return out.value_or(Verdict::refused(-1, "not_run", ""));
}

TEST(RequestFilters, ChainFollowsTheRule) {
  config::RuleSpec open;
  EXPECT_EQ(names(requestFilters(open)), (std::vector<std::string>{"quota"}));
  for (const char* mode : {"required", "jwt", "apikey-or-jwt"}) {
    config::RuleSpec r;
    r.api_key_auth = mode;
    EXPECT_EQ(names(requestFilters(r)), (std::vector<std::string>{"credentials", "quota"}))
        << mode;
  }
}

TEST(RequestFilters, CredentialsAdmitAKeyFromTheInjectedTable) {
  Fixture f;
  f.route.rule.api_key_auth = "required";
  Req r("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + f.raw_key +
        "\r\nContent-Length: 0\r\n\r\n");
  RequestCtx rq;
  rq.begin({});
  FilterEnv env = envOf(f, r, rq, "m1");
  const Verdict v = credentialsFilter(env);
  EXPECT_TRUE(v.ok()) << v.status << " " << v.message;
  EXPECT_EQ(rq.outcome.key_id, f.key_id);
  EXPECT_EQ(rq.outcome.tenant, "acme");
  ASSERT_TRUE(rq.key);
  EXPECT_EQ(rq.key->key_id, f.key_id);
  EXPECT_TRUE(rq.strip_authorization);  // the bearer never reaches the engine

  // The same key as X-Api-Key: nothing to strip from Authorization.
  Req r2("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-Api-Key: " + f.raw_key +
         "\r\nContent-Length: 0\r\n\r\n");
  RequestCtx rq2;
  rq2.begin({});
  FilterEnv env2 = envOf(f, r2, rq2, "m1");
  EXPECT_TRUE(credentialsFilter(env2).ok());
  EXPECT_FALSE(rq2.strip_authorization);
}

TEST(RequestFilters, CredentialsRefuse) {
  Fixture f;
  f.route.rule.api_key_auth = "required";
  const std::string with_key = "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-Api-Key: " +
                               f.raw_key + "\r\nContent-Length: 0\r\n\r\n";
  {  // a model the key may not use
    Req r(with_key);
    RequestCtx rq;
    FilterEnv env = envOf(f, r, rq, "m2");
    const Verdict v = credentialsFilter(env);
    EXPECT_EQ(v.status, 403);
    EXPECT_EQ(v.code, "model_not_allowed");
    EXPECT_EQ(v.param, "model");
    EXPECT_EQ(v.message, "this API key may not use model 'm2'");
    EXPECT_FALSE(rq.key);
  }
  {  // no key at all
    Req r("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
    RequestCtx rq;
    FilterEnv env = envOf(f, r, rq, "m1");
    const Verdict v = credentialsFilter(env);
    EXPECT_EQ(v.status, 401);
    EXPECT_EQ(v.code, "invalid_api_key");
  }
  {  // a wrong secret for a known id
    std::string bad = f.raw_key;
    bad.back() = bad.back() == 'A' ? 'B' : 'A';
    Req r("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-Api-Key: " + bad +
          "\r\nContent-Length: 0\r\n\r\n");
    RequestCtx rq;
    FilterEnv env = envOf(f, r, rq, "m1");
    EXPECT_EQ(credentialsFilter(env).status, 401);
  }
  {  // the injected key table not loaded: fail closed
    f.keys.publish(std::make_shared<const governance::KeyTable>());
    Req r(with_key);
    RequestCtx rq;
    FilterEnv env = envOf(f, r, rq, "m1");
    const Verdict v = credentialsFilter(env);
    EXPECT_EQ(v.status, 503);
    EXPECT_EQ(v.code, "policy_store_unavailable");
  }
  {  // jwt: a profile the injected JWT table does not have
    f.route.rule.api_key_auth = "jwt";
    f.route.rule.jwt_profile = "corp";
    Req r("GET /v1/models HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer x.y.z\r\n\r\n");
    RequestCtx rq;
    FilterEnv env = envOf(f, r, rq, "m1");
    const Verdict v = credentialsFilter(env);
    EXPECT_EQ(v.status, 503);
    EXPECT_EQ(v.message, "JWT profile 'corp' is not configured");
  }
}

TEST(RequestFilters, QuotaUsesTheInjectedLedger) {
  Fixture f;
  f.route.rule.api_key_auth = "required";
  const std::vector<RequestFilter> chain = requestFilters(f.route.rule);
  ASSERT_EQ(chain.size(), 2u);
  const RequestFilter& quota = chain[1];
  const std::string text = "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-Api-Key: " +
                           f.raw_key + "\r\nContent-Length: 0\r\n\r\n";
  {  // not metered: the filter does not apply
    Req r(text);
    RequestCtx rq;
    FilterEnv env = envOf(f, r, rq, "m1", false);
    EXPECT_FALSE(quota.applies(env));
  }
  // The key's RPS bucket (1 request/s, burst 1) in the injected ledger: the first request at
  // this instant is admitted, the second refused with a Retry-After of one second.
  Req r1(text);
  RequestCtx rq1;
  rq1.begin({});
  FilterEnv env1 = envOf(f, r1, rq1, "m1");
  ASSERT_TRUE(credentialsFilter(env1).ok());
  ASSERT_TRUE(quota.applies(env1));
  EXPECT_TRUE(runAsync(quota, env1).ok());
  Req r2(text);
  RequestCtx rq2;
  rq2.begin({});
  FilterEnv env2 = envOf(f, r2, rq2, "m1");
  ASSERT_TRUE(credentialsFilter(env2).ok());
  const Verdict v = runAsync(quota, env2);
  EXPECT_EQ(v.status, 429);
  EXPECT_EQ(v.code, "rate_limit_exceeded");
  EXPECT_EQ(v.retry_after_s, 1);
  EXPECT_GT(f.ledger.buckets(), 0u);
  // Settling a request that holds no reservation changes nothing and may run twice.
  settleQuota(rq2, f.gov, false, 1'000'000'000'000);
  settleQuota(rq2, f.gov, false, 1'000'000'000'000);
  EXPECT_EQ(rq2.outcome.quota_tokens, -1);
}

TEST(RequestFilters, QuotaSettlesTheUsageInTheInjectedLedger) {
  Fixture f;
  // A key with 600 tokens a minute (capacity 600, 10 tokens/s) and no RPS limit.
  governance::ApiKey k = *f.keys.current()->by_id.at(f.key_id);
  k.rate_limit_rps = 0;
  k.burst_size = 0;
  k.tokens_per_min = 600;
  auto t = std::make_shared<governance::KeyTable>(*f.keys.current());
  t->by_id[k.key_id] = std::make_shared<const governance::ApiKey>(k);
  f.keys.publish(t);
  f.route.rule.api_key_auth = "required";
  const std::vector<RequestFilter> chain = requestFilters(f.route.rule);
  Req r("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nX-Api-Key: " + f.raw_key +
        "\r\nContent-Length: 2\r\n\r\n{}");
  r.req.body = "{}";
  RequestCtx rq;
  rq.begin({});
  FilterEnv env = envOf(f, r, rq, "m1");
  ASSERT_TRUE(chain[0].check(env).ok());
  ASSERT_TRUE(runAsync(chain[1], env).ok());
  // Reserved: (prompt estimate 1 = ceil(2 bytes / 4) + --quota-max-tokens 256) x 1.
  ASSERT_TRUE(rq.quota.active);
  EXPECT_EQ(rq.quota.reserved, 257);
  const std::string bucket = "kq|" + f.key_id;
  const int64_t now = 1'000'000'000'000;
  EXPECT_DOUBLE_EQ(f.ledger.level(bucket, 10.0, 600.0, now), 600.0 - 257.0);
  // The engine answered with its usage: the reservation goes back, 15 tokens are charged.
  rq.quota.sent = true;
  rq.quota.status = 200;
  rq.usage.feed(R"({"id":"x","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})");
  settleQuota(rq, f.gov, false, now);
  EXPECT_FALSE(rq.quota.active);
  EXPECT_EQ(rq.outcome.quota_tokens, 15);
  EXPECT_DOUBLE_EQ(f.ledger.level(bucket, 10.0, 600.0, now), 600.0 - 15.0);
  settleQuota(rq, f.gov, false, now);  // once only
  EXPECT_DOUBLE_EQ(f.ledger.level(bucket, 10.0, 600.0, now), 600.0 - 15.0);
}

TEST(RequestCtx, BeginLeavesNothingOfThePreviousRequest) {
  RequestCtx rq;
  rq.begin({});
  rq.request_id = "r1";
  rq.outcome.status = 200;
  rq.outcome.key_id = "k";
  rq.upstream_id = "leg";
  rq.sibling_failure = "e";
  rq.leg_note = " (prefill)";
  rq.last_error = "x";
  rq.strip_authorization = true;
  rq.quota.active = true;
  rq.quota.reserved = 7;
  rq.quota_body = "{}";
  rq.body_read = rq.body_has_model = rq.facts_parsed = true;
  rq.body_model = "m";
  rq.key = std::make_shared<const governance::ApiKey>();
  rq.quota.inject = rq.quota.sent = rq.quota.stream = rq.quota.shared = true;
  rq.quota.status = 500;
  rq.quota.held.emplace_back();
  rq.usage.feed(R"({"usage":{"total_tokens":3}})");
  rq.begin(std::chrono::steady_clock::time_point(std::chrono::seconds(5)));
  EXPECT_TRUE(rq.request_id.empty());
  EXPECT_EQ(rq.outcome.status, 0);
  EXPECT_TRUE(rq.outcome.key_id.empty());
  EXPECT_EQ(rq.outcome.quota_tokens, -1);
  EXPECT_TRUE(rq.upstream_id.empty());
  EXPECT_TRUE(rq.sibling_failure.empty());
  EXPECT_TRUE(rq.leg_note.empty());
  EXPECT_TRUE(rq.last_error.empty());
  EXPECT_FALSE(rq.strip_authorization);
  EXPECT_FALSE(rq.quota.active);
  EXPECT_EQ(rq.quota.reserved, 0);
  EXPECT_TRUE(rq.quota_body.empty());
  EXPECT_FALSE(rq.quota.inject || rq.quota.sent || rq.quota.stream || rq.quota.shared);
  EXPECT_EQ(rq.quota.status, 0);
  EXPECT_TRUE(rq.quota.held.empty());
  EXPECT_FALSE(rq.usage.usage().has_value());
  EXPECT_FALSE(rq.body_read || rq.body_has_model || rq.facts_parsed);
  EXPECT_TRUE(rq.body_model.empty());
  EXPECT_FALSE(rq.key);
  EXPECT_EQ(rq.started_at, std::chrono::steady_clock::time_point(std::chrono::seconds(5)));
}

}  // namespace
}  // namespace kvgate::proxy
