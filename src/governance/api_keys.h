// API keys (issue 14, upstream-gateway.md §1.6 and §2.4): the records, the raw key format, and
// the check the data plane runs per request against an immutable snapshot (no lock, no disk).
//
// A raw key is `kvg-<key_id>-<secret>`: key_id 16 hex digits (the record's id, also the REST
// path's), secret 43 base64url characters (32 random bytes). Only salt and SHA-256(salt ||
// secret) are stored; the raw key is shown once, in the POST that creates it. With 256 random
// bits a fast hash is enough (no password to brute-force); the compare is constant-time.
// Clients send the raw key as `X-Api-Key` or `Authorization: Bearer <key>`.
#pragma once
#include <array>
#include <atomic>
#include <iterator>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvgate::governance {

struct ApiKey {
  std::string key_id;
  std::string tenant_id;
  std::string name;
  std::vector<std::string> allowed_models;  // empty: every model
  double rate_limit_rps = 0;                // 0: unlimited (quota stage: later)
  int64_t burst_size = 0;
  int64_t tokens_per_min = 0;
  int64_t expires_at = 0;  // unix seconds; 0: never
  bool enabled = true;
  int64_t created_at = 0;  // unix seconds
  std::string salt;        // 16 raw bytes
  std::string hash;        // 32 raw bytes: SHA-256(salt || secret)
  bool deny_all = false;   // a stored allowed_models that did not parse: no model is allowed

  bool allows(std::string_view model) const;
};

// One immutable generation of the key set (published whole on every change; records are
// shared between generations, so a change copies pointers, not keys).
struct KeyTable {
  bool loaded = false;  // false: no key store (rules that require keys answer 503)
  std::unordered_map<std::string, std::shared_ptr<const ApiKey>> by_id;
};

enum class KeyVerdict {
  kOk,
  kMissing,    // no key in the request
  kMalformed,  // not kvg-<id>-<secret>
  kUnknown,    // no such key id (deleted, or never)
  kBadSecret,  // the id exists, the secret does not match
  kDisabled,
  kExpired,
};
const char* verdictName(KeyVerdict v);  // metric label: ok, missing, malformed, ...

struct KeyCheck {
  KeyVerdict verdict = KeyVerdict::kMissing;
  const ApiKey* key = nullptr;  // into the table checked (kOk, kDisabled, kExpired)
};
KeyCheck checkKey(const KeyTable& table, std::string_view raw, int64_t now_s);

// The key a request carries: X-Api-Key, else `Authorization: Bearer <key>` ("" when neither).
std::string_view requestKey(std::string_view x_api_key, std::string_view authorization);
// Whether the request carries a kvgate key (X-Api-Key, or a bearer value starting "kvg-"): on
// apikey-or-jwt rules a present key decides alone.
bool carriesKey(std::string_view x_api_key, std::string_view authorization);

// A new key: id, salt and hash filled in `k`; returns the raw key (shown once).
std::string mintKey(ApiKey& k);
std::string hashSecret(std::string_view salt, std::string_view secret);

// Where workers read the current table: one per process, replaced whole by the key store.
class KeyRegistry {
 public:
  std::shared_ptr<const KeyTable> current() const { return table_.load(std::memory_order_acquire); }
  void publish(std::shared_ptr<const KeyTable> t) { table_.store(std::move(t), std::memory_order_release); }

 private:
  std::atomic<std::shared_ptr<const KeyTable>> table_{std::make_shared<const KeyTable>()};
};
KeyRegistry& keyRegistry();

// The data plane's key decisions, by outcome: a verdict's name, or model_not_allowed,
// store_unavailable, rate_limited (kvgate_api_key_checks_total{outcome}).
inline constexpr const char* kCheckOutcomes[] = {
    "ok",      "missing",           "malformed",         "unknown",     "bad_secret",
    "disabled", "expired",          "model_not_allowed", "store_unavailable", "rate_limited"};
inline constexpr size_t kCheckOutcomeCount = std::size(kCheckOutcomes);
inline constexpr size_t kOutcomeModelNotAllowed = 7, kOutcomeStoreUnavailable = 8,
                        kOutcomeRateLimited = 9;
void countCheck(size_t outcome);  // index into kCheckOutcomes
std::string renderKeyMetrics();

}  // namespace kvgate::governance
