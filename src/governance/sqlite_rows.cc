// The SQLite RowStore (row_store.h), with the one-time move of earlier versions' tables (copied
// into governance_rows in one transaction, then renamed *_v1; any read error undoes all of it).
#include <nlohmann/json.hpp>

#include <chrono>

#include "common/hex.h"
#include "common/log.h"
#include "governance/row_store.h"
#include "governance/state_db.h"

namespace kvgate::governance {

namespace {

bool tableExists(sqlite3* db, const char* name) {
  Stmt q(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1");
  if (!q) return false;
  q.text(1, name);
  return sqlite3_step(q.s) == SQLITE_ROW;
}

class SqliteRows final : public RowStore {
 public:
  explicit SqliteRows(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteRows() override { sqlite3_close(db_); }

  Result<std::vector<Row>> load(std::string_view kind) override {
    Stmt q(db_, "SELECT id, body FROM governance_rows WHERE kind=?1 ORDER BY id");
    if (!q) return dbError(db_, "prepare");
    q.text(1, std::string(kind));
    std::vector<Row> out;
    int rc;
    while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) out.push_back({q.col(0), q.col(1)});
    if (rc != SQLITE_DONE) return dbError(db_, "load " + std::string(kind));
    return out;
  }

  Result<void> put(std::string_view kind, const std::string& id, const std::string& body) override {
    Stmt q(db_, "INSERT OR REPLACE INTO governance_rows (kind, id, body) VALUES (?1, ?2, ?3)");
    if (!q) return dbError(db_, "prepare");
    q.text(1, std::string(kind));
    q.text(2, id);
    q.text(3, body);
    if (sqlite3_step(q.s) != SQLITE_DONE) return dbError(db_, "store " + std::string(kind));
    ++gen_;
    return {};
  }

  Result<bool> update(std::string_view kind, const std::string& id,
                      const std::string& body) override {
    Stmt q(db_, "UPDATE governance_rows SET body=?3 WHERE kind=?1 AND id=?2");
    if (!q) return dbError(db_, "prepare");
    q.text(1, std::string(kind));
    q.text(2, id);
    q.text(3, body);
    if (sqlite3_step(q.s) != SQLITE_DONE) return dbError(db_, "update " + std::string(kind));
    ++gen_;
    return sqlite3_changes(db_) > 0;
  }

  Result<bool> erase(std::string_view kind, const std::string& id) override {
    Stmt q(db_, "DELETE FROM governance_rows WHERE kind=?1 AND id=?2");
    if (!q) return dbError(db_, "prepare");
    q.text(1, std::string(kind));
    q.text(2, id);
    if (sqlite3_step(q.s) != SQLITE_DONE) return dbError(db_, "delete " + std::string(kind));
    ++gen_;
    return sqlite3_changes(db_) > 0;
  }

  Result<int64_t> generation() override { return gen_; }
  bool shared() const override { return false; }
  std::string describe() const override { return "SQLite " + path_; }

  // Moves the tables of earlier versions into governance_rows (one transaction; once).
  Result<void> migrate() {
    const bool keys = tableExists(db_, "api_keys"), profiles = tableExists(db_, "jwt_profiles"),
               limits = tableExists(db_, "limits");
    if (!keys && !profiles && !limits) return {};
    if (auto r = execSql(db_, "BEGIN IMMEDIATE"); !r) return r;
    auto undo = [&](tl::unexpected<Error> e) {
      execSql(db_, "ROLLBACK");
      return e;
    };
    if (keys) {
      Stmt q(db_,
             "SELECT key_id, tenant_id, name, allowed_models, rate_limit_rps, burst_size,"
             " tokens_per_min, expires_at, enabled, created_at, salt, hash FROM api_keys");
      if (!q) return undo(dbError(db_, "migrate api_keys"));
      int rc;
      while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
        nlohmann::json j = {{"key_id", q.col(0)},
                            {"tenant_id", q.col(1)},
                            {"name", q.col(2)},
                            {"rate_limit_rps", sqlite3_column_double(q.s, 4)},
                            {"burst_size", sqlite3_column_int64(q.s, 5)},
                            {"tokens_per_min", sqlite3_column_int64(q.s, 6)},
                            {"expires_at", sqlite3_column_int64(q.s, 7)},
                            {"enabled", sqlite3_column_int64(q.s, 8) != 0},
                            {"created_at", sqlite3_column_int64(q.s, 9)},
                            {"salt", toHex(q.col(10))},
                            {"hash", toHex(q.col(11))}};
        // (a damaged list stays damaged: the key store then fails it closed)
        auto models = nlohmann::json::parse(q.col(3), nullptr, false);
        j["allowed_models"] = models.is_discarded() ? nlohmann::json("damaged") : models;
        if (auto r = put("apikey", q.col(0), j.dump(-1, ' ', false,
                                                    nlohmann::json::error_handler_t::replace));
            !r)
          return undo(tl::unexpected(r.error()));
      }
      if (rc != SQLITE_DONE) return undo(dbError(db_, "migrate api_keys"));  // (never half)
    }
    if (profiles) {
      Stmt q(db_, "SELECT name, body FROM jwt_profiles");
      if (!q) return undo(dbError(db_, "migrate jwt_profiles"));
      int rc;
      while ((rc = sqlite3_step(q.s)) == SQLITE_ROW)
        if (auto r = put("jwtprofile", q.col(0), q.col(1)); !r)
          return undo(tl::unexpected(r.error()));
      if (rc != SQLITE_DONE) return undo(dbError(db_, "migrate jwt_profiles"));
    }
    if (limits) {
      Stmt q(db_, "SELECT kind, id, body FROM limits");
      if (!q) return undo(dbError(db_, "migrate limits"));
      int rc;
      while ((rc = sqlite3_step(q.s)) == SQLITE_ROW)
        if (auto r = put(q.col(0), q.col(1), q.col(2)); !r) return undo(tl::unexpected(r.error()));
      if (rc != SQLITE_DONE) return undo(dbError(db_, "migrate limits"));
    }
    // The old tables are kept under another name (a downgrade, or a look by hand), not dropped.
    for (auto [old_name, sql] : {std::pair{keys, "ALTER TABLE api_keys RENAME TO api_keys_v1"},
                                 std::pair{profiles, "ALTER TABLE jwt_profiles RENAME TO jwt_profiles_v1"},
                                 std::pair{limits, "ALTER TABLE limits RENAME TO limits_v1"}})
      if (old_name) {
        // (an earlier backup of that name is kept: this one gets the time appended)
        std::string stmt = sql;
        const std::string backup = stmt.substr(stmt.rfind(' ') + 1);
        if (tableExists(db_, backup.c_str()))
          stmt += "_" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
        if (auto r = execSql(db_, stmt.c_str()); !r) return undo(tl::unexpected(r.error()));
      }
    if (auto r = execSql(db_, "COMMIT"); !r) return undo(tl::unexpected(r.error()));
    log::info("governance", "moved earlier governance tables into governance_rows (kept as *_v1)");
    return {};
  }

 private:
  sqlite3* db_;
  std::string path_;
  int64_t gen_ = 0;
};

}  // namespace

Result<std::unique_ptr<RowStore>> openSqliteRows(const std::string& dir) {
  auto db = openStateDb(dir,
                        "CREATE TABLE IF NOT EXISTS governance_rows (kind TEXT NOT NULL,"
                        " id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, id))");
  if (!db) return tl::unexpected(db.error());
  auto st = std::make_unique<SqliteRows>(*db, dir + "/governance.db");
  if (auto r = st->migrate(); !r) return tl::unexpected(r.error());
  return st;
}

}  // namespace kvgate::governance
