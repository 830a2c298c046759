// The limits' durable home: rows of kinds tenant, user and defaults (the REST bodies as JSON) in
// the governance RowStore (row_store.h: SQLite by default, PostgreSQL for shared replicas). Every
// change is committed before the API acknowledges, then the whole set is published to the data
// plane as a new immutable LimitTable (limitRegistry()); reload() re-reads every row. Control
// thread only, like the key store.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "governance/limits.h"
#include "governance/row_store.h"

namespace kvgate::governance {

class LimitStore {
 public:
  static Result<std::unique_ptr<LimitStore>> open(RowStore& rows, LimitRegistry& registry);
  Result<void> reload();
  LimitStore(const LimitStore&) = delete;
  LimitStore& operator=(const LimitStore&) = delete;

  Result<void> putTenant(const TenantLimit& t);
  Result<void> putUser(const UserLimit& u);
  Result<void> putDefaults(const LimitDefaults& d);
  Result<void> removeTenant(const std::string& tenant);  // 404 when absent
  Result<void> removeUser(const std::string& tenant, const std::string& user);
  Result<void> removeDefaults(const std::string& scope, const std::string& rule_ident);

  const TenantLimit* tenant(const std::string& id) const;
  const UserLimit* user(const std::string& tenant, const std::string& user) const;
  const LimitDefaults* defaults(const std::string& scope, const std::string& rule_ident) const;
  std::vector<UserLimit> users(const std::string& tenant) const;  // by user_id
  std::vector<LimitDefaults> ruleDefaults() const;                // by rule_ident
  std::vector<TenantLimit> tenants() const;                        // by tenant_id

  static constexpr size_t kMaxRows = 100000;  // per kind

 private:
  LimitStore(RowStore& rows, LimitRegistry& registry) : rows_(rows), registry_(registry) {}
  Result<void> write(const char* kind, const std::string& id, const std::string& body,
                     std::shared_ptr<LimitTable> next);
  Result<void> erase(const char* kind, const std::string& id, std::shared_ptr<LimitTable> next);
  RowStore& rows_;
  LimitRegistry& registry_;
  std::shared_ptr<const LimitTable> table_ = std::make_shared<const LimitTable>();
};

}  // namespace kvgate::governance
