#include "governance/rate_limit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

namespace kvgate::governance {

RpsLimiter::Verdict RpsLimiter::take(const std::string& key_id, double rps, int64_t burst,
                                     int64_t now_ns) {
  if (!(rps > 0)) return {};
  const double cap = burst > 0 ? double(burst) : std::max(1.0, std::ceil(rps));
  Shard& sh = shards_[std::hash<std::string>{}(key_id) % kShards];
  std::lock_guard g(sh.mu);
  auto [it, fresh] = sh.m.try_emplace(key_id);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = cap;
    b.at_ns = now_ns;
  } else if (now_ns > b.at_ns) {
    b.tokens = std::min(cap, b.tokens + double(now_ns - b.at_ns) / 1e9 * rps);
    b.at_ns = now_ns;
  }
  b.tokens = std::min(b.tokens, cap);  // (a lowered burst applies at once)
  if (b.tokens >= 1.0 - 1e-9) {  // (refill arithmetic may leave 0.99999...: that is a token)
    b.tokens = std::max(0.0, b.tokens - 1.0);
    return {};
  }
  // (clamped before the cast: a very slow rate must not overflow it)
  const double wait = std::min((1.0 - b.tokens) / rps, 86400.0);
  return {false, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait)))};
}

void RpsLimiter::retain(const KeyTable& t) {
  for (Shard& sh : shards_) {
    std::lock_guard g(sh.mu);
    std::erase_if(sh.m, [&](const auto& kv) { return !t.by_id.count(kv.first); });
  }
  // Tenants that no longer have a key lose their hit series (the label set stays bounded).
  std::set<std::string> tenants;
  for (const auto& [id, k] : t.by_id) tenants.insert(k->tenant_id);
  std::lock_guard g(hits_mu_);
  std::erase_if(hits_, [&](const auto& kv) { return !tenants.count(kv.first); });
}

size_t RpsLimiter::buckets() const {
  size_t n = 0;
  for (const Shard& sh : shards_) {
    std::lock_guard g(sh.mu);
    n += sh.m.size();
  }
  return n;
}

void RpsLimiter::countHit(const std::string& tenant) {
  std::lock_guard g(hits_mu_);
  ++hits_[tenant];
}

std::string RpsLimiter::renderHits() const {
  std::string s =
      "# HELP loxilb_ai_rate_limit_hits_total Requests refused by a rate limit, by tenant and "
      "reason (key_rps: the API key's rate_limit_rps).\n"
      "# TYPE loxilb_ai_rate_limit_hits_total counter\n";
  std::map<std::string, uint64_t> hits;
  {
    std::lock_guard g(hits_mu_);  // (copied, then formatted without holding workers up)
    hits = hits_;
  }
  for (const auto& [tenant, n] : hits) {
    std::string esc;
    for (char c : tenant) {
      if (c == '\\' || c == '"') esc += '\\';
      if (c == '\n') {
        esc += "\\n";
        continue;
      }
      esc += c;
    }
    s += "loxilb_ai_rate_limit_hits_total{tenant=\"" + esc + "\",reason=\"key_rps\"} " +
         std::to_string(n) + "\n";
  }
  return s;
}

RpsLimiter& keyLimiter() {
  static RpsLimiter* l = new RpsLimiter;  // (never destroyed: workers may take at exit)
  return *l;
}

}  // namespace kvgate::governance
