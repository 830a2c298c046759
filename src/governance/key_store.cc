#include "governance/key_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "governance/state_db.h"

namespace kvgate::governance {


Result<std::unique_ptr<KeyStore>> KeyStore::open(const std::string& dir, KeyRegistry& registry) {
  auto db = openStateDb(dir,
                        "CREATE TABLE IF NOT EXISTS api_keys ("
                        " key_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL,"
                        " allowed_models TEXT NOT NULL, rate_limit_rps REAL NOT NULL,"
                        " burst_size INTEGER NOT NULL, tokens_per_min INTEGER NOT NULL,"
                        " expires_at INTEGER NOT NULL, enabled INTEGER NOT NULL,"
                        " created_at INTEGER NOT NULL, salt BLOB NOT NULL, hash BLOB NOT NULL)");
  if (!db) return tl::unexpected(db.error());
  std::unique_ptr<KeyStore> st(new KeyStore(*db, registry));
  auto r = st->loadAll();
  if (!r) return tl::unexpected(r.error());
  return st;
}

KeyStore::~KeyStore() { sqlite3_close(db_); }


Result<void> KeyStore::loadAll() {
  Stmt q(db_,
         "SELECT key_id, tenant_id, name, allowed_models, rate_limit_rps, burst_size,"
         " tokens_per_min, expires_at, enabled, created_at, salt, hash FROM api_keys");
  if (!q) return dbError(db_, "load api_keys");
  auto next = std::make_shared<KeyTable>();
  next->loaded = true;
  int rc;
  while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
    ApiKey k;
    k.key_id = q.col(0);
    k.tenant_id = q.col(1);
    k.name = q.col(2);
    // A damaged list fails closed: the key may use no model (a parse error must not widen it).
    auto models = nlohmann::json::parse(q.col(3), nullptr, false);
    if (!models.is_array()) k.deny_all = true;
    else
      for (auto& m : models) {
        if (m.is_string()) k.allowed_models.push_back(m.get<std::string>());
        else k.deny_all = true;
      }
    k.rate_limit_rps = sqlite3_column_double(q.s, 4);
    k.burst_size = sqlite3_column_int64(q.s, 5);
    // Limits that make no sense (a damaged row) fail closed, like a damaged allowed_models.
    if (!std::isfinite(k.rate_limit_rps) || k.rate_limit_rps < 0 || k.rate_limit_rps > 1e15 ||
        (k.rate_limit_rps > 0 && k.rate_limit_rps < 1e-6) || k.burst_size < 0)
      k.deny_all = true;
    k.tokens_per_min = sqlite3_column_int64(q.s, 6);
    k.expires_at = sqlite3_column_int64(q.s, 7);
    k.enabled = sqlite3_column_int64(q.s, 8) != 0;
    k.created_at = sqlite3_column_int64(q.s, 9);
    k.salt = q.col(10);
    k.hash = q.col(11);
    bytes_ += footprint(k);
    std::string id = k.key_id;  // (before the move: argument order is unspecified)
    next->by_id.emplace(std::move(id), std::make_shared<const ApiKey>(std::move(k)));
  }
  if (rc != SQLITE_DONE) return dbError(db_, "load api_keys");
  publish(std::move(next));
  return {};
}

void KeyStore::publish(std::shared_ptr<KeyTable> next) {
  table_ = next;
  registry_.publish(next);
}

Result<void> KeyStore::write(const ApiKey& k, bool insert) {
  Stmt q(db_, insert ? "INSERT INTO api_keys (tenant_id, name, allowed_models, rate_limit_rps,"
                       " burst_size, tokens_per_min, expires_at, enabled, created_at, salt, hash,"
                       " key_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)"
                     : "UPDATE api_keys SET tenant_id=?1, name=?2, allowed_models=?3,"
                       " rate_limit_rps=?4, burst_size=?5, tokens_per_min=?6, expires_at=?7,"
                       " enabled=?8, created_at=?9, salt=?10, hash=?11 WHERE key_id=?12");
  if (!q) return dbError(db_, "prepare");
  q.text(1, k.tenant_id);
  q.text(2, k.name);
  q.text(3, nlohmann::json(k.allowed_models).dump());
  q.real(4, k.rate_limit_rps);
  q.i64(5, k.burst_size);
  q.i64(6, k.tokens_per_min);
  q.i64(7, k.expires_at);
  q.i64(8, k.enabled ? 1 : 0);
  q.i64(9, k.created_at);
  q.blob(10, k.salt);
  q.blob(11, k.hash);
  q.text(12, k.key_id);
  if (sqlite3_step(q.s) != SQLITE_DONE) return dbError(db_, insert ? "insert key" : "update key");
  if (!insert && sqlite3_changes(db_) == 0) return fail(404, "key_id", "no such key");
  auto next = std::make_shared<KeyTable>(*table_);
  auto& slot = next->by_id[k.key_id];
  if (slot) bytes_ -= footprint(*slot);
  bytes_ += footprint(k);
  slot = std::make_shared<const ApiKey>(k);
  publish(std::move(next));
  return {};
}

size_t KeyStore::footprint(const ApiKey& k) {
  size_t b = sizeof(ApiKey) + k.key_id.size() + k.tenant_id.size() + k.name.size() + 64;
  for (const auto& m : k.allowed_models) b += m.size() + sizeof(std::string);
  return b;
}

Result<void> KeyStore::insert(const ApiKey& k) {
  if (table_->by_id.size() >= kMaxKeys)
    return fail(409, "key_id", "at most " + std::to_string(kMaxKeys) + " keys");
  if (bytes_ + footprint(k) > kMaxBytes)
    return fail(409, "key_id", "the key set is at its size limit (allowed_models lists)");
  return write(k, true);
}

Result<void> KeyStore::update(const ApiKey& k) {
  auto it = table_->by_id.find(k.key_id);
  if (it == table_->by_id.end()) return fail(404, "key_id", "no such key");
  if (bytes_ - footprint(*it->second) + footprint(k) > kMaxBytes)
    return fail(409, "key_id", "the key set is at its size limit (allowed_models lists)");
  return write(k, false);
}

Result<void> KeyStore::remove(const std::string& key_id) {
  if (!table_->by_id.count(key_id)) return fail(404, "key_id", "no such key");
  Stmt q(db_, "DELETE FROM api_keys WHERE key_id=?1");
  if (!q) return dbError(db_, "prepare");
  q.text(1, key_id);
  if (sqlite3_step(q.s) != SQLITE_DONE) return dbError(db_, "delete key");
  auto next = std::make_shared<KeyTable>(*table_);
  bytes_ -= footprint(*next->by_id[key_id]);
  next->by_id.erase(key_id);
  publish(std::move(next));
  return {};
}

std::vector<ApiKey> KeyStore::list(const std::string& tenant) const {
  std::vector<ApiKey> out;
  for (const auto& [id, k] : table_->by_id)
    if (tenant.empty() || k->tenant_id == tenant) out.push_back(*k);
  std::sort(out.begin(), out.end(), [](const ApiKey& a, const ApiKey& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.key_id < b.key_id;
  });
  return out;
}

const ApiKey* KeyStore::find(const std::string& key_id) const {
  auto it = table_->by_id.find(key_id);
  return it == table_->by_id.end() ? nullptr : it->second.get();
}

}  // namespace kvgate::governance
