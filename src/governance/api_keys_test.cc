// API keys: the raw key format, every verdict of the check, where a request's key is read from,
// the hash against a FIPS 180-2 SHA-256 vector, and the SQLite store across reopen (the
// expected values come from the format in api_keys.h and the published vector, not the code).
#include "governance/api_keys.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <regex>

#include "governance/key_store.h"
#include "governance/row_store.h"

namespace kvgate::governance {
namespace {

std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) s += d[c >> 4], s += d[c & 15];
  return s;
}

TEST(ApiKeys, HashIsSha256OfSaltThenSecret) {
  // FIPS 180-2 appendix B.1: SHA-256("abc").
  EXPECT_EQ(hex(hashSecret("a", "bc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeys, MintedKeysHaveTheFormatAndVerify) {
  ApiKey k;
  const std::string raw = mintKey(k);
  EXPECT_TRUE(std::regex_match(raw, std::regex("kvg-[0-9a-f]{16}-[A-Za-z0-9_-]{43}"))) << raw;
  EXPECT_EQ(raw.substr(4, 16), k.key_id);
  EXPECT_EQ(k.salt.size(), 16u);
  EXPECT_EQ(k.hash, hashSecret(k.salt, raw.substr(21)));
  ApiKey other;
  EXPECT_NE(mintKey(other), raw);
  EXPECT_NE(other.salt, k.salt);
}

TEST(ApiKeys, EveryVerdict) {
  KeyTable t;
  ApiKey k;
  const std::string raw = mintKey(k);
  k.expires_at = 2000;
  t.by_id[k.key_id] = std::make_shared<const ApiKey>(k);
  EXPECT_EQ(checkKey(t, "", 1000).verdict, KeyVerdict::kMissing);
  EXPECT_EQ(checkKey(t, "sk-123", 1000).verdict, KeyVerdict::kMalformed);
  EXPECT_EQ(checkKey(t, raw + "x", 1000).verdict, KeyVerdict::kMalformed);
  EXPECT_EQ(checkKey(t, "kvg-XXXXXXXXXXXXXXXX" + raw.substr(20), 1000).verdict,
            KeyVerdict::kMalformed);
  std::string unknown = raw;
  unknown[4] = unknown[4] == '0' ? '1' : '0';
  EXPECT_EQ(checkKey(t, unknown, 1000).verdict, KeyVerdict::kUnknown);
  std::string bad = raw;
  bad.back() = bad.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(checkKey(t, bad, 1000).verdict, KeyVerdict::kBadSecret);
  auto ok = checkKey(t, raw, 1999);
  EXPECT_EQ(ok.verdict, KeyVerdict::kOk);
  ASSERT_NE(ok.key, nullptr);
  EXPECT_EQ(checkKey(t, raw, 2000).verdict, KeyVerdict::kExpired);  // at expires_at: expired
  ApiKey off = k;
  off.enabled = false;
  t.by_id[k.key_id] = std::make_shared<const ApiKey>(off);
  EXPECT_EQ(checkKey(t, raw, 1000).verdict, KeyVerdict::kDisabled);
  EXPECT_STREQ(verdictName(KeyVerdict::kBadSecret), "bad_secret");
  // The verdicts index kCheckOutcomes in order (the metric's labels).
  EXPECT_STREQ(kCheckOutcomes[static_cast<size_t>(KeyVerdict::kExpired)], "expired");
}

TEST(ApiKeys, RequestKeyPrefersXApiKeyThenBearer) {
  EXPECT_EQ(requestKey("k1", "Bearer k2"), "k1");
  EXPECT_EQ(requestKey("", "Bearer k2"), "k2");
  EXPECT_EQ(requestKey("", "bearer   k2"), "k2");
  EXPECT_EQ(requestKey("", "BEARER k2"), "k2");
  EXPECT_EQ(requestKey("", "Basic dXNlcjpwdw=="), "");
  EXPECT_EQ(requestKey("", "Bearer"), "");
  EXPECT_EQ(requestKey("", ""), "");
}

TEST(ApiKeys, AllowedModels) {
  ApiKey k;
  EXPECT_TRUE(k.allows("anything"));
  EXPECT_TRUE(k.allows(""));
  k.allowed_models = {"a", "b"};
  EXPECT_TRUE(k.allows("b"));
  EXPECT_FALSE(k.allows("c"));
  EXPECT_FALSE(k.allows(""));
}

TEST(KeyStore, PersistsAcrossReopenAndPublishes) {
  const std::string dir = ::testing::TempDir() + "/kvgate-keystore-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  KeyRegistry reg;
  EXPECT_FALSE(reg.current()->loaded);
  std::string raw;
  ApiKey k;
  {
    auto rows = openSqliteRows(dir);
    ASSERT_TRUE(rows) << rows.error().what;
    auto st = KeyStore::open(**rows, reg);
    ASSERT_TRUE(st) << st.error().what;
    EXPECT_TRUE(reg.current()->loaded);
    k.tenant_id = "acme";
    k.name = "n";
    k.allowed_models = {"m1", "m2"};
    k.rate_limit_rps = 2.5;
    k.burst_size = 7;
    k.tokens_per_min = 1000;
    k.expires_at = 1893456000;
    k.created_at = 1700000000;
    raw = mintKey(k);
    ASSERT_TRUE((*st)->insert(k));
    EXPECT_EQ(checkKey(*reg.current(), raw, 1700000001).verdict, KeyVerdict::kOk);
    ApiKey missing = k;
    missing.key_id = "0000000000000000";
    EXPECT_EQ((*st)->update(missing).error().code, 404);
    EXPECT_EQ((*st)->remove("0000000000000000").error().code, 404);
  }
  {
    KeyRegistry reg2;
    auto rows = openSqliteRows(dir);
    ASSERT_TRUE(rows) << rows.error().what;
    auto st = KeyStore::open(**rows, reg2);
    ASSERT_TRUE(st);
    const ApiKey* got = (*st)->find(k.key_id);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->tenant_id, "acme");
    EXPECT_EQ(got->allowed_models, (std::vector<std::string>{"m1", "m2"}));
    EXPECT_DOUBLE_EQ(got->rate_limit_rps, 2.5);
    EXPECT_EQ(got->burst_size, 7);
    EXPECT_EQ(got->tokens_per_min, 1000);
    EXPECT_EQ(got->expires_at, 1893456000);
    EXPECT_EQ(got->salt, k.salt);
    EXPECT_EQ(checkKey(*reg2.current(), raw, 1700000001).verdict, KeyVerdict::kOk);
    EXPECT_EQ((*st)->list("acme").size(), 1u);
    EXPECT_EQ((*st)->list("other").size(), 0u);
    ApiKey off = *got;
    off.enabled = false;
    ASSERT_TRUE((*st)->update(off));
    EXPECT_EQ(checkKey(*reg2.current(), raw, 1700000001).verdict, KeyVerdict::kDisabled);
    ASSERT_TRUE((*st)->remove(k.key_id));
    EXPECT_EQ(checkKey(*reg2.current(), raw, 1700000001).verdict, KeyVerdict::kUnknown);
  }
  {
    KeyRegistry reg3;
    auto rows = openSqliteRows(dir);
    ASSERT_TRUE(rows) << rows.error().what;
    auto st = KeyStore::open(**rows, reg3);
    ASSERT_TRUE(st);
    EXPECT_EQ((*st)->size(), 0u);
  }
  // A damaged allowed_models column fails closed: the key may use no model.
  {
    KeyRegistry reg5;
    auto rows = openSqliteRows(dir);
    ASSERT_TRUE(rows) << rows.error().what;
    auto st = KeyStore::open(**rows, reg5);
    ASSERT_TRUE(st);
    ApiKey d;
    d.tenant_id = "t";
    d.allowed_models = {"m1"};
    mintKey(d);
    ASSERT_TRUE((*st)->insert(d));
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/governance.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "UPDATE governance_rows SET body=replace(body,"
                           " '\"allowed_models\":[\"m1\"]', '\"allowed_models\":\"{oops\"')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_changes(db), 1);
    sqlite3_close(db);
    KeyRegistry reg6;
    auto rows = openSqliteRows(dir);
    ASSERT_TRUE(rows) << rows.error().what;
    auto st = KeyStore::open(**rows, reg6);
    ASSERT_TRUE(st);
    ASSERT_EQ((*st)->size(), 1u);
    const ApiKey& d = *reg6.current()->by_id.begin()->second;
    EXPECT_FALSE(d.allows("m1"));
    EXPECT_FALSE(d.allows(""));
  }
  // An unusable directory: a clear error, no store.
  EXPECT_FALSE(openSqliteRows("/proc/kvgate-no-such-dir"));
  std::filesystem::remove_all(dir);
}

// A governance.db of the previous version (typed api_keys table, jwt_profiles, limits) is moved
// into governance_rows once, and every key still checks.
TEST(KeyStore, MovesTheEarlierTables) {
  const std::string dir = ::testing::TempDir() + "/kvgate-keymigrate-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ApiKey k;
  k.tenant_id = "acme";
  const std::string raw = mintKey(k);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/governance.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE api_keys (key_id TEXT PRIMARY KEY, tenant_id TEXT, name TEXT,"
                           " allowed_models TEXT, rate_limit_rps REAL, burst_size INTEGER,"
                           " tokens_per_min INTEGER, expires_at INTEGER, enabled INTEGER,"
                           " created_at INTEGER, salt BLOB, hash BLOB);"
                           "CREATE TABLE limits (kind TEXT, id TEXT, body TEXT);"
                           "INSERT INTO limits VALUES ('tenant','acme','{\"tenant_id\":\"acme\",\"rps\":5}')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "INSERT INTO api_keys VALUES (?1,'acme','old','[\"m1\"]',2,3,100,0,1,"
                                 "1700000000,?2,?3)",
                                 -1, &q, nullptr),
              SQLITE_OK);
    sqlite3_bind_text(q, 1, k.key_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(q, 2, k.salt.data(), int(k.salt.size()), SQLITE_TRANSIENT);
    sqlite3_bind_blob(q, 3, k.hash.data(), int(k.hash.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
  }
  for (int round = 0; round < 2; ++round) {  // (the second open finds nothing left to move)
    auto rows = openSqliteRows(dir);
    ASSERT_TRUE(rows) << rows.error().what;
    KeyRegistry reg;
    auto st = KeyStore::open(**rows, reg);
    ASSERT_TRUE(st);
    EXPECT_EQ(checkKey(*reg.current(), raw, 1700000001).verdict, KeyVerdict::kOk) << round;
    const ApiKey* got = (*st)->find(k.key_id);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->name, "old");
    EXPECT_EQ(got->allowed_models, std::vector<std::string>{"m1"});
    EXPECT_EQ(got->burst_size, 3);
    EXPECT_EQ(got->tokens_per_min, 100);
    auto tenants = (*rows)->load("tenant");
    ASSERT_TRUE(tenants);
    ASSERT_EQ(tenants->size(), 1u);
    EXPECT_EQ((*tenants)[0].id, "acme");
    // An update touches only an existing row.
    auto up = (*rows)->update("tenant", "nobody", "{}");
    ASSERT_TRUE(up);
    EXPECT_FALSE(*up);
  }
  {  // The old tables are kept, renamed.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + "/governance.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM api_keys_v1", -1, &q, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(q, 0), 1);
    sqlite3_finalize(q);
    sqlite3_close(db);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvgate::governance
