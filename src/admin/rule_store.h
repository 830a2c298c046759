// The rule set of the management API: validation result in, data plane and state file out.
//
// Every change goes through commit(): the new set is written to a temp file and fsynced first (a
// full disk, 507, refuses the change before anything moves), then the data plane applies it (a
// VIP that cannot be bound fails the change: the temp file is dropped), then the file is renamed
// over the state file and the directory fsynced before the API acknowledges, so a kill -9 at any
// moment loses no acknowledged rule. Used from the control thread only.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/rule.h"
#include "proxy/data_plane.h"

namespace kvgate::admin {

class RuleStore {
 public:
  RuleStore(std::string state_dir, proxy::DataPlane& dp) : dir_(std::move(state_dir)), dp_(dp) {}
  // Restores the saved rules (if any) and applies them.
  Result<size_t> load();
  // Creates, updates (endpoints replaced) or, with an empty endpoint list, deletes a rule.
  Result<void> post(config::RuleSpec rule);
  // Deletes every rule matching `pred`; 404 when none matched.
  Result<size_t> removeIf(const std::function<bool(const config::RuleSpec&)>& pred,
                          const std::string& what);
  const std::vector<config::RuleSpec>& rules() const { return rules_; }
  // Another consumer of the rule set (the KV event plane): `check` may refuse a set before
  // anything changes (its error is the API's answer); `applied` learns each set that took effect.
  using Check = std::function<Result<void>(const std::vector<config::RuleSpec>&)>;
  using Applied = std::function<void(const std::vector<config::RuleSpec>&)>;
  void setListener(Check check, Applied applied) {
    check_ = std::move(check);
    applied_ = std::move(applied);
  }
  std::string statePath() const { return dir_ + "/rules.json"; }
  proxy::DataPlane& dataPlane() { return dp_; }

 private:
  Result<void> commit(std::vector<config::RuleSpec> next);
  Result<void> persist(const std::vector<config::RuleSpec>& rules);  // writeTemp + publishTemp
  Result<void> writeTemp(const std::vector<config::RuleSpec>& rules);
  Result<void> publishTemp();
  Result<void> keepRejected(const nlohmann::json& rejected);
  std::string dir_;
  proxy::DataPlane& dp_;
  std::vector<config::RuleSpec> rules_;
  Check check_;
  Applied applied_;
};

// The JSON form a rule is saved in (what POST accepts, every stored field kept).
nlohmann::json storedJson(const config::RuleSpec& r);

}  // namespace kvgate::admin
