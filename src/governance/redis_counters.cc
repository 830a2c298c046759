#include "governance/redis_counters.h"

#include <hiredis/hiredis.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/log.h"
#include "common/secret_file.h"

namespace kvgate::governance {

namespace {

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// KEYS: bucket keys. ARGV[1]: the reservation; then per bucket: rate/s, capacity, 1 if TPM.
// Returns {0} admitted, or {i, wait_seconds} refused by bucket i (1-based).
constexpr const char* kAdmitLua = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tokens = tonumber(ARGV[1])
local after = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[3 * i - 1])
  local cap = tonumber(ARGV[3 * i])
  local cost = 1
  if ARGV[3 * i + 1] == '1' then cost = math.min(tokens, cap) end
  local v = redis.call('HMGET', key, 'l', 't')
  local level = cap
  if v[1] then
    level = math.min(cap, tonumber(v[1]) + math.max(0, now - tonumber(v[2])) * rate)
  end
  local need = math.min(cost, cap)
  if level < need - 1e-9 then
    return {i, tostring((need - level) / rate)}
  end
  after[i] = level - cost
end
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[3 * i - 1])
  local cap = tonumber(ARGV[3 * i])
  redis.call('HSET', key, 'l', tostring(after[i]), 't', tostring(now))
  redis.call('EXPIRE', key, math.min(604800, math.ceil((cap - after[i]) / rate) + 60))
end
return {0}
)lua";

// KEYS: TPM bucket keys. ARGV[1]: tokens used; then per bucket: amount reserved, rate/s, capacity.
constexpr const char* kSettleLua = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local used = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local amount = tonumber(ARGV[3 * i - 1])
  local rate = tonumber(ARGV[3 * i])
  local cap = tonumber(ARGV[3 * i + 1])
  local v = redis.call('HMGET', key, 'l', 't')
  local level = cap
  if v[1] then
    level = math.min(cap, tonumber(v[1]) + math.max(0, now - tonumber(v[2])) * rate)
  end
  level = math.min(cap, level + amount - used)
  redis.call('HSET', key, 'l', tostring(level), 't', tostring(now))
  redis.call('EXPIRE', key, math.min(604800, math.ceil((cap - level) / rate) + 60))
end
return 0
)lua";

std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

struct Reply {
  redisReply* r;
  explicit Reply(void* x) : r(static_cast<redisReply*>(x)) {}
  ~Reply() {
    if (r) freeReplyObject(r);
  }
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;
};

std::atomic<RedisCounters*> g_counters{nullptr};

}  // namespace

RedisCounters* redisCounters() { return g_counters.load(std::memory_order_acquire); }
void setRedisCounters(RedisCounters* c) { g_counters.store(c, std::memory_order_release); }

RedisCounters::RedisCounters(std::string host, int port, Auth auth)
    : host_(std::move(host)), port_(port), auth_(std::move(auth)) {
  down_since_ns_ = steadyNs();  // unknown until the first connect: warming
}

RedisCounters::~RedisCounters() {
  if (redisCounters() == this) setRedisCounters(nullptr);
  stop();
}

Result<void> RedisCounters::start() {
  std::string refused;
  connect(&refused);  // (before serving: a healthy Redis means no warming at start)
  if (!refused.empty())
    return fail(2, "redis-auth-file",
                "Redis " + host_ + ":" + std::to_string(port_) + " refused: " + refused);
  thread_ = std::thread([this] { run(); });
  return {};
}

void RedisCounters::stop() {
  {
    std::lock_guard g(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Admissions still queued pass (the gateway is going away); the settlements still queued are
  // sent (for up to 2 s): a clean shutdown leaks no hold.
  std::deque<Job> adm, left;
  {
    std::lock_guard g(mu_);
    adm.swap(admissions_);
    left.swap(settlements_);
  }
  for (Job& j : adm) j.done(Verdict{State::kOpen, 0, LimitReason::kKeyRps, {}});
  if (!left.empty() && !c_) connect();  // (one try: Redis may have come back meanwhile)
  const int64_t until = steadyNs() + 2'000'000'000;
  while (!left.empty() && c_ && steadyNs() < until) {
    std::vector<Job> batch;
    while (!left.empty() && batch.size() < pipeline_) {
      batch.push_back(std::move(left.front()));
      left.pop_front();
    }
    serve(batch);  // (a failure disconnects: the rest are dropped below)
    dropped_.fetch_add(batch.size(), std::memory_order_relaxed);  // (serve leaves the unsent)
  }
  dropped_.fetch_add(left.size(), std::memory_order_relaxed);
  up_ = false;  // (stopped, not unreachable: nothing to warn about)
  disconnect();
}

RedisCounters::Verdict RedisCounters::downVerdict() {
  const int64_t since = down_since_ns_.load(std::memory_order_relaxed);
  Verdict v;
  // (since 0: a reconnect raced this caller's read of up(): warming, the safe side)
  if (since == 0 || steadyNs() - since < kWarmingNs) {
    v.state = State::kWarming;
    v.retry_after_s = 1;
    warming_.fetch_add(1, std::memory_order_relaxed);
  } else {
    v.state = State::kOpen;
    cold_open_.fetch_add(1, std::memory_order_relaxed);
  }
  return v;
}

RedisCounters::Verdict RedisCounters::shed() {
  shed_.fetch_add(1, std::memory_order_relaxed);
  Verdict v;
  v.state = State::kWarming;
  v.retry_after_s = 1;
  return v;
}

void RedisCounters::admit(std::vector<BucketSpec> specs, int64_t tokens, Done done) {
  if (!up()) {  // known down: answer at once (no queueing behind timeouts)
    done(downVerdict());
    return;
  }
  {
    std::lock_guard g(mu_);
    if (admissions_.size() < kMaxQueue && !stop_) {
      admissions_.push_back(
          Job{steadyNs(), std::move(specs), {}, tokens, std::move(done), next_seq_++});
      cv_.notify_one();
      return;
    }
  }
  done(shed());  // (overload: refused, never opened)
}

void RedisCounters::settle(std::vector<QuotaLedger::Held> held, int64_t used) {
  if (held.empty()) return;
  {
    std::lock_guard g(mu_);
    // (one that finds no room is dropped, counted: its hold costs at most one capacity; while
    // Redis is down they wait in the queue for the reconnect)
    if (settlements_.size() < kMaxQueue && !stop_) {
      settlements_.push_back(Job{steadyNs(), {}, std::move(held), used, nullptr, next_seq_++});
      cv_.notify_one();
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
}

void RedisCounters::disconnect() {
  if (c_) redisFree(c_);
  c_ = nullptr;
  if (up_.load()) {
    down_since_ns_ = steadyNs();  // (before up_ clears: a caller that sees down sees since when)
    up_ = false;
    log::warn("governance", "Redis " + host_ + ":" + std::to_string(port_) +
                                " unreachable: quotas answer token_quota_warming for 3 s, then "
                                "pass uncounted");
  }
}

bool RedisCounters::connect(std::string* refused) {
  last_connect_ns_ = steadyNs();
  timeval tv{0, 500000};
  c_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
  redisContext* c = c_;
  std::string why;
  if (!c || c->err) {
    why = c ? c->errstr : "out of memory";
  } else {
    redisSetTimeout(c, tv);
    if (!auth_.password.empty()) {
      Reply r(auth_.user.empty()
                  ? redisCommand(c, "AUTH %b", auth_.password.data(), auth_.password.size())
                  : redisCommand(c, "AUTH %b %b", auth_.user.data(), auth_.user.size(),
                                 auth_.password.data(), auth_.password.size()));
      if (r.r && r.r->type == REDIS_REPLY_ERROR) {
        // Never the reply itself in a log or error: an unknown-command error echoes the
        // arguments, the password included. Refused credentials are told apart from other
        // errors (max clients reached: an outage, not a configuration mistake).
        const std::string_view reply(r.r->str, r.r->len);
        const bool wrong = reply.starts_with("WRONGPASS") ||
                             reply.find("invalid password") != std::string_view::npos ||
                             reply.find("invalid username-password") != std::string_view::npos ||
                             reply.find("no password is set") != std::string_view::npos ||
                             reply.find("without any password configured") != std::string_view::npos;
        const std::string code(reply.substr(0, std::min(reply.find(' '), reply.size())));
        if (wrong) {
          const std::string what = code + " (the credentials in --redis-auth-file)";
          if (refused) *refused = what;
          auth_failures_.fetch_add(1, std::memory_order_relaxed);
          why = "AUTH refused: " + what;
        } else {
          why = "AUTH failed: " + code;
        }
      } else if (!r.r) {
        why = c->errstr;
      }
    }
  }
  if (why.empty()) why = loadScripts(refused);
  if (!why.empty()) {
    if (c_) redisFree(c_);
    c_ = nullptr;
    if (steadyNs() - connect_logged_ns_ >= 60'000'000'000) {  // (at most once a minute)
      connect_logged_ns_ = steadyNs();
      log::warn("governance", "Redis " + host_ + ":" + std::to_string(port_) + ": " + why);
    }
    return false;
  }
  last_used_ns_ = steadyNs();
  up_ = true;
  down_since_ns_ = 0;
  log::info("governance", "Redis " + host_ + ":" + std::to_string(port_) +
                              " connected (shared quota counters)");
  return true;
}

std::string RedisCounters::loadScripts(std::string* refused) {
  for (auto [lua, sha] : {std::pair{kAdmitLua, &admit_sha_}, std::pair{kSettleLua, &settle_sha_}}) {
    Reply r(redisCommand(c_, "SCRIPT LOAD %s", lua));
    if (!r.r || r.r->type != REDIS_REPLY_STRING) {
      std::string why = r.r && r.r->type == REDIS_REPLY_ERROR ? std::string(r.r->str) : c_->errstr;
      // An ACL user without SCRIPT LOAD: a configuration mistake (serve exits at start).
      if (r.r && r.r->type == REDIS_REPLY_ERROR && why.starts_with("NOPERM") && refused)
        *refused = "NOPERM on SCRIPT LOAD (the ACL user needs +script|load)";
      return why.empty() ? "SCRIPT LOAD failed" : why;
    }
    sha->assign(r.r->str, r.r->len);
  }
  return {};
}

void RedisCounters::pingIfIdle() {
  if (!c_ || steadyNs() - last_used_ns_ < kIdlePingNs) return;
  // A connection idle for long may have been closed by Redis's `timeout` or a middlebox: found
  // now, not by the next batch, whose settlements would be lost.
  Reply r(redisCommand(c_, "PING"));
  last_used_ns_ = steadyNs();
  if (!r.r || r.r->type == REDIS_REPLY_ERROR) disconnect();
}

void RedisCounters::maybeReconnect() {
  if (!c_ && steadyNs() - last_connect_ns_ >= 1'000'000'000) connect();
}

// One reply: kOk, kNoScript or kScript.
RedisCounters::Call RedisCounters::parseReply(void* reply, Verdict* v, const Job* j) {
  Reply r(reply);
  if (r.r->type == REDIS_REPLY_ERROR) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    const std::string msg(r.r->str, r.r->len);
    if (steadyNs() - script_logged_ns_ >= 10'000'000'000) {  // (at most every 10 s)
      script_logged_ns_ = steadyNs();
      log::warn("governance", "Redis quota script error: " + msg);
    }
    return msg.starts_with("NOSCRIPT") ? Call::kNoScript : Call::kScript;
  }
  if (!v) return Call::kOk;
  if (r.r->type != REDIS_REPLY_ARRAY || r.r->elements < 1 ||
      r.r->element[0]->type != REDIS_REPLY_INTEGER) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return Call::kScript;
  }
  const long long i = r.r->element[0]->integer;
  if (i == 0) {
    for (const auto& s : j->specs)
      if (isTpm(s.reason))
        v->held.push_back({s.key,
                           std::min(std::clamp(double(j->tokens), 0.0, QuotaLedger::kMaxTokens),
                                    s.capacity),
                           s.rate_per_s, s.capacity, s.reason});
    return Call::kOk;
  }
  if (i < 1 || size_t(i) > j->specs.size() || r.r->elements < 2 ||
      r.r->element[1]->type != REDIS_REPLY_STRING) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return Call::kScript;
  }
  v->state = State::kRefused;
  v->reason = j->specs[size_t(i - 1)].reason;
  const double wait = std::min(std::strtod(r.r->element[1]->str, nullptr), 86400.0);
  v->retry_after_s = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::isfinite(wait) ? wait : 86400.0)));
  return Call::kOk;
}

void RedisCounters::pipeline(const std::vector<Job*>& jobs, std::vector<Call>& calls,
                             std::vector<Verdict>& verdicts) {
  calls.assign(jobs.size(), Call::kBroken);
  verdicts.assign(jobs.size(), Verdict{});
  if (!c_ || jobs.empty()) return;
  std::vector<std::string> args;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const Job* j : jobs) {
    args.clear();
    const bool adm = j->done != nullptr;
    args.push_back("EVALSHA");
    args.push_back(adm ? admit_sha_ : settle_sha_);
    args.push_back(std::to_string(adm ? j->specs.size() : j->held.size()));
    if (adm)
      for (const auto& sp : j->specs) args.push_back("kvgate:q:" + sp.key);
    else
      for (const auto& h : j->held) args.push_back("kvgate:q:" + h.key);
    args.push_back(
        std::to_string(std::clamp<int64_t>(j->tokens, 0, int64_t(QuotaLedger::kMaxTokens))));
    if (adm) {
      for (const auto& sp : j->specs) {
        args.push_back(num(sp.rate_per_s));
        args.push_back(num(sp.capacity));
        args.push_back(isTpm(sp.reason) ? "1" : "0");
      }
    } else {
      for (const auto& h : j->held) {
        args.push_back(num(h.amount));
        args.push_back(num(h.rate_per_s));
        args.push_back(num(h.capacity));
      }
    }
    argv.clear();
    lens.clear();
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    // (only appends to the output buffer: fails on out of memory alone, before anything was
    // sent, so nothing ran)
    if (redisAppendCommandArgv(c_, int(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      calls.assign(jobs.size(), Call::kLost);
      disconnect();
      return;
    }
    (adm ? admit_calls_ : settle_calls_).fetch_add(1, std::memory_order_relaxed);
  }
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  last_used_ns_ = steadyNs();
  bool reload = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(c_, &reply) != REDIS_OK || !reply) {
      // The connection broke (or timed out) here: this job and every later one have no answer.
      // Gone (EOF, reset): they may be sent again on a new connection; a timeout: they may have
      // run, so they are not.
      const bool lost = c_->err == REDIS_ERR_EOF ||
                        (c_->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
      errors_.fetch_add(jobs.size() - i, std::memory_order_relaxed);
      for (size_t k = i; k < jobs.size(); ++k) calls[k] = lost ? Call::kLost : Call::kBroken;
      disconnect();
      return;
    }
    calls[i] = parseReply(reply, jobs[i]->done ? &verdicts[i] : nullptr, jobs[i]);
    reload |= calls[i] == Call::kNoScript;
  }
  // NOSCRIPT: loaded again on this connection (it stays up); failing that, dropped.
  if (reload && !loadScripts().empty()) disconnect();
}

// One batch (settlements first, in queue order). Settlements left unsent (no connection) stay in
// `batch`; everything else is answered or counted.
void RedisCounters::serve(std::vector<Job>& batch) {
  std::vector<Job*> live;
  const int64_t now = steadyNs();
  for (Job& j : batch) {
    if (j.done && now - j.queued_ns > kMaxWaitNs)
      j.done(shed());  // (waited too long: the client is better told to retry)
    else if (j.done && !c_)
      j.done(downVerdict());
    else
      live.push_back(&j);
  }
  if (!c_) {  // no connection: the settlements (all that is left) wait for the reconnect
    std::vector<Job> unsent;
    for (Job* j : live) unsent.push_back(std::move(*j));
    batch = std::move(unsent);
    return;
  }
  std::vector<Call> calls;
  std::vector<Verdict> verdicts;
  pipeline(live, calls, verdicts);
  // Sent once more: what never ran (NOSCRIPT, any kind), and admissions whose connection was
  // gone, on this connection or a new one (a Redis restart must not turn into warming; had a lost
  // one run, its hold is never settled and costs at most one bucket capacity). A settlement whose
  // connection was lost mid-batch is not: it may have run, and twice would refund twice.
  std::vector<Job*> again;
  std::vector<size_t> where;
  for (size_t i = 0; i < live.size(); ++i)
    if (calls[i] == Call::kNoScript || (calls[i] == Call::kLost && live[i]->done)) {
      again.push_back(live[i]);
      where.push_back(i);
    }
  if (!again.empty() && (c_ || connect())) {
    std::vector<Call> calls2;
    std::vector<Verdict> verdicts2;
    pipeline(again, calls2, verdicts2);
    for (size_t k = 0; k < again.size(); ++k) {
      calls[where[k]] = calls2[k] == Call::kNoScript ? Call::kScript : calls2[k];
      verdicts[where[k]] = std::move(verdicts2[k]);
    }
  }
  std::vector<Job> unsent;
  for (size_t i = 0; i < live.size(); ++i) {
    Job& j = *live[i];
    if (!j.done) {  // a settlement: applied, parked (it never ran), or dropped (counted)
      if (calls[i] == Call::kNoScript && !c_)
        unsent.push_back(std::move(j));
      else if (calls[i] != Call::kOk)
        dropped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    Verdict v = std::move(verdicts[i]);
    switch (calls[i]) {
      case Call::kOk:
        script_failing_since_ns_ = 0;
        break;
      case Call::kNoScript:  // (not sent again: no connection)
      case Call::kLost:
      case Call::kBroken:
        v = downVerdict();  // the connection failed (and was dropped): warming, then open
        break;
      case Call::kScript: {
        // A script error on a live connection: open for the first script_open_ns_ of the run
        // (counted as an error and a cold open), then closed until an admission works again.
        const int64_t t = steadyNs();
        if (script_failing_since_ns_ == 0) script_failing_since_ns_ = t;
        if (t - script_failing_since_ns_ < script_open_ns_) {
          v = Verdict{State::kOpen, 0, LimitReason::kKeyRps, {}};
          cold_open_.fetch_add(1, std::memory_order_relaxed);
        } else {
          v = Verdict{State::kClosed, 1, LimitReason::kKeyRps, {}};
          script_closed_.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      }
    }
    j.done(std::move(v));
  }
  batch = std::move(unsent);
}

void RedisCounters::run() {
  std::vector<Job> batch;
  for (;;) {
    batch.clear();
    {
      std::unique_lock lk(mu_);
      // Wake at least once a second: to reconnect when down, to check an idle connection.
      cv_.wait_for(lk, std::chrono::seconds(1),
                   [&] { return stop_ || !admissions_.empty() || !settlements_.empty(); });
      if (stop_) return;
      // In the order they were posted across both queues: a settlement posted before an
      // admission reaches Redis before it.
      while (batch.size() < pipeline_ && (!settlements_.empty() || !admissions_.empty())) {
        std::deque<Job>& q = admissions_.empty() ? settlements_
                             : settlements_.empty() || admissions_.front().seq < settlements_.front().seq
                                 ? admissions_
                                 : settlements_;
        batch.push_back(std::move(q.front()));
        q.pop_front();
      }
    }
    maybeReconnect();
    if (!c_) {  // down: every waiting admission is answered now, whatever settlements wait
      std::deque<Job> adm;
      {
        std::lock_guard g(mu_);
        adm.swap(admissions_);
      }
      for (Job& j : adm) j.done(downVerdict());
    }
    if (batch.empty()) {
      pingIfIdle();
      continue;
    }
    serve(batch);
    if (batch.empty()) continue;
    // No connection: the settlements wait (in front, in order) for the next reconnect, a second
    // away; the queue's bound still holds (new ones past it are dropped, counted).
    std::unique_lock lk(mu_);
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) settlements_.push_front(std::move(*it));
    cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_; });
  }
}

std::string RedisCounters::renderMetrics() const {
  auto line = [](const char* name, const char* type, const char* help, uint64_t v) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
  };
  auto kind = [](const char* k, uint64_t v) {
    return std::string("kvgate_quota_redis_calls_total{kind=\"") + k + "\"} " +
           std::to_string(v) + "\n";
  };
  return line("loxilb_ai_token_quota_cold_open_total", "counter",
              "Requests passed uncounted because the shared quota store (Redis) was unreachable "
              "for more than 3 s, or its script failed.",
              cold_open_.load()) +
         line("kvgate_quota_warming_total", "counter",
              "Requests answered 429 token_quota_warming (Redis unreachable for less than 3 s).",
              warming_.load()) +
         line("kvgate_quota_redis_shed_total", "counter",
              "Requests answered 429 token_quota_warming because the Redis queue was full or "
              "they waited in it over 1 s.",
              shed_.load()) +
         line("kvgate_quota_redis_script_closed_total", "counter",
              "Requests refused (503 quota_store_error) because the shared quota store's script "
              "had failed for more than 10 s in a row (fail closed).",
              script_closed_.load()) +
         line("kvgate_quota_redis_up", "gauge", "1 while the shared quota store is connected.",
              up() ? 1 : 0) +
         line("kvgate_quota_redis_errors_total", "counter", "Failed Redis quota calls.",
              errors_.load()) +
         line("kvgate_quota_redis_auth_failures_total", "counter",
              "Connects whose AUTH Redis refused (serve --redis-auth-file).",
              auth_failures_.load()) +
         line("kvgate_quota_redis_round_trips_total", "counter",
              "Pipelined batches sent to the shared quota store (Redis).", round_trips_.load()) +
         "# HELP kvgate_quota_redis_calls_total Script calls sent to the shared quota store, by "
         "kind (admission, settlement); divided by the round trips: the mean batch.\n# TYPE "
         "kvgate_quota_redis_calls_total counter\n" +
         kind("admission", admit_calls_.load()) + kind("settlement", settle_calls_.load()) +
         line("kvgate_quota_redis_dropped_total", "counter",
              "Settlements not applied: their queue was full, or the connection broke before "
              "their reply (the hold costs at most one bucket capacity).",
              dropped_.load());
}

Result<RedisCounters::Auth> loadRedisAuth(const std::string& path) {
  auto lines = readSecretLines(path, "--redis-auth-file", 4096);
  if (!lines) return tl::unexpected(lines.error());
  RedisCounters::Auth auth;
  for (size_t i = 0; i < lines->size(); ++i) {
    const std::string& line = (*lines)[i];
    const size_t eq = line.find('=');
    const std::string key = line.substr(0, eq);
    std::string* into = key == "user" ? &auth.user : key == "password" ? &auth.password : nullptr;
    std::string value = eq == std::string::npos ? "" : line.substr(eq + 1);
    value.erase(0, std::min(value.size(), value.find_first_not_of(" \t")));
    if (!into || value.empty() || !into->empty())
      return fail(2, "redis-auth-file",
                  "--redis-auth-file entry " + std::to_string(i + 1) +
                      " (comments and blank lines not counted): expected one user=NAME and one "
                      "password=SECRET, each non-empty");
    *into = std::move(value);
  }
  if (auth.password.empty()) return fail(2, "redis-auth-file", "--redis-auth-file: no password=SECRET line");
  return auth;
}

}  // namespace kvgate::governance
