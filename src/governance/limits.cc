#include "governance/limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/json_fields.h"
#include "governance/api_keys.h"

namespace kvgate::governance {

namespace {
using json = nlohmann::json;

constexpr size_t kMaxModelLimits = 1024;
constexpr double kMaxRate = 1e12;

// Identities become bucket keys joined by '|': a '|' inside one, or one that starts like a bucket
// key, could alias another scope's bucket (the upstream refuses the same set).
Result<std::string> identity(const json& v, const std::string& field) {
  auto s = jsonString(v, field, 1, 256);
  if (!s) return s;
  if (s->find('|') != std::string::npos)
    return fail(400, field, field + " must not contain '|'");
  for (const char* p : {"k:", "u:", "t:", "tm:", "uq:", "um:", "kq:", "v:", "ver:"})
    if (s->starts_with(p))
      return fail(400, field, field + " must not start with the reserved prefix '" +
                                  std::string(p) + "'");
  for (unsigned char c : *s)
    if (c < 0x20 || c == 0x7f) return fail(400, field, field + " must not contain control bytes");
  return s;
}

Result<double> rate(const json& v, const std::string& field) {
  if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > kMaxRate)
    return fail(400, field, field + " must be a non-negative number");
  const double r = v.get<double>();
  if (r > 0 && r < 1e-6) return fail(400, field, field + " must be 0 (unlimited) or at least 1e-6");
  return r;
}

Result<int64_t> count(const json& v, const std::string& field) {
  if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<double>() < 0 ||
      v.get<double>() > kMaxRate)
    return fail(400, field, field + " must be a non-negative integer");
  return v.get<int64_t>();
}

Result<std::vector<ModelTpm>> modelLimits(const json& v) {
  if (!v.is_array() || v.size() > kMaxModelLimits)
    return fail(400, "model_limits", "model_limits must be an array of at most 1024 entries");
  std::vector<ModelTpm> out;
  for (const auto& e : v) {
    if (!e.is_object())
      return fail(400, "model_limits", "model_limits entries must be {model, tokens_per_min}");
    ModelTpm m;
    bool has_model = false;
    for (auto& [k, x] : e.items()) {
      if (k == "model") {
        auto s = identity(x, "model_limits.model");
        if (!s) return tl::unexpected(s.error());
        m.model = *s;
        has_model = true;
      } else if (k == "tokens_per_min") {
        auto n = count(x, "model_limits.tokens_per_min");
        if (!n) return tl::unexpected(n.error());
        m.tokens_per_min = *n;
      } else {
        return fail(400, "model_limits", "model_limits." + k + ": unknown field");
      }
    }
    if (!has_model) return fail(400, "model_limits.model", "model_limits entries need a model");
    for (const auto& o : out)
      if (o.model == m.model)
        return fail(400, "model_limits", "model_limits names '" + m.model + "' twice");
    out.push_back(std::move(m));
  }
  return out;
}

json modelsJson(const std::vector<ModelTpm>& v) {
  json a = json::array();
  for (const auto& m : v) a.push_back({{"model", m.model}, {"tokens_per_min", m.tokens_per_min}});
  return a;
}

int64_t nowS() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<TenantLimit> parseTenantLimit(const json& j, const TenantLimit* existing) {
  if (!j.is_object()) return fail(400, "body", "body must be a JSON object");
  TenantLimit t;
  bool has_tenant = false, has_models = false;
  for (auto& [k, v] : j.items()) {
    if (k == "tenant_id") {
      auto s = identity(v, "tenant_id");
      if (!s) return tl::unexpected(s.error());
      t.tenant_id = *s;
      has_tenant = true;
    } else if (k == "rps") {
      auto r = rate(v, "rps");
      if (!r) return tl::unexpected(r.error());
      t.rps = *r;
    } else if (k == "tokens_per_min") {
      auto n = count(v, "tokens_per_min");
      if (!n) return tl::unexpected(n.error());
      t.tokens_per_min = *n;
    } else if (k == "burst_pct") {
      auto n = count(v, "burst_pct");
      if (!n) return tl::unexpected(n.error());
      t.burst_pct = std::min<int64_t>(*n, 1000);  // (clamped, as the upstream does)
    } else if (k == "model_limits") {
      auto m = modelLimits(v);
      if (!m) return tl::unexpected(m.error());
      t.model_limits = std::move(*m);
      has_models = true;
    } else {
      return fail(400, k, k + ": unknown field");
    }
  }
  if (!has_tenant) return fail(400, "tenant_id", "tenant_id is required");
  // The tenant surface keeps stored model rows when a POST omits model_limits (upstream).
  if (!has_models && existing) t.model_limits = existing->model_limits;
  return t;
}

Result<UserLimit> parseUserLimit(const json& j) {
  if (!j.is_object()) return fail(400, "body", "body must be a JSON object");
  UserLimit u;
  bool has_tenant = false, has_user = false;
  for (auto& [k, v] : j.items()) {
    if (k == "tenant_id" || k == "user_id") {
      auto s = identity(v, k);
      if (!s) return tl::unexpected(s.error());
      (k == "tenant_id" ? u.tenant_id : u.user_id) = *s;
      (k == "tenant_id" ? has_tenant : has_user) = true;
    } else if (k == "rps") {
      auto r = rate(v, "rps");
      if (!r) return tl::unexpected(r.error());
      u.rps = *r;
    } else if (k == "burst_size" || k == "tokens_per_min") {
      auto n = count(v, k);
      if (!n) return tl::unexpected(n.error());
      (k == "burst_size" ? u.burst_size : u.tokens_per_min) = *n;
    } else if (k == "model_limits") {  // (replaces the stored set wholesale)
      auto m = modelLimits(v);
      if (!m) return tl::unexpected(m.error());
      u.model_limits = std::move(*m);
    } else {
      return fail(400, k, k + ": unknown field");
    }
  }
  if (!has_tenant) return fail(400, "tenant_id", "tenant_id is required");
  if (!has_user) return fail(400, "user_id", "user_id is required");
  return u;
}

Result<LimitDefaults> parseDefaults(const json& j) {
  if (!j.is_object()) return fail(400, "body", "body must be a JSON object");
  LimitDefaults d;
  d.scope.clear();
  bool any = false;
  for (auto& [k, v] : j.items()) {
    if (k == "scope") {
      if (!v.is_string() || (v != "global" && v != "rule"))
        return fail(400, "scope", "scope must be \"global\" or \"rule\"");
      d.scope = v.get<std::string>();
    } else if (k == "rule_ident") {
      if (v.is_string() && v.get_ref<const std::string&>().empty()) continue;
      auto s = identity(v, "rule_ident");
      if (!s) return tl::unexpected(s.error());
      d.rule_ident = *s;
    } else if (k == "default_user_rps" || k == "default_tenant_rps" || k == "vip_shared_rps") {
      auto r = rate(v, k);
      if (!r) return tl::unexpected(r.error());
      (k == "default_user_rps"     ? d.default_user_rps
       : k == "default_tenant_rps" ? d.default_tenant_rps
                                   : d.vip_shared_rps) = *r;
      any |= *r > 0;
    } else if (k == "default_user_tpm" || k == "default_tenant_tpm" || k == "vip_shared_tpm") {
      auto n = count(v, k);
      if (!n) return tl::unexpected(n.error());
      (k == "default_user_tpm"     ? d.default_user_tpm
       : k == "default_tenant_tpm" ? d.default_tenant_tpm
                                   : d.vip_shared_tpm) = *n;
      any |= *n > 0;
    } else {
      return fail(400, k, k + ": unknown field");
    }
  }
  if (d.scope.empty()) return fail(400, "scope", "scope is required (\"global\" or \"rule\")");
  if (d.scope == "global" && !d.rule_ident.empty())
    return fail(400, "rule_ident", "global defaults must not carry rule_ident");
  if (d.scope == "rule" && d.rule_ident.empty())
    return fail(400, "rule_ident", "rule defaults require rule_ident (the rule's vip:port)");
  if (!any)
    return fail(400, "body", "a rate-limit defaults row must contain at least one non-zero limit");
  d.updated_at = nowS();
  return d;
}

json toJson(const TenantLimit& t) {
  return {{"tenant_id", t.tenant_id},
          {"rps", t.rps},
          {"tokens_per_min", t.tokens_per_min},
          {"burst_pct", t.burst_pct},
          {"model_limits", modelsJson(t.model_limits)}};
}

json toJson(const UserLimit& u) {
  return {{"tenant_id", u.tenant_id},   {"user_id", u.user_id},
          {"rps", u.rps},               {"burst_size", u.burst_size},
          {"tokens_per_min", u.tokens_per_min}, {"model_limits", modelsJson(u.model_limits)}};
}

json toJson(const LimitDefaults& d) {
  return {{"scope", d.scope},
          {"rule_ident", d.rule_ident},
          {"default_user_rps", d.default_user_rps},
          {"default_user_tpm", d.default_user_tpm},
          {"default_tenant_rps", d.default_tenant_rps},
          {"default_tenant_tpm", d.default_tenant_tpm},
          {"vip_shared_rps", d.vip_shared_rps},
          {"vip_shared_tpm", d.vip_shared_tpm},
          {"updated_at", d.updated_at}};
}

double tpmCapacity(int64_t tpm, int64_t burst_pct) {
  const double pct = burst_pct <= 0 ? 100.0 : double(std::clamp<int64_t>(burst_pct, 1, 1000));
  return std::max(1.0, double(tpm) * pct / 100.0);
}

// A bucket key part: '|' joins parts, so it (and the escape byte) is escaped; JWT claims may hold
// any bytes, and ("a|b", "c") must not share a bucket with ("a", "b|c").
std::string keyPart(std::string_view s) {
  if (s.find_first_of("|%") == std::string_view::npos) return std::string(s);
  std::string out;
  for (char c : s) {
    if (c == '|') out += "%7C";
    else if (c == '%') out += "%25";
    else out += c;
  }
  return out;
}

std::string tenantTpmKey(std::string_view tenant) { return "tq|" + keyPart(tenant); }

std::string userKey(std::string_view tenant, std::string_view user) {
  std::string k(tenant);
  k += '|';
  k += user;
  return k;
}

LimitRegistry& limitRegistry() {
  static LimitRegistry* r = new LimitRegistry;  // (never destroyed: workers may read at exit)
  return *r;
}

const char* reasonName(LimitReason r) {
  static constexpr const char* kNames[kLimitReasonCount] = {
      "key_rps", "user_rps",       "tenant_rps", "vip_rps",          "key_tpm",
      "user_tpm", "user_model_tpm", "tenant_tpm", "tenant_model_tpm", "vip_tpm"};
  return kNames[static_cast<size_t>(r)];
}

namespace {

void addRps(std::vector<BucketSpec>& out, std::string key, LimitReason why, double rps,
            int64_t burst) {
  if (!(rps > 0)) return;
  out.push_back({std::move(key), why, rps, burst > 0 ? double(burst) : std::max(1.0, std::ceil(rps))});
}

void addTpm(std::vector<BucketSpec>& out, std::string key, LimitReason why, int64_t tpm,
            int64_t burst_pct) {
  if (tpm <= 0) return;
  out.push_back({std::move(key), why, double(tpm) / 60.0, tpmCapacity(tpm, burst_pct)});
}

const ModelTpm* findModel(const std::vector<ModelTpm>& v, std::string_view model) {
  for (const auto& m : v)
    if (m.model == model) return &m;
  return nullptr;
}

}  // namespace

std::vector<BucketSpec> planBuckets(const LimitTable& t, const Principal& who,
                                    std::string_view model, std::string_view rule_ident,
                                    std::string_view rule_name) {
  std::vector<BucketSpec> out;
  const LimitDefaults* rule_d = nullptr;
  if (!t.rules.empty()) {
    auto it = t.rules.find(std::string(rule_ident));
    if (it == t.rules.end() && !rule_name.empty()) it = t.rules.find(std::string(rule_name));
    if (it != t.rules.end()) rule_d = &it->second;
  }
  const LimitDefaults* glob = t.global ? &*t.global : nullptr;
  // A defaults field: the rule's row, else the global row (0 falls through).
  auto dflt = [&](auto f) {
    using V = std::decay_t<decltype(glob->*f)>;
    if (rule_d && rule_d->*f > 0) return rule_d->*f;
    if (glob && glob->*f > 0) return glob->*f;
    return V{};
  };
  const std::string tenant(who.tenant);
  const TenantLimit* trow = nullptr;
  if (!tenant.empty()) {
    auto it = t.tenants.find(tenant);
    if (it != t.tenants.end()) trow = &it->second;
  }
  const UserLimit* urow = nullptr;
  if (!who.user.empty()) {
    auto it = t.users.find(userKey(tenant, who.user));
    if (it != t.users.end()) urow = &it->second;
  }
  const std::string vip = "|" + keyPart(rule_ident);
  const std::string tkey = "|" + keyPart(tenant);
  const std::string ukey = "|" + keyPart(tenant) + "|" + keyPart(who.user);
  const std::string mkey = "|" + keyPart(model);

  // Requests per second.
  if (who.key) addRps(out, "k|" + keyPart(who.key->key_id), LimitReason::kKeyRps, who.key->rate_limit_rps,
                      who.key->burst_size);
  if (!who.user.empty()) {
    if (urow && urow->rps > 0)
      addRps(out, "u" + ukey, LimitReason::kUserRps, urow->rps, urow->burst_size);
    else
      addRps(out, "u" + ukey, LimitReason::kUserRps, dflt(&LimitDefaults::default_user_rps), 0);
  }
  if (!tenant.empty()) {
    if (trow && trow->rps > 0)
      addRps(out, "t" + tkey, LimitReason::kTenantRps, trow->rps, 0);
    else
      addRps(out, "t" + tkey, LimitReason::kTenantRps, dflt(&LimitDefaults::default_tenant_rps), 0);
  }
  if (!who.credentialed())
    addRps(out, "v" + vip, LimitReason::kVipRps, dflt(&LimitDefaults::vip_shared_rps), 0);

  // Tokens per minute.
  if (who.key)
    addTpm(out, "kq|" + keyPart(who.key->key_id), LimitReason::kKeyTpm, who.key->tokens_per_min, 0);
  if (!who.user.empty()) {
    if (urow && urow->tokens_per_min > 0)
      addTpm(out, "uq" + ukey, LimitReason::kUserTpm, urow->tokens_per_min, 0);
    else
      addTpm(out, "uq" + ukey, LimitReason::kUserTpm, dflt(&LimitDefaults::default_user_tpm), 0);
    if (urow)
      if (const ModelTpm* m = findModel(urow->model_limits, model))
        addTpm(out, "um" + ukey + mkey, LimitReason::kUserModelTpm,
               m->tokens_per_min, 0);
  }
  if (!tenant.empty()) {
    const int64_t pct = trow ? trow->burst_pct : 0;
    if (trow && trow->tokens_per_min > 0)
      addTpm(out, tenantTpmKey(tenant), LimitReason::kTenantTpm, trow->tokens_per_min, pct);
    else
      addTpm(out, tenantTpmKey(tenant), LimitReason::kTenantTpm, dflt(&LimitDefaults::default_tenant_tpm),
             pct);
    if (trow)
      if (const ModelTpm* m = findModel(trow->model_limits, model))
        addTpm(out, "tm" + tkey + mkey, LimitReason::kTenantModelTpm,
               m->tokens_per_min, pct);
  }
  addTpm(out, "vq" + vip, LimitReason::kVipTpm, dflt(&LimitDefaults::vip_shared_tpm), 0);
  return out;
}

}  // namespace kvgate::governance
