#include "governance/quota.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kvgate::governance {

namespace {

constexpr double kEps = 1e-9;  // refill arithmetic may leave 0.99999...: that is a token

double clampTokens(int64_t n) {
  return std::clamp(double(n), 0.0, QuotaLedger::kMaxTokens);
}

int64_t secondsUntil(double need, double level, double rate) {
  // (clamped before the cast: a very slow rate must not overflow it)
  const double wait = std::min((need - level) / rate, 86400.0);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait)));
}

}  // namespace

QuotaLedger::Shard& QuotaLedger::shardOf(const std::string& key) {
  return shards_[std::hash<std::string>{}(key) % kShards];
}

QuotaLedger::Bucket* QuotaLedger::touch(Shard& sh, const std::string& key, double rate, double cap,
                                        int64_t now_ns) {
  auto it = sh.m.find(key);
  if (it == sh.m.end()) {
    if (sh.m.size() >= kMaxBuckets / kShards && now_ns - sh.swept_ns >= 1'000'000'000) {
      // Full shard: buckets that have refilled to capacity are the same as no bucket (swept at
      // most once a second: a shard full of live buckets is not rescanned per request).
      sh.swept_ns = now_ns;
      std::erase_if(sh.m, [&](const auto& kv) {
        const Bucket& b = kv.second;
        return b.level + double(now_ns - b.at_ns) / 1e9 * b.rate_per_s >= b.capacity - kEps;
      });
      if (sh.m.size() >= kMaxBuckets / kShards) {
        overflow_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
    }
    it = sh.m.emplace(key, Bucket{cap, now_ns, rate, cap}).first;
  }
  Bucket& b = it->second;
  if (now_ns > b.at_ns) {
    b.level = std::min(cap, b.level + double(now_ns - b.at_ns) / 1e9 * rate);
    b.at_ns = now_ns;
  }
  b.level = std::min(b.level, cap);  // (a lowered limit applies at once)
  b.rate_per_s = rate;
  b.capacity = cap;
  return &b;
}

QuotaLedger::Verdict QuotaLedger::admit(const std::vector<BucketSpec>& specs, int64_t tokens,
                                        int64_t now_ns) {
  Verdict v;
  const double want = clampTokens(tokens);
  size_t taken = 0;
  for (; taken < specs.size(); ++taken) {
    const BucketSpec& s = specs[taken];
    Shard& sh = shardOf(s.key);
    std::lock_guard g(sh.mu);
    Bucket* b = touch(sh, s.key, s.rate_per_s, s.capacity, now_ns);
    if (!b) {  // no room for its state: passes (fail open, counted)
      if (isTpm(s.reason)) v.held.push_back({s.key, 0, s.rate_per_s, s.capacity, s.reason});
      continue;
    }
    // A hold never exceeds the bucket's capacity: a request larger than the bucket still passes
    // a full one, and a hold that is never settled (a crash) costs at most one capacity.
    const double cost = isTpm(s.reason) ? std::min(want, s.capacity) : 1.0;
    const double need = cost;
    if (b->level >= need - kEps) {
      b->level -= cost;
      if (isTpm(s.reason)) v.held.push_back({s.key, cost, s.rate_per_s, s.capacity, s.reason});
      continue;
    }
    v.ok = false;
    v.reason = s.reason;
    v.retry_after_s = secondsUntil(need, b->level, s.rate_per_s);
    break;
  }
  if (v.ok) return v;
  // Rollback: what the buckets before the refusing one gave goes back.
  size_t h = 0;
  for (size_t i = 0; i < taken; ++i) {
    const BucketSpec& s = specs[i];
    double back = 1.0;
    if (isTpm(s.reason)) back = h < v.held.size() ? v.held[h++].amount : 0;
    Shard& sh = shardOf(s.key);
    std::lock_guard g(sh.mu);
    auto it = sh.m.find(s.key);
    if (it != sh.m.end()) it->second.level = std::min(it->second.capacity, it->second.level + back);
  }
  v.held.clear();
  return v;
}

void QuotaLedger::settle(const std::vector<Held>& held, int64_t used, int64_t now_ns) {
  const double charge = clampTokens(used);
  for (const Held& h : held) {
    Shard& sh = shardOf(h.key);
    std::lock_guard g(sh.mu);
    Bucket* b = touch(sh, h.key, h.rate_per_s, h.capacity, now_ns);
    if (!b) continue;
    b->level = std::min(b->capacity, b->level + h.amount - charge);  // below zero: debt
  }
}

double QuotaLedger::level(const std::string& key, double rate_per_s, double capacity,
                          int64_t now_ns) const {
  const Shard& sh = shards_[std::hash<std::string>{}(key) % kShards];
  std::lock_guard g(sh.mu);
  auto it = sh.m.find(key);
  if (it == sh.m.end()) return capacity;
  const Bucket& b = it->second;
  return std::min(capacity, b.level + std::max<int64_t>(0, now_ns - b.at_ns) / 1e9 * rate_per_s);
}

void QuotaLedger::forget(const std::string& key) {
  Shard& sh = shardOf(key);
  std::lock_guard g(sh.mu);
  sh.m.erase(key);
}

size_t QuotaLedger::buckets() const {
  size_t n = 0;
  for (const Shard& sh : shards_) {
    std::lock_guard g(sh.mu);
    n += sh.m.size();
  }
  return n;
}

QuotaLedger& quotaLedger() {
  static QuotaLedger* l = new QuotaLedger;  // (never destroyed: workers may settle at exit)
  return *l;
}

std::string promLabel(std::string_view v) {
  std::string esc;
  esc.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') esc += '\\';
    if (c == '\n') {
      esc += "\\n";
      continue;
    }
    esc += c;
  }
  return esc;
}

QuotaMetrics::PerTenant& QuotaMetrics::slot(std::string_view tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return it->second;
  if (tenants_.size() >= kMaxTenants) return tenants_["_other"];
  return tenants_[std::string(tenant)];
}

void QuotaMetrics::hit(std::string_view tenant, LimitReason r) {
  std::lock_guard g(mu_);
  ++slot(tenant).hits[static_cast<size_t>(r)];
}

void QuotaMetrics::settled(std::string_view tenant, int64_t consumed, int64_t estimated,
                           bool missing) {
  std::lock_guard g(mu_);
  PerTenant& p = slot(tenant);
  p.consumed += uint64_t(std::max<int64_t>(0, consumed));
  p.estimated += uint64_t(std::max<int64_t>(0, estimated));
  p.missing += missing ? 1 : 0;
}

std::string QuotaMetrics::render(const LimitTable& limits, const QuotaLedger& ledger,
                                 int64_t now_ns) const {
  std::map<std::string, PerTenant, std::less<>> t;
  {
    std::lock_guard g(mu_);  // (copied, then formatted without holding workers up)
    t = tenants_;
  }
  std::string s =
      "# HELP loxilb_ai_rate_limit_hits_total Requests refused by a rate or token limit, by "
      "tenant (\"\" keyless) and the bucket that refused (key_rps, user_rps, tenant_rps, vip_rps, "
      "key_tpm, user_tpm, user_model_tpm, tenant_tpm, tenant_model_tpm, vip_tpm).\n"
      "# TYPE loxilb_ai_rate_limit_hits_total counter\n";
  for (const auto& [tenant, p] : t)
    for (size_t r = 0; r < kLimitReasonCount; ++r)
      if (p.hits[r])
        s += "loxilb_ai_rate_limit_hits_total{tenant=\"" + promLabel(tenant) + "\",reason=\"" +
             reasonName(static_cast<LimitReason>(r)) + "\"} " + std::to_string(p.hits[r]) + "\n";
  s += "# HELP loxilb_ai_token_quota_denied_total Requests refused by a tokens-per-minute "
       "bucket, by tenant.\n# TYPE loxilb_ai_token_quota_denied_total counter\n";
  for (const auto& [tenant, p] : t) {
    uint64_t n = 0;
    for (size_t r = 0; r < kLimitReasonCount; ++r)
      if (isTpm(static_cast<LimitReason>(r))) n += p.hits[r];
    if (n)
      s += "loxilb_ai_token_quota_denied_total{tenant=\"" + promLabel(tenant) + "\"} " +
           std::to_string(n) + "\n";
  }
  struct Fam {
    const char* name;
    const char* help;
    uint64_t PerTenant::*f;
  };
  for (const Fam& f : {Fam{"loxilb_ai_tokens_consumed_total",
                           "Tokens charged to quotas from the engine's reported usage.",
                           &PerTenant::consumed},
                       Fam{"loxilb_ai_tokens_estimated_total",
                           "Tokens charged to quotas by estimate (the response carried no usage).",
                           &PerTenant::estimated},
                       Fam{"loxilb_ai_tokens_missing_total",
                           "Quota-metered responses that carried no usage (charged by estimate).",
                           &PerTenant::missing}}) {
    s += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " counter\n";
    for (const auto& [tenant, p] : t)
      if (p.*f.f)
        s += std::string(f.name) + "{tenant=\"" + promLabel(tenant) + "\"} " +
             std::to_string(p.*f.f) + "\n";
  }
  // Tenant TPM buckets of explicit rows: capacity and how much of it is used (above 1: debt).
  s += "# HELP loxilb_ai_token_quota_limit_tokens Capacity of a tenant's tokens-per-minute "
       "bucket (tokens_per_min x burst_pct).\n# TYPE loxilb_ai_token_quota_limit_tokens gauge\n";
  std::string util =
      "# HELP loxilb_ai_token_quota_utilization Used share of a tenant's tokens-per-minute "
      "bucket (above 1: in debt).\n# TYPE loxilb_ai_token_quota_utilization gauge\n";
  std::map<std::string, const TenantLimit*> rows;  // (sorted output)
  for (const auto& [id, row] : limits.tenants)
    if (row.tokens_per_min > 0) rows[id] = &row;
  for (const auto& [id, row] : rows) {
    const double cap = tpmCapacity(row->tokens_per_min, row->burst_pct);
    const double lvl = ledger.level(tenantTpmKey(id), double(row->tokens_per_min) / 60.0, cap, now_ns);
    char num[64];
    std::snprintf(num, sizeof num, "%.0f", cap);
    s += "loxilb_ai_token_quota_limit_tokens{tenant=\"" + promLabel(id) + "\"} " + num + "\n";
    std::snprintf(num, sizeof num, "%.4f", std::max(0.0, (cap - lvl) / cap));
    util += "loxilb_ai_token_quota_utilization{tenant=\"" + promLabel(id) + "\"} " + num + "\n";
  }
  s += util;
  s += "# HELP kvgate_quota_buckets Quota buckets holding state in this gateway.\n"
       "# TYPE kvgate_quota_buckets gauge\nkvgate_quota_buckets " +
       std::to_string(ledger.buckets()) +
       "\n# HELP kvgate_quota_bucket_overflow_total Bucket checks passed because the ledger was "
       "full (fail open).\n# TYPE kvgate_quota_bucket_overflow_total counter\n"
       "kvgate_quota_bucket_overflow_total " +
       std::to_string(ledger.overflows()) + "\n";
  return s;
}

QuotaMetrics& quotaMetrics() {
  static QuotaMetrics* m = new QuotaMetrics;
  return *m;
}

}  // namespace kvgate::governance
