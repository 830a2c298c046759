// The PostgreSQL RowStore (row_store.h) over libpq: one connection, used from the control thread.
// Each change and the generation bump are one statement (data-modifying CTE), hence atomic. The
// schema is created under an advisory lock, so replicas starting together do not race. A broken
// connection is re-established on the next call (PQreset); connect_timeout bounds a dead server.
#include <libpq-fe.h>

#include <cstdlib>
#include <set>
#include <vector>

#include "common/log.h"
#include "common/net.h"
#include "governance/row_store.h"

namespace kvgate::governance {

namespace {

// A result, cleared on every path.
struct PgResult {
  PGresult* r = nullptr;
  explicit PgResult(PGresult* x) : r(x) {}
  ~PgResult() { PQclear(r); }
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;
  bool ok() const {
    const auto s = PQresultStatus(r);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
  }
  std::string val(int row, int col) const {
    return std::string(PQgetvalue(r, row, col), size_t(PQgetlength(r, row, col)));
  }
};

class PgRows final : public RowStore {
 public:
  PgRows(PGconn* c, std::string where) : c_(c), where_(std::move(where)) {}
  ~PgRows() override { PQfinish(c_); }

  Result<void> init() {
    for (const char* sql :
         {"SELECT pg_advisory_lock(7355608)",
          "CREATE TABLE IF NOT EXISTS kvgate_governance (kind TEXT NOT NULL, id TEXT NOT NULL,"
          " body TEXT NOT NULL, PRIMARY KEY (kind, id))",
          "CREATE TABLE IF NOT EXISTS kvgate_governance_gen (one INT PRIMARY KEY CHECK (one = 1),"
          " gen BIGINT NOT NULL)",
          "INSERT INTO kvgate_governance_gen VALUES (1, 0) ON CONFLICT DO NOTHING",
          "SELECT pg_advisory_unlock(7355608)"}) {
      PgResult r(PQexec(c_, sql));
      if (!r.ok()) return error("schema", r);
    }
    return {};
  }

  Result<std::vector<Row>> load(std::string_view kind) override {
    if (auto c = ready(); !c) return tl::unexpected(c.error());
    const std::string k(kind);
    PgResult r(exec("SELECT id, body FROM kvgate_governance WHERE kind = $1 ORDER BY id", {&k}));
    if (!r.ok()) return error("load " + k, r);
    std::vector<Row> out;
    for (int i = 0; i < PQntuples(r.r); ++i) out.push_back({r.val(i, 0), r.val(i, 1)});
    return out;
  }

  Result<void> put(std::string_view kind, const std::string& id, const std::string& body) override {
    if (auto c = ready(); !c) return tl::unexpected(c.error());
    const std::string k(kind);
    PgResult r(exec(
        "WITH w AS (INSERT INTO kvgate_governance (kind, id, body) VALUES ($1, $2, $3)"
        " ON CONFLICT (kind, id) DO UPDATE SET body = EXCLUDED.body RETURNING 1)"
        " UPDATE kvgate_governance_gen SET gen = gen + 1 WHERE one = 1 AND EXISTS (SELECT 1 FROM w)",
        {&k, &id, &body}));
    if (!r.ok()) return error("store " + k, r);
    return {};
  }

  Result<bool> update(std::string_view kind, const std::string& id,
                      const std::string& body) override {
    if (auto c = ready(); !c) return tl::unexpected(c.error());
    const std::string k(kind);
    PgResult r(exec(
        "WITH u AS (UPDATE kvgate_governance SET body = $3 WHERE kind = $1 AND id = $2"
        " RETURNING 1)"
        " UPDATE kvgate_governance_gen SET gen = gen + 1 WHERE one = 1 AND EXISTS (SELECT 1 FROM u)"
        " RETURNING gen",
        {&k, &id, &body}));
    if (!r.ok()) return error("update " + k, r);
    return PQntuples(r.r) > 0;
  }

  Result<bool> erase(std::string_view kind, const std::string& id) override {
    if (auto c = ready(); !c) return tl::unexpected(c.error());
    const std::string k(kind);
    PgResult r(exec(
        "WITH d AS (DELETE FROM kvgate_governance WHERE kind = $1 AND id = $2 RETURNING 1)"
        " UPDATE kvgate_governance_gen SET gen = gen + 1 WHERE one = 1 AND EXISTS (SELECT 1 FROM d)"
        " RETURNING gen",
        {&k, &id}));
    if (!r.ok()) return error("delete " + k, r);
    return PQntuples(r.r) > 0;
  }

  Result<int64_t> generation() override {
    if (auto c = ready(); !c) return tl::unexpected(c.error());
    PgResult r(PQexec(c_, "SELECT gen FROM kvgate_governance_gen WHERE one = 1"));
    if (!r.ok() || PQntuples(r.r) != 1) return error("generation", r);
    return std::stoll(r.val(0, 0));
  }

  bool shared() const override { return true; }
  std::string describe() const override { return "PostgreSQL " + where_; }

 private:
  // One statement with text parameters ($1, $2, ...: NUL-terminated, as libpq reads text ones).
  PGresult* exec(const char* sql, std::initializer_list<const std::string*> args) {
    std::vector<const char*> v;
    for (const std::string* a : args) v.push_back(a->c_str());
    return PQexecParams(c_, sql, int(v.size()), nullptr, v.data(), nullptr, nullptr, 0);
  }
  Result<void> ready() {
    if (PQstatus(c_) == CONNECTION_OK) return {};
    PQreset(c_);
    if (PQstatus(c_) == CONNECTION_OK) {
      log::info("governance", "PostgreSQL connection re-established");
      return {};
    }
    return fail(503, "policy_store", std::string("PostgreSQL unreachable: ") + PQerrorMessage(c_),
                true);
  }
  tl::unexpected<Error> error(const std::string& what, const PgResult& r) {
    std::string msg = PQresultErrorMessage(r.r);
    if (msg.empty()) msg = PQerrorMessage(c_);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    return fail(503, "policy_store", "PostgreSQL " + what + ": " + msg, true);
  }
  PGconn* c_;
  std::string where_;
};

}  // namespace

namespace {

// A libpq host list entry that never leaves this machine: a Unix socket directory, "localhost",
// or a literal loopback address (a name such as 127.db.example is not one).
bool localHost(std::string_view h) {
  return h.empty() || h.front() == '/' || h.front() == '@' || h == "localhost" ||
         net::isLoopbackLiteral(h);
}

// Every entry of a comma-separated host (or hostaddr) list is local.
bool allLocal(const std::string& list) {
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    if (!localHost(std::string_view(list).substr(
            start, (comma == std::string::npos ? list.size() : comma) - start)))
      return false;
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

}  // namespace

Result<std::string> postgresConninfo(const std::string& conninfo) {
  // Bounds on every wait, unless the operator set them: connecting 3 s; a statement 5 s (server
  // side); a silent peer (a partition: no RST) 5 s of unacknowledged data or 9 s of keepalives,
  // so the control thread is never stuck for TCP's own ~15 minutes.
  std::string ci = conninfo;
  const bool uri = ci.starts_with("postgres://") || ci.starts_with("postgresql://");
  const std::pair<const char*, const char*> defaults[] = {
      {"connect_timeout", "3"},      {"keepalives", "1"},        {"keepalives_idle", "5"},
      {"keepalives_interval", "2"},  {"keepalives_count", "2"},  {"tcp_user_timeout", "5000"},
      {"options", uri ? "-c%20statement_timeout%3D5000" : "'-c statement_timeout=5000'"}};
  // (the operator's own settings are found by libpq's parser, not by a substring search)
  std::set<std::string> given;
  std::string host, hostaddr;
  char* perr = nullptr;
  if (PQconninfoOption* o = PQconninfoParse(conninfo.c_str(), &perr)) {
    for (PQconninfoOption* it = o; it->keyword; ++it) {
      if (!it->val || !*it->val) continue;
      given.insert(it->keyword);
      if (std::string_view(it->keyword) == "host") host = it->val;
      if (std::string_view(it->keyword) == "hostaddr") hostaddr = it->val;
    }
    PQconninfoFree(o);
  } else {
    std::string msg = perr ? perr : "unreadable";
    PQfreemem(perr);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    return fail(400, "state_db", "--state-db: " + msg);
  }
  auto add = [&](std::string_view k, std::string_view v) {
    if (uri) ci += (ci.find('?') == std::string::npos ? "?" : "&");
    else ci += " ";
    ci.append(k).append("=").append(v);
  };
  for (auto [k, v] : defaults)
    if (!given.count(k)) add(k, v);
  // (PGHOST, PGHOSTADDR and PGSSLMODE from the environment count as the operator's settings; a
  // service (service=, PGSERVICE) may set its own sslmode in its file, which ours would override:
  // left to it)
  const char* env_host = std::getenv("PGHOST");
  const char* env_hostaddr = std::getenv("PGHOSTADDR");
  if (host.empty() && env_host) host = env_host;
  if (hostaddr.empty() && env_hostaddr) hostaddr = env_hostaddr;
  // (a host given outside the service is ours to judge)
  const bool service = (given.count("service") || std::getenv("PGSERVICE")) && host.empty() &&
                       hostaddr.empty();
  if (!given.count("sslmode") && !std::getenv("PGSSLMODE") && !service &&
      !(allLocal(host) && allLocal(hostaddr)))
    add("sslmode", "verify-full");
  return ci;
}

Result<std::unique_ptr<RowStore>> openPostgresRows(const std::string& conninfo) {
  auto cis = postgresConninfo(conninfo);
  if (!cis) return tl::unexpected(cis.error());
  const std::string& ci = *cis;
  PGconn* c = PQconnectdb(ci.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(c);
    PQfinish(c);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    return fail(503, "policy_store", "PostgreSQL: " + msg, true);
  }
  // For logs: host, port and database, never the password.
  std::string where = std::string(PQhost(c) ? PQhost(c) : "?") + ":" +
                      (PQport(c) ? PQport(c) : "?") + "/" + (PQdb(c) ? PQdb(c) : "?");
  auto st = std::make_unique<PgRows>(c, where);
  if (auto r = st->init(); !r) return tl::unexpected(r.error());
  return st;
}

}  // namespace kvgate::governance
