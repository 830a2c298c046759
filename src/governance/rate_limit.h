// Requests-per-second limits of API keys (issue 14 §2, upstream-gateway.md §2.4: the key's
// rate_limit_rps and burst_size): one smooth token bucket per key, shared by every worker of
// this gateway (sharded maps, a short lock per take: no I/O under it). Capacity = burst_size, or
// max(1, ceil(rps)) when 0; refill rps tokens per second; a request takes one token or is
// refused with the seconds until one is there (Retry-After). rps 0 = unlimited. Buckets of keys
// that are gone are dropped when the key table changes. Counters across replicas (Redis) and
// token-per-minute quotas are later slices.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "governance/api_keys.h"

namespace kvgate::governance {

class RpsLimiter {
 public:
  struct Verdict {
    bool ok = true;
    int64_t retry_after_s = 0;  // when refused: whole seconds until a token is there (>= 1)
  };
  Verdict take(const std::string& key_id, double rps, int64_t burst, int64_t now_ns);
  // Drops the buckets of keys not in `t` (state of removed keys is freed).
  void retain(const KeyTable& t);
  size_t buckets() const;

  // loxilb_ai_rate_limit_hits_total{tenant,reason}: refusals by tenant (reason key_rps).
  void countHit(const std::string& tenant);
  std::string renderHits() const;

 private:
  struct Bucket {
    double tokens = 0;
    int64_t at_ns = 0;
  };
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Bucket> m;
  };
  std::array<Shard, kShards> shards_;
  mutable std::mutex hits_mu_;
  std::map<std::string, uint64_t> hits_;  // tenants that have keys (pruned by retain)
};

RpsLimiter& keyLimiter();

}  // namespace kvgate::governance
