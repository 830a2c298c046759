#include "governance/state.h"

#include <chrono>
#include <filesystem>

#include "common/log.h"

namespace kvgate::governance {

namespace {
int64_t nowS() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void GovernanceState::open() {
  auto rows = db_.empty() ? openSqliteRows(dir_) : openPostgresRows(db_);
  if (!rows) {
    log::error("serve", "governance store unavailable (keys, JWT profiles, limits answer 503): " +
                            rows.error().what);
    return;
  }
  rows_ = std::move(*rows);
  auto g = rows_->generation();
  if (g) gen_ = *g;
  if (!db_.empty() && g && *g == 0) importLocal();  // (a store never written to, only)
  if (auto ks = KeyStore::open(*rows_, keyRegistry())) {
    keys_ = std::move(*ks);
    log::info("serve", "API keys: " + std::to_string(keys_->size()) + " in " + rows_->describe());
  } else {
    log::error("serve", "API key store unavailable: " + ks.error().what);
  }
  if (auto ps = ProfileStore::open(*rows_, jwtRegistry())) {
    profiles_ = std::move(*ps);
    profiles_->startRefresh();
  } else {
    log::error("serve", "JWT profile store unavailable: " + ps.error().what);
  }
  if (auto ls = LimitStore::open(*rows_, limitRegistry())) {
    limits_ = std::move(*ls);
  } else {
    log::error("serve", "limit store unavailable: " + ls.error().what);
  }
}

// A PostgreSQL store never written to, and a SQLite store in --state-dir from before --state-db:
// its rows are copied in (upserts: replicas starting together copy the same rows), so switching
// to a shared store keeps every key, profile and limit.
void GovernanceState::importLocal() {
  std::error_code ec;
  if (!std::filesystem::exists(dir_ + "/governance.db", ec)) return;
  auto local = openSqliteRows(dir_);
  if (!local) {
    log::warn("serve", "cannot read " + dir_ + "/governance.db to import: " + local.error().what);
    return;
  }
  // A marker row first: of replicas starting together, only the first imports.
  auto marker = rows_->load("meta");
  if (!marker || !marker->empty()) return;
  if (!rows_->put("meta", "imported", "{\"from\":\"" + dir_ + "\"}")) return;
  size_t n = 0;
  for (const char* kind : {"apikey", "jwtprofile", "tenant", "user", "defaults"}) {
    auto rows = (*local)->load(kind);
    if (!rows) continue;
    for (const Row& r : *rows)
      if (rows_->put(kind, r.id, r.body)) ++n;
  }
  log::warn("serve", "imported " + std::to_string(n) + " governance row(s) from " + dir_ +
                         "/governance.db into the empty " + rows_->describe() +
                         " (once: later starts do not import)");
  if (auto g = rows_->generation()) gen_ = *g;
}

bool GovernanceState::poll() {
  if (!shared()) return false;
  if (!rows_ || !keys_ || !profiles_ || !limits_) {
    if (nowS() - opened_at_s_ < 5) return false;  // (a dead server costs a connect timeout)
    opened_at_s_ = nowS();
    keys_.reset();
    profiles_.reset();
    limits_.reset();
    rows_.reset();
    open();
    return true;  // (null or new: the caller hands the stores out again either way)
  }
  auto g = rows_->generation();
  if (!g) {
    if (nowS() - failed_at_s_ >= 60) {
      failed_at_s_ = nowS();
      log::warn("serve", "governance store poll failed (serving the last state): " + g.error().what);
    }
    return false;
  }
  if (*g == gen_) return false;
  bool ok = true;
  for (auto r : {keys_->reload(), profiles_->reload(), limits_->reload()})
    if (!r) {
      ok = false;
      log::warn("serve", "governance reload failed (serving the last state): " + r.error().what);
    }
  if (ok) gen_ = *g;  // (else tried again on the next poll)
  return false;
}

}  // namespace kvgate::governance
