// The API keys' durable home: rows of kind "apikey" in the governance RowStore (row_store.h:
// SQLite in --state-dir by default, PostgreSQL when replicas share keys).
//
// Every change is committed before the API acknowledges, so a kill -9 at any moment loses no
// acknowledged key (and shows no half-made one). After each change the whole key set is
// published to the data plane as a new immutable KeyTable (keyRegistry()): workers never touch
// the database. reload() re-reads every row (a shared store changed by another replica). Used
// from the control thread only (like the rule store).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "governance/api_keys.h"
#include "governance/row_store.h"

namespace kvgate::governance {

// A key as the API shows it: the record without salt or hash, with created_at.
nlohmann::json keySummary(const ApiKey& k);

class KeyStore {
 public:
  // Loads every key row and publishes them. `rows` outlives the store.
  static Result<std::unique_ptr<KeyStore>> open(RowStore& rows, KeyRegistry& registry);
  Result<void> reload();
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
  KeyStore(RowStore& rows, KeyRegistry& registry) : rows_(rows), registry_(registry) {}
  Result<void> write(const ApiKey& k, bool insert);
  void publish(std::shared_ptr<KeyTable> next);
  RowStore& rows_;
  KeyRegistry& registry_;
  static size_t footprint(const ApiKey& k);
  std::shared_ptr<const KeyTable> table_ = std::make_shared<const KeyTable>();
  size_t bytes_ = 0;
};

}  // namespace kvgate::governance
