// governance.db: the SQLite file of governance state in --state-dir, shared by the key store and
// the JWT profile store (each its own connection and table). WAL with synchronous=FULL: a
// committed change survives kill -9 and power loss; readers never block the writer.
#pragma once
#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "common/result.h"

namespace kvgate::governance {

// A 503 policy_store error naming what failed and SQLite's message.
tl::unexpected<Error> dbError(sqlite3* db, const std::string& what);
Result<void> execSql(sqlite3* db, const char* sql);
// Opens `dir`/governance.db (creating both), applies the pragmas, then `schema` (CREATE TABLE IF
// NOT EXISTS ...). The caller owns the handle (sqlite3_close).
Result<sqlite3*> openStateDb(const std::string& dir, const char* schema);

// A prepared statement, finalized on every path.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s, nullptr); }
  ~Stmt() { sqlite3_finalize(s); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  explicit operator bool() const { return s != nullptr; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
  }
  void blob(int i, const std::string& v) {
    sqlite3_bind_blob(s, i, v.data(), int(v.size()), SQLITE_TRANSIENT);
  }
  void i64(int i, int64_t v) { sqlite3_bind_int64(s, i, v); }
  void real(int i, double v) { sqlite3_bind_double(s, i, v); }
  std::string col(int i) const {
    const void* p = sqlite3_column_blob(s, i);
    return p ? std::string(static_cast<const char*>(p), size_t(sqlite3_column_bytes(s, i))) : "";
  }
};

}  // namespace kvgate::governance
