// The governance services the data plane's gates use (credentials, model authorization, quota),
// handed to the data plane once before it starts (proxy::DataPlane::setGovernance) so request
// code reaches them through what it was given, as routing reaches its index, never through a
// process-wide lookup. The control plane publishes new immutable tables into the same
// registries (key_store.h, profile_store.h, limit_store.h); a worker reads their current()
// snapshot per request.
#pragma once

namespace kvgate::governance {

class KeyRegistry;
class JwtRegistry;
class LimitRegistry;
class QuotaLedger;
class QuotaMetrics;
class RedisCounters;

struct Services {
  KeyRegistry* keys = nullptr;        // API keys (api_key_auth required / apikey-or-jwt)
  JwtRegistry* jwt = nullptr;         // JWT profiles and key sets (jwt / apikey-or-jwt)
  LimitRegistry* limits = nullptr;    // limit and quota rows
  QuotaLedger* ledger = nullptr;      // this process's quota counters
  QuotaMetrics* quota_metrics = nullptr;
  RedisCounters* shared = nullptr;    // counters shared by replicas (--quota-redis); null: none

  // The registries this process's control plane publishes into, and the shared counters set
  // with setRedisCounters (if any) at the time of the call.
  static Services processWide();  // (services.cc)
};

}  // namespace kvgate::governance
