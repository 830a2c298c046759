// The quota ledger (issue 14 §2, upstream-gateway.md §2.4): smooth token buckets for requests per
// second and tokens per minute, shared by every worker of this gateway, with reservation,
// rollback, settlement and debt.
//
// Algorithm. A bucket holds a level that refills at rate_per_s up to its capacity (a bucket never
// seen is full). admit() walks the buckets a request needs (limits.h planBuckets, in order): an
// RPS bucket gives one request token when its level is >= 1; a TPM bucket reserves the request's
// estimate (prompt tokens + max_tokens), at most the bucket's capacity, when its level holds that
// much: a request larger than the whole bucket still passes a full bucket, and a hold that is
// never settled (a crash) costs at most one capacity. The first bucket that refuses ends the walk: what earlier
// buckets gave is put back (rollback) and the refusal carries the seconds until that bucket would
// admit (Retry-After, 1..86400). settle() gives each TPM bucket its reservation back and charges
// what the engine reported (usage) or an estimate; a bucket charged more than it held is in debt,
// and later requests are refused until it refills.
//
// Each bucket is behind its shard's mutex for a few arithmetic operations (no I/O); a request's
// buckets are taken one after the other, so two racing requests may both pass a bucket with room
// for one of them (over by at most one request's reservation per racing request). Memory: at most
// kMaxBuckets; a bucket that has refilled to capacity carries no state and is dropped when its
// shard is full; when none can be dropped, a new bucket is not created and the request passes it
// (fail open, counted as kvgate_quota_bucket_overflow_total). The clock is passed in (tests drive
// a manual one).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "governance/limits.h"

namespace kvgate::governance {

class QuotaLedger {
 public:
  // One TPM bucket's part of a reservation.
  struct Held {
    std::string key;
    double amount = 0;
    double rate_per_s = 0, capacity = 0;
    LimitReason reason = LimitReason::kTenantTpm;
  };
  struct Verdict {
    bool ok = true;
    int64_t retry_after_s = 0;  // when refused: whole seconds until that bucket admits (>= 1)
    LimitReason reason = LimitReason::kKeyRps;  // when refused: which bucket
    std::vector<Held> held;                     // when admitted: the TPM reservations
  };
  static constexpr size_t kMaxBuckets = size_t(1) << 20;
  static constexpr double kMaxTokens = 1e9;  // a reservation or charge is clamped to this

  Verdict admit(const std::vector<BucketSpec>& specs, int64_t tokens, int64_t now_ns);
  // Returns each reservation and charges `used` tokens (clamped to [0, kMaxTokens]).
  void settle(const std::vector<Held>& held, int64_t used, int64_t now_ns);
  // A bucket's level now (capacity when the bucket has no state), for gauges and tests.
  double level(const std::string& key, double rate_per_s, double capacity, int64_t now_ns) const;
  size_t buckets() const;
  void forget(const std::string& key);  // state of something removed (a deleted key's buckets)
  uint64_t overflows() const { return overflow_.load(std::memory_order_relaxed); }

 private:
  struct Bucket {
    double level = 0;
    int64_t at_ns = 0;
    double rate_per_s = 0, capacity = 0;
  };
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Bucket> m;
    int64_t swept_ns = INT64_MIN / 2;  // last sweep of a full shard
  };
  Shard& shardOf(const std::string& key);
  // The bucket, refilled to now_ns with the spec's rate and capacity; null when the shard is full
  // of buckets that all carry state.
  Bucket* touch(Shard& sh, const std::string& key, double rate, double cap, int64_t now_ns);
  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> overflow_{0};
};

QuotaLedger& quotaLedger();

// Governance counters of the data plane (metric families of upstream-gateway.md §2.7), with the
// tenant label bounded: the first kMaxTenants tenants seen get their own series, the rest share
// tenant="_other".
class QuotaMetrics {
 public:
  static constexpr size_t kMaxTenants = 1024;
  void hit(std::string_view tenant, LimitReason r);  // a bucket refused a request
  // Settlement: tokens the engine reported, tokens charged by estimate, and one response settled
  // without usage.
  void settled(std::string_view tenant, int64_t consumed, int64_t estimated, bool missing);
  // The loxilb_ai_rate_limit_hits_total, loxilb_ai_token_quota_denied_total and
  // loxilb_ai_tokens_{consumed,estimated,missing}_total families, plus the tenant TPM gauges
  // (loxilb_ai_token_quota_{limit_tokens,utilization}) from `limits` and `ledger` at `now_ns`.
  std::string render(const LimitTable& limits, const QuotaLedger& ledger, int64_t now_ns) const;

 private:
  struct PerTenant {
    std::array<uint64_t, kLimitReasonCount> hits{};
    uint64_t consumed = 0, estimated = 0, missing = 0;
  };
  PerTenant& slot(std::string_view tenant);  // (mu_ held)
  mutable std::mutex mu_;
  std::map<std::string, PerTenant, std::less<>> tenants_;
};

QuotaMetrics& quotaMetrics();

// Escapes a Prometheus label value (backslash, quote, newline).
std::string promLabel(std::string_view v);

}  // namespace kvgate::governance
