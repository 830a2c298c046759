#include "governance/limit_store.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/log.h"

namespace kvgate::governance {

namespace {
std::string defaultsId(const std::string& scope, const std::string& rule_ident) {
  return scope == "global" ? std::string("global") : "rule|" + rule_ident;
}
}  // namespace

Result<std::unique_ptr<LimitStore>> LimitStore::open(RowStore& rows, LimitRegistry& registry) {
  std::unique_ptr<LimitStore> st(new LimitStore(rows, registry));
  if (auto r = st->reload(); !r) return tl::unexpected(r.error());
  return st;
}

Result<void> LimitStore::reload() {
  auto next = std::make_shared<LimitTable>();
  next->loaded = true;
  for (const char* kind : {"tenant", "user", "defaults"}) {
    auto rows = rows_.load(kind);
    if (!rows) return tl::unexpected(rows.error());
    for (const Row& row : *rows) {
      auto j = nlohmann::json::parse(row.body, nullptr, false);
      // A damaged row is skipped and logged: its scope falls back to the defaults.
      auto refuse = [&](const std::string& why) {
        log::error("governance", std::string("limits row ") + kind + " '" + row.id +
                                     "' refused: " + why);
      };
      if (std::string_view(kind) == "tenant") {
        auto t = parseTenantLimit(j, nullptr);
        if (!t) refuse(t.error().what);
        else next->tenants[t->tenant_id] = std::move(*t);
      } else if (std::string_view(kind) == "user") {
        auto u = parseUserLimit(j);
        if (!u) refuse(u.error().what);
        else next->users[userKey(u->tenant_id, u->user_id)] = std::move(*u);
      } else {
        const int64_t updated =
            j.is_object() && j.contains("updated_at") && j["updated_at"].is_number_integer()
                ? j["updated_at"].get<int64_t>()
                : 0;
        if (j.is_object()) j.erase("updated_at");
        auto d = parseDefaults(j);
        if (!d) {
          refuse(d.error().what);
          continue;
        }
        d->updated_at = updated;
        if (d->scope == "global") next->global = std::move(*d);
        else next->rules[d->rule_ident] = std::move(*d);
      }
    }
  }
  next->index();
  table_ = next;
  registry_.publish(std::move(next));
  return {};
}

Result<void> LimitStore::write(const char* kind, const std::string& id, const std::string& body,
                               std::shared_ptr<LimitTable> next) {
  if (auto r = rows_.put(kind, id, body); !r) return r;
  next->index();
  table_ = next;
  registry_.publish(std::move(next));
  return {};
}

Result<void> LimitStore::erase(const char* kind, const std::string& id,
                               std::shared_ptr<LimitTable> next) {
  if (auto r = rows_.erase(kind, id); !r) return tl::unexpected(r.error());
  next->index();
  table_ = next;
  registry_.publish(std::move(next));
  return {};
}

Result<void> LimitStore::putTenant(const TenantLimit& t) {
  if (!table_->tenants.count(t.tenant_id) && table_->tenants.size() >= kMaxRows)
    return fail(409, "tenant_id", "at most " + std::to_string(kMaxRows) + " tenant rows");
  auto next = std::make_shared<LimitTable>(*table_);
  next->tenants[t.tenant_id] = t;
  return write("tenant", t.tenant_id, toJson(t).dump(), std::move(next));
}

Result<void> LimitStore::putUser(const UserLimit& u) {
  const std::string k = userKey(u.tenant_id, u.user_id);
  if (!table_->users.count(k) && table_->users.size() >= kMaxRows)
    return fail(409, "user_id", "at most " + std::to_string(kMaxRows) + " user rows");
  auto next = std::make_shared<LimitTable>(*table_);
  next->users[k] = u;
  return write("user", k, toJson(u).dump(), std::move(next));
}

Result<void> LimitStore::putDefaults(const LimitDefaults& d) {
  if (d.scope == "rule" && !table_->rules.count(d.rule_ident) &&
      table_->rules.size() >= kMaxRows)
    return fail(409, "rule_ident", "at most " + std::to_string(kMaxRows) + " rule defaults rows");
  auto next = std::make_shared<LimitTable>(*table_);
  if (d.scope == "global") next->global = d;
  else next->rules[d.rule_ident] = d;  // (a POST replaces the whole row)
  return write("defaults", defaultsId(d.scope, d.rule_ident), toJson(d).dump(), std::move(next));
}

Result<void> LimitStore::removeTenant(const std::string& tenant) {
  if (!table_->tenants.count(tenant))
    return fail(404, "tenant rate-limit row", "no tenant rate-limit row for '" + tenant + "'");
  auto next = std::make_shared<LimitTable>(*table_);
  next->tenants.erase(tenant);
  return erase("tenant", tenant, std::move(next));
}

Result<void> LimitStore::removeUser(const std::string& tenant, const std::string& user) {
  const std::string k = userKey(tenant, user);
  if (!table_->users.count(k))
    return fail(404, "user rate-limit row", "no user rate-limit row for '" + tenant + "/" + user + "'");
  auto next = std::make_shared<LimitTable>(*table_);
  next->users.erase(k);
  return erase("user", k, std::move(next));
}

Result<void> LimitStore::removeDefaults(const std::string& scope, const std::string& rule_ident) {
  if (!defaults(scope, rule_ident))
    return fail(404, "rate-limit defaults row", "no rate-limit defaults row for " + scope +
                                                     (scope == "rule" ? " " + rule_ident : ""));
  auto next = std::make_shared<LimitTable>(*table_);
  if (scope == "global") next->global.reset();
  else next->rules.erase(rule_ident);
  return erase("defaults", defaultsId(scope, rule_ident), std::move(next));
}

const TenantLimit* LimitStore::tenant(const std::string& id) const {
  auto it = table_->tenants.find(id);
  return it == table_->tenants.end() ? nullptr : &it->second;
}

const UserLimit* LimitStore::user(const std::string& tenant, const std::string& user) const {
  auto it = table_->users.find(userKey(tenant, user));
  return it == table_->users.end() ? nullptr : &it->second;
}

const LimitDefaults* LimitStore::defaults(const std::string& scope,
                                          const std::string& rule_ident) const {
  if (scope == "global") return table_->global ? &*table_->global : nullptr;
  auto it = table_->rules.find(rule_ident);
  return it == table_->rules.end() ? nullptr : &it->second;
}

std::vector<UserLimit> LimitStore::users(const std::string& tenant) const {
  std::vector<UserLimit> out;
  for (const auto& [k, u] : table_->users)
    if (u.tenant_id == tenant) out.push_back(u);
  std::sort(out.begin(), out.end(),
            [](const UserLimit& a, const UserLimit& b) { return a.user_id < b.user_id; });
  return out;
}

std::vector<LimitDefaults> LimitStore::ruleDefaults() const {
  std::vector<LimitDefaults> out;
  for (const auto& [k, d] : table_->rules) out.push_back(d);
  std::sort(out.begin(), out.end(), [](const LimitDefaults& a, const LimitDefaults& b) {
    return a.rule_ident < b.rule_ident;
  });
  return out;
}

std::vector<TenantLimit> LimitStore::tenants() const {
  std::vector<TenantLimit> out;
  for (const auto& [k, t] : table_->tenants) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const TenantLimit& a, const TenantLimit& b) { return a.tenant_id < b.tenant_id; });
  return out;
}

}  // namespace kvgate::governance
