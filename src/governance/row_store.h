// Where governance state lives: rows of (kind, id, body JSON) for API keys ("apikey"), JWT
// profiles ("jwtprofile") and limits ("tenant", "user", "defaults").
//
// Two backends:
//  - SQLite (embedded default): table governance_rows in --state-dir/governance.db, WAL with
//    synchronous=FULL, one transaction per change committed before the API acknowledges (kill -9
//    safe). Tables of earlier versions (api_keys, jwt_profiles, limits) are moved into it once.
//  - PostgreSQL (--state-db CONNINFO, libpq): table kvgate_governance shared by every replica,
//    and a generation counter bumped in the same statement as each change, so a replica notices
//    another one's change by polling one integer (serve polls every second and reloads).
// Both are used from the control thread only (the data plane reads published snapshots), so a
// slow database delays management calls, never requests. Errors are 503 policy_store.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::governance {

struct Row {
  std::string id, body;
};

class RowStore {
 public:
  virtual ~RowStore() = default;
  virtual Result<std::vector<Row>> load(std::string_view kind) = 0;
  virtual Result<void> put(std::string_view kind, const std::string& id,
                           const std::string& body) = 0;
  // Only an existing row (false: none, e.g. another replica deleted it: an update must not
  // bring it back).
  virtual Result<bool> update(std::string_view kind, const std::string& id,
                              const std::string& body) = 0;
  // False when there was no such row.
  virtual Result<bool> erase(std::string_view kind, const std::string& id) = 0;
  // A number that changes with every change by anyone (SQLite: only this process changes it).
  virtual Result<int64_t> generation() = 0;
  virtual bool shared() const = 0;  // other replicas write too (reload on a new generation)
  virtual std::string describe() const = 0;  // for logs: where the rows are
};

Result<std::unique_ptr<RowStore>> openSqliteRows(const std::string& dir);
// `conninfo`: a libpq connection string or URI (postgresql://user@host:port/db).
Result<std::unique_ptr<RowStore>> openPostgresRows(const std::string& conninfo);
// The connection string openPostgresRows connects with: the operator's, plus bounds on every wait
// and, when the operator set no sslmode, `sslmode=verify-full` for any host that is not local
// (a Unix socket, localhost, 127.0.0.0/8, ::1): libpq's own default ("prefer") silently accepts
// an unencrypted or unverified server, and the governance rows (API key hashes, limits) cross that
// link. Unparseable strings are a 400 naming --state-db.
Result<std::string> postgresConninfo(const std::string& conninfo);

}  // namespace kvgate::governance
