#include "governance/key_store.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "governance/quota.h"


namespace kvgate::governance {


namespace {

std::string keyJson(const ApiKey& k) {
  nlohmann::json j = keySummary(k);  // (what the API shows, plus the salt and hash)
  j["salt"] = toHex(k.salt);
  j["hash"] = toHex(k.hash);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A stored row back into a key; damaged parts fail closed (deny_all, or no secret that matches).
ApiKey parseKeyRow(const Row& row) {
  ApiKey k;
  k.key_id = row.id;
  auto j = nlohmann::json::parse(row.body, nullptr, false);
  if (!j.is_object()) {
    k.deny_all = true;
    k.enabled = false;
    return k;
  }
  auto str = [&](const char* f) {
    auto it = j.find(f);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* f, double dflt) {
    auto it = j.find(f);
    return it != j.end() && it->is_number() ? it->get<double>() : dflt;
  };
  k.tenant_id = str("tenant_id");
  k.name = str("name");
  auto models = j.find("allowed_models");
  if (models == j.end() || !models->is_array()) k.deny_all = true;
  else
    for (auto& m : *models) {
      if (m.is_string()) k.allowed_models.push_back(m.get<std::string>());
      else k.deny_all = true;
    }
  k.rate_limit_rps = num("rate_limit_rps", -1);
  const double burst = num("burst_size", -1), tpm = num("tokens_per_min", -1);
  // Limits that make no sense (a damaged row) fail closed, like a damaged allowed_models.
  if (!std::isfinite(k.rate_limit_rps) || k.rate_limit_rps < 0 || k.rate_limit_rps > 1e15 ||
      (k.rate_limit_rps > 0 && k.rate_limit_rps < 1e-6) || !(burst >= 0 && burst <= 1e15) ||
      !(tpm >= 0 && tpm <= 1e15))
    k.deny_all = true;
  k.burst_size = k.deny_all ? 0 : static_cast<int64_t>(burst);
  k.tokens_per_min = k.deny_all ? 0 : static_cast<int64_t>(tpm);
  if (k.rate_limit_rps < 0 || !std::isfinite(k.rate_limit_rps)) k.rate_limit_rps = 0;
  k.expires_at = static_cast<int64_t>(num("expires_at", 0));
  auto en = j.find("enabled");
  k.enabled = en != j.end() && en->is_boolean() && en->get<bool>();
  k.created_at = static_cast<int64_t>(num("created_at", 0));
  k.salt = fromHex(str("salt"));
  k.hash = fromHex(str("hash"));
  return k;
}

}  // namespace

nlohmann::json keySummary(const ApiKey& k) {
  return {{"key_id", k.key_id},
          {"tenant_id", k.tenant_id},
          {"name", k.name},
          {"allowed_models", k.allowed_models},
          {"rate_limit_rps", k.rate_limit_rps},
          {"burst_size", k.burst_size},
          {"tokens_per_min", k.tokens_per_min},
          {"expires_at", k.expires_at},
          {"enabled", k.enabled},
          {"created_at", k.created_at}};
}

Result<std::unique_ptr<KeyStore>> KeyStore::open(RowStore& rows, KeyRegistry& registry) {
  std::unique_ptr<KeyStore> st(new KeyStore(rows, registry));
  auto r = st->reload();
  if (!r) return tl::unexpected(r.error());
  return st;
}

Result<void> KeyStore::reload() {
  auto rows = rows_.load("apikey");
  if (!rows) return tl::unexpected(rows.error());
  auto next = std::make_shared<KeyTable>();
  next->loaded = true;
  size_t bytes = 0;
  for (const Row& row : *rows) {
    ApiKey k = parseKeyRow(row);
    bytes += footprint(k);
    std::string id = k.key_id;  // (before the move: argument order is unspecified)
    next->by_id.emplace(std::move(id), std::make_shared<const ApiKey>(std::move(k)));
  }
  bytes_ = bytes;
  publish(std::move(next));
  return {};
}

void KeyStore::publish(std::shared_ptr<KeyTable> next) {
  table_ = next;
  registry_.publish(next);
}

Result<void> KeyStore::write(const ApiKey& k, bool insert) {
  if (insert) {
    if (auto r = rows_.put("apikey", k.key_id, keyJson(k)); !r) return r;
  } else {
    // (only a key that still exists: one another replica deleted is not brought back)
    auto r = rows_.update("apikey", k.key_id, keyJson(k));
    if (!r) return tl::unexpected(r.error());
    if (!*r) return fail(404, "key_id", "no such key");
  }
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
  auto erased = rows_.erase("apikey", key_id);
  if (!erased) return tl::unexpected(erased.error());
  auto next = std::make_shared<KeyTable>(*table_);
  bytes_ -= footprint(*next->by_id[key_id]);
  next->by_id.erase(key_id);
  publish(std::move(next));
  // Its buckets go with it (a new key never has this id; Redis keys expire by themselves).
  quotaLedger().forget("k|" + keyPart(key_id));
  quotaLedger().forget("kq|" + keyPart(key_id));
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
