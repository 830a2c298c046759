// The governance state of one gateway: its RowStore (SQLite in --state-dir, or PostgreSQL with
// --state-db shared by several replicas) and the three stores over it (API keys, JWT profiles,
// limits), which publish to the data plane's registries.
//
// With a shared store, poll() (serve runs it every second on the control thread) reads the
// generation counter and, when another replica changed something, reloads every store. A store
// that cannot be reached at start is retried by poll(); until then the routes answer 503 and
// rules that need keys or profiles refuse requests (policy_store_unavailable), never pass them.
// A reload that fails keeps the last published state (fail static), logged.
#pragma once
#include <memory>
#include <string>

#include "governance/key_store.h"
#include "governance/limit_store.h"
#include "governance/profile_store.h"
#include "governance/row_store.h"

namespace kvgate::governance {

class GovernanceState {
 public:
  GovernanceState(std::string state_dir, std::string state_db)
      : dir_(std::move(state_dir)), db_(std::move(state_db)) {}
  // Opens the row store and the stores (errors are logged; stores stay null).
  void open();
  // Returns true when the stores were replaced (new or null: the caller hands them out again).
  bool poll();
  KeyStore* keys() const { return keys_.get(); }
  ProfileStore* profiles() const { return profiles_.get(); }
  LimitStore* limits() const { return limits_.get(); }
  bool shared() const { return !db_.empty(); }

 private:
  void importLocal();
  std::string dir_, db_;
  std::unique_ptr<RowStore> rows_;
  // (destroyed before rows_, which they use)
  std::unique_ptr<KeyStore> keys_;
  std::unique_ptr<ProfileStore> profiles_;
  std::unique_ptr<LimitStore> limits_;
  int64_t gen_ = -1;
  int64_t failed_at_s_ = 0;
  int64_t opened_at_s_ = 0;  // last attempt to open an unreachable store  // last failed poll logged (at most one line per minute)
};

}  // namespace kvgate::governance
