#include "governance/state_db.h"

#include <sqlite3.h>

#include <filesystem>

namespace kvgate::governance {

tl::unexpected<Error> dbError(sqlite3* db, const std::string& what) {
  // A full state disk (SQLITE_FULL) is 507 Insufficient Storage: the operator frees space.
  const int status = db && sqlite3_errcode(db) == SQLITE_FULL ? 507 : 503;
  return fail(status, "policy_store", what + ": " + (db ? sqlite3_errmsg(db) : "no database"), true);
}

Result<void> execSql(sqlite3* db, const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : "?";
    sqlite3_free(msg);
    return fail(503, "policy_store", std::string(sql).substr(0, 40) + ": " + m, true);
  }
  return {};
}

Result<sqlite3*> openStateDb(const std::string& dir, const char* schema) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  sqlite3* db = nullptr;
  const std::string path = dir + "/governance.db";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    auto e = dbError(db, "cannot open " + path);
    sqlite3_close(db);
    return e;
  }
  for (const char* sql :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA busy_timeout=2000", schema}) {
    auto r = execSql(db, sql);
    if (!r) {
      sqlite3_close(db);
      return tl::unexpected(r.error());
    }
  }
  return db;
}

}  // namespace kvgate::governance
