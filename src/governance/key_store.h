// The API keys' durable home: SQLite in --state-dir (governance.db), the embedded default.
//
// Every change is one transaction in WAL mode with synchronous=FULL, committed before the API
// acknowledges, so a kill -9 at any moment loses no acknowledged key (and shows no half-made
// one). After each change the whole key set is published to the data plane as a new immutable
// KeyTable (keyRegistry()): workers never touch the database. Used from the control thread only
// (like the rule store).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "governance/api_keys.h"

struct sqlite3;

namespace kvgate::governance {

class KeyStore {
 public:
  // Opens (creating) `dir`/governance.db and publishes what it holds.
  static Result<std::unique_ptr<KeyStore>> open(const std::string& dir, KeyRegistry& registry);
  ~KeyStore();
  KeyStore(const KeyStore&) = delete;
  KeyStore& operator=(const KeyStore&) = delete;

  Result<void> insert(const ApiKey& k);
  Result<void> update(const ApiKey& k);  // 404 when absent
  Result<void> remove(const std::string& key_id);  // 404 when absent
  // All keys (of one tenant when `tenant` is not empty), by creation time then id.
  std::vector<ApiKey> list(const std::string& tenant) const;
  const ApiKey* find(const std::string& key_id) const;
  size_t size() const { return table_->by_id.size(); }
  static constexpr size_t kMaxKeys = 100000;
  static constexpr size_t kMaxBytes = size_t(64) << 20;  // the records' memory, all keys

 private:
  KeyStore(sqlite3* db, KeyRegistry& registry) : db_(db), registry_(registry) {}
  Result<void> write(const ApiKey& k, bool insert);
  Result<void> loadAll();
  void publish(std::shared_ptr<KeyTable> next);
  sqlite3* db_;
  KeyRegistry& registry_;
  static size_t footprint(const ApiKey& k);
  std::shared_ptr<const KeyTable> table_ = std::make_shared<const KeyTable>();
  size_t bytes_ = 0;
};

}  // namespace kvgate::governance
