// Rate and token limits of tenants and users, and the defaults they fall through to
// (issue 14 §2; upstream-gateway.md §1.6 and §2.4): the records the REST API stores, one
// immutable LimitTable the data plane reads per request, and planBuckets(), which turns a request
// (who, which model, which rule) into the ordered list of buckets that must admit it.
//
// Precedence per bucket kind: an explicit row beats the rule's defaults row, which beats the
// global defaults row, which beats unlimited; a 0 field falls through to the next level.
//
// Buckets, in admission order (the §2.4 order: key and tenant RPS, then tenant TPM, then
// tenant+model TPM; ours adds user and shared-VIP buckets around them):
//   RPS  key (the key's rate_limit_rps/burst_size), user, tenant, shared VIP (keyless traffic
//        only: requests no credential admitted)
//   TPM  key (tokens_per_min), user, user+model, tenant, tenant+model, shared VIP (every
//        token-metered request, credentialed or not)
// RPS capacity: burst_size when set (keys, users), else one second's worth (at least 1).
// TPM capacity: tokens_per_min x burst_pct% (0 = 100 %, clamped 1-1000 %; tenant rows carry
// burst_pct, the other TPM buckets use 100 %); refill tokens_per_min/60 per second.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/result.h"

namespace kvgate::governance {

struct ApiKey;

struct ModelTpm {
  std::string model;
  int64_t tokens_per_min = 0;
};

struct TenantLimit {
  std::string tenant_id;
  double rps = 0;
  int64_t tokens_per_min = 0;
  int64_t burst_pct = 0;  // 0: 100 %
  std::vector<ModelTpm> model_limits;
};

struct UserLimit {
  std::string tenant_id, user_id;
  double rps = 0;
  int64_t burst_size = 0;  // RPS bucket capacity (0: one second's worth)
  int64_t tokens_per_min = 0;
  std::vector<ModelTpm> model_limits;
};

struct LimitDefaults {
  std::string scope = "global";  // global | rule
  std::string rule_ident;        // scope rule: the rule's vip:port (or its name)
  double default_user_rps = 0;
  int64_t default_user_tpm = 0;
  double default_tenant_rps = 0;
  int64_t default_tenant_tpm = 0;
  double vip_shared_rps = 0;
  int64_t vip_shared_tpm = 0;
  int64_t updated_at = 0;  // unix seconds
};

// JSON of the REST API (and of the rows the store keeps). parse* validate strictly: unknown
// fields, wrong types, negative numbers, identities with '|' or a reserved bucket prefix are a
// 400 naming the field. `existing` (tenant rows): omitted model_limits keep the stored ones.
Result<TenantLimit> parseTenantLimit(const nlohmann::json& j, const TenantLimit* existing);
Result<UserLimit> parseUserLimit(const nlohmann::json& j);
Result<LimitDefaults> parseDefaults(const nlohmann::json& j);
nlohmann::json toJson(const TenantLimit& t);
nlohmann::json toJson(const UserLimit& u);
nlohmann::json toJson(const LimitDefaults& d);

// One immutable generation of every limit (published whole on each change).
struct LimitTable {
  bool loaded = false;
  std::unordered_map<std::string, TenantLimit> tenants;  // by tenant_id
  std::unordered_map<std::string, UserLimit> users;      // by tenant_id '|' user_id
  std::optional<LimitDefaults> global;
  std::unordered_map<std::string, LimitDefaults> rules;  // by rule_ident
  bool empty() const { return tenants.empty() && users.empty() && !global && rules.empty(); }
  // Whether a shared-VIP bucket exists (then keyless traffic is metered too); index() sets it
  // before the table is published.
  bool vip_metered = false;
  bool hasVipDefaults() const { return vip_metered; }
  void index() {
    auto vip = [](const LimitDefaults& d) { return d.vip_shared_rps > 0 || d.vip_shared_tpm > 0; };
    vip_metered = global && vip(*global);
    for (const auto& [id, d] : rules) vip_metered = vip_metered || vip(d);
  }
};
std::string userKey(std::string_view tenant, std::string_view user);
// A TPM bucket's capacity: tokens_per_min x burst_pct % (0 = 100 %, clamped 1-1000 %), >= 1.
double tpmCapacity(int64_t tpm, int64_t burst_pct);
std::string tenantTpmKey(std::string_view tenant);  // the tenant TPM bucket's ledger key
std::string keyPart(std::string_view s);  // a bucket key part ('|' and '%' escaped)

class LimitRegistry {
 public:
  std::shared_ptr<const LimitTable> current() const {
    return table_.load(std::memory_order_acquire);
  }
  void publish(std::shared_ptr<const LimitTable> t) {
    table_.store(std::move(t), std::memory_order_release);
  }

 private:
  std::atomic<std::shared_ptr<const LimitTable>> table_{std::make_shared<const LimitTable>()};
};
LimitRegistry& limitRegistry();

// Why a bucket refused (loxilb_ai_rate_limit_hits_total{reason}).
enum class LimitReason : uint8_t {
  kKeyRps,
  kUserRps,
  kTenantRps,
  kVipRps,
  kKeyTpm,
  kUserTpm,
  kUserModelTpm,
  kTenantTpm,
  kTenantModelTpm,
  kVipTpm,
};
inline constexpr size_t kLimitReasonCount = 10;
const char* reasonName(LimitReason r);  // key_rps, user_rps, ..., vip_tpm
inline bool isTpm(LimitReason r) { return r >= LimitReason::kKeyTpm; }

struct BucketSpec {
  std::string key;  // the ledger's bucket identity ("t|acme", "tm|acme|llama", ...)
  LimitReason reason = LimitReason::kKeyRps;
  double rate_per_s = 0;  // refill (requests or tokens per second)
  double capacity = 0;
};

// Who a request is, as the credential check admitted it.
struct Principal {
  const ApiKey* key = nullptr;  // admitted by an API key
  std::string_view tenant;      // "" when no credential admitted the request
  std::string_view user;        // JWT user claim ("" for keys)
  bool credentialed() const { return key || !tenant.empty() || !user.empty(); }
};

// The buckets that must admit a request, in admission order (empty: nothing limits it).
// `rule_ident` is the rule's vip:port, `rule_name` its name (a defaults row may name either).
std::vector<BucketSpec> planBuckets(const LimitTable& t, const Principal& who,
                                    std::string_view model, std::string_view rule_ident,
                                    std::string_view rule_name);

}  // namespace kvgate::governance
