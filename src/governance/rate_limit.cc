#include "governance/rate_limit.h"

#include <algorithm>
#include <cmath>
#include <functional>

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
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return {};
  }
  const double wait = (1.0 - b.tokens) / rps;
  return {false, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait)))};
}

void RpsLimiter::retain(const KeyTable& t) {
  for (Shard& sh : shards_) {
    std::lock_guard g(sh.mu);
    std::erase_if(sh.m, [&](const auto& kv) { return !t.by_id.count(kv.first); });
  }
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
  std::lock_guard g(hits_mu_);
  for (const auto& [tenant, n] : hits_) {
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
