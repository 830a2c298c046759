// governance.db: the SQLite file of governance state in --state-dir, shared by the key store and
// the JWT profile store (each its own connection and table). WAL with synchronous=FULL: a
// committed change survives kill -9 and power loss; readers never block the writer.
#pragma once
#include <string>

#include "common/result.h"

struct sqlite3;

namespace kvgate::governance {

// A 503 policy_store error naming what failed and SQLite's message.
tl::unexpected<Error> dbError(sqlite3* db, const std::string& what);
Result<void> execSql(sqlite3* db, const char* sql);
// Opens `dir`/governance.db (creating both), applies the pragmas, then `schema` (CREATE TABLE IF
// NOT EXISTS ...). The caller owns the handle (sqlite3_close).
Result<sqlite3*> openStateDb(const std::string& dir, const char* schema);

}  // namespace kvgate::governance
