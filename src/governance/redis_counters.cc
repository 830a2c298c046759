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
  // (before serving: a healthy Redis means no warming at start)
  std::string refused;
  connect(admit_lane_, &refused);
  if (refused.empty()) connect(settle_lane_, &refused);
  if (!refused.empty()) {
    disconnect(admit_lane_);
    return fail(2, "redis-auth-file",
                "Redis " + host_ + ":" + std::to_string(port_) + " refused: " + refused);
  }
  admit_lane_.thread = std::thread([this] { run(admit_lane_); });
  settle_lane_.thread = std::thread([this] { run(settle_lane_); });
  return {};
}

void RedisCounters::stop() {
  for (Lane* l : {&admit_lane_, &settle_lane_}) {
    {
      std::lock_guard g(l->mu);
      l->stop = true;
    }
    l->cv.notify_all();
    if (l->thread.joinable()) l->thread.join();
  }
  // Admissions still queued pass (the gateway is going away); the settlements still queued are
  // sent (for up to 2 s): a clean shutdown leaks no hold.
  std::deque<Job> left;
  {
    std::lock_guard g(admit_lane_.mu);
    left.swap(admit_lane_.queue);
  }
  for (Job& j : left) j.done(Verdict{State::kOpen, 0, LimitReason::kKeyRps, {}});
  left.clear();
  {
    std::lock_guard g(settle_lane_.mu);
    left.swap(settle_lane_.queue);
  }
  const int64_t until = steadyNs() + 2'000'000'000;
  while (!left.empty() && settle_lane_.c && steadyNs() < until) {
    std::vector<Job> batch;
    while (!left.empty() && batch.size() < pipeline_) {
      batch.push_back(std::move(left.front()));
      left.pop_front();
    }
    serveSettlements(settle_lane_, batch);  // (a failure disconnects: the rest are dropped)
  }
  dropped_.fetch_add(left.size(), std::memory_order_relaxed);
  up_ = false;  // (stopped, not unreachable: nothing to warn about)
  disconnect(admit_lane_);
  disconnect(settle_lane_);
}

RedisCounters::Verdict RedisCounters::downVerdict() {
  const int64_t since = down_since_ns_.load(std::memory_order_relaxed);
  Verdict v;
  if (since != 0 && steadyNs() - since < kWarmingNs) {
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
    std::lock_guard g(admit_lane_.mu);
    if (admit_lane_.queue.size() < kMaxQueue && !admit_lane_.stop) {
      admit_lane_.queue.push_back(Job{steadyNs(), std::move(specs), {}, tokens, std::move(done)});
      admit_lane_.cv.notify_one();
      return;
    }
  }
  done(shed());  // (overload: refused, never opened)
}

void RedisCounters::settle(std::vector<QuotaLedger::Held> held, int64_t used) {
  if (held.empty()) return;
  {
    std::lock_guard g(settle_lane_.mu);
    // (one that finds no room is dropped, counted: its hold costs at most one capacity)
    if (settle_lane_.queue.size() < kMaxQueue && !settle_lane_.stop && up()) {
      settle_lane_.queue.push_back(Job{steadyNs(), {}, std::move(held), used, nullptr});
      settle_lane_.cv.notify_one();
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
}

void RedisCounters::disconnect(Lane& l) {
  if (l.c) redisFree(l.c);
  l.c = nullptr;
  if (l.admissions && up_.exchange(false)) {
    down_since_ns_ = steadyNs();
    log::warn("governance", "Redis " + host_ + ":" + std::to_string(port_) +
                                " unreachable: quotas answer token_quota_warming for 3 s, then "
                                "pass uncounted");
  }
}

bool RedisCounters::connect(Lane& l, std::string* refused) {
  l.last_connect_ns = steadyNs();
  timeval tv{0, 500000};
  l.c = redisConnectWithTimeout(host_.c_str(), port_, tv);
  redisContext* c = l.c;
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
  if (why.empty()) {
    for (auto [lua, sha] :
         {std::pair{kAdmitLua, &l.admit_sha}, std::pair{kSettleLua, &l.settle_sha}}) {
      Reply r(redisCommand(c, "SCRIPT LOAD %s", lua));
      if (!r.r || r.r->type != REDIS_REPLY_STRING) {
        why = r.r && r.r->type == REDIS_REPLY_ERROR ? std::string(r.r->str) : c->errstr;
        // An ACL user without SCRIPT LOAD: a configuration mistake (serve exits at start).
        if (r.r && r.r->type == REDIS_REPLY_ERROR && why.starts_with("NOPERM") && refused)
          *refused = "NOPERM on SCRIPT LOAD (the ACL user needs +script|load)";
        break;
      }
      sha->assign(r.r->str, r.r->len);
    }
  }
  if (!why.empty()) {
    if (l.c) redisFree(l.c);
    l.c = nullptr;
    if (steadyNs() - l.connect_logged_ns >= 60'000'000'000) {  // (at most once a minute)
      l.connect_logged_ns = steadyNs();
      log::warn("governance", "Redis " + host_ + ":" + std::to_string(port_) + " (" + l.name +
                                  "): " + why);
    }
    return false;
  }
  if (l.admissions) {
    up_ = true;
    down_since_ns_ = 0;
    log::info("governance", "Redis " + host_ + ":" + std::to_string(port_) +
                                " connected (shared quota counters)");
  }
  return true;
}

void RedisCounters::maybeReconnect(Lane& l) {
  if (!l.c && steadyNs() - l.last_connect_ns >= 1'000'000'000) connect(l);
}

// One reply. kLost: the scripts were gone (SCRIPT FLUSH, a restarted server on the same
// connection): safe to send again after a reconnect loads them. kFailed: a script error.
RedisCounters::Call RedisCounters::parseReply(void* reply, Verdict* v, const Job* j) {
  Reply r(reply);
  if (r.r->type == REDIS_REPLY_ERROR) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    const std::string msg(r.r->str, r.r->len);
    const int64_t now = steadyNs();
    int64_t logged = script_logged_ns_.load(std::memory_order_relaxed);
    if (now - logged >= 10'000'000'000 &&  // (at most every 10 s)
        script_logged_ns_.compare_exchange_strong(logged, now))
      log::warn("governance", "Redis quota script error: " + msg);
    return msg.starts_with("NOSCRIPT") ? Call::kLost : Call::kFailed;
  }
  if (!v) return Call::kOk;
  if (r.r->type != REDIS_REPLY_ARRAY || r.r->elements < 1 ||
      r.r->element[0]->type != REDIS_REPLY_INTEGER) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return Call::kFailed;
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
    return Call::kFailed;
  }
  v->state = State::kRefused;
  v->reason = j->specs[size_t(i - 1)].reason;
  const double wait = std::min(std::strtod(r.r->element[1]->str, nullptr), 86400.0);
  v->retry_after_s = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::isfinite(wait) ? wait : 86400.0)));
  return Call::kOk;
}

void RedisCounters::pipeline(Lane& l, const std::vector<Job*>& jobs, std::vector<Call>& calls,
                             std::vector<Verdict>* out) {
  calls.assign(jobs.size(), Call::kFailed);
  if (out) out->assign(jobs.size(), Verdict{});
  if (!l.c || jobs.empty()) return;
  std::vector<std::string> args;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const Job* j : jobs) {
    args.clear();
    const bool adm = out != nullptr;
    const size_t n = adm ? j->specs.size() : j->held.size();
    args.push_back("EVALSHA");
    args.push_back(adm ? l.admit_sha : l.settle_sha);
    args.push_back(std::to_string(n));
    if (adm)
      for (const auto& s : j->specs) args.push_back("kvgate:q:" + s.key);
    else
      for (const auto& h : j->held) args.push_back("kvgate:q:" + h.key);
    args.push_back(
        std::to_string(std::clamp<int64_t>(j->tokens, 0, int64_t(QuotaLedger::kMaxTokens))));
    if (adm) {
      for (const auto& s : j->specs) {
        args.push_back(num(s.rate_per_s));
        args.push_back(num(s.capacity));
        args.push_back(isTpm(s.reason) ? "1" : "0");
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
    // (only appends to the output buffer: fails on out of memory alone)
    if (redisAppendCommandArgv(l.c, int(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      errors_.fetch_add(1, std::memory_order_relaxed);
      disconnect(l);
      return;
    }
  }
  l.round_trips.fetch_add(1, std::memory_order_relaxed);
  l.commands.fetch_add(jobs.size(), std::memory_order_relaxed);
  bool reload = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(l.c, &reply) != REDIS_OK || !reply) {
      // The connection broke (or timed out) here: this job and every later one have no answer.
      // Gone (EOF, reset): they may be sent again on a new connection; a timeout: they may have
      // run, so they are not.
      const bool lost = l.c->err == REDIS_ERR_EOF ||
                        (l.c->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
      errors_.fetch_add(jobs.size() - i, std::memory_order_relaxed);
      for (size_t k = i; k < jobs.size(); ++k) calls[k] = lost ? Call::kLost : Call::kFailed;
      disconnect(l);
      return;
    }
    calls[i] = parseReply(reply, out ? &(*out)[i] : nullptr, jobs[i]);
    if (calls[i] == Call::kLost) reload = true;
  }
  if (reload) disconnect(l);  // (NOSCRIPT: the next connect loads the scripts again)
}

void RedisCounters::serveAdmissions(Lane& l, std::vector<Job>& batch) {
  std::vector<Job*> live;
  const int64_t now = steadyNs();
  for (Job& j : batch) {
    if (now - j.queued_ns > kMaxWaitNs)
      j.done(shed());  // (waited too long: the client is better told to retry)
    else
      live.push_back(&j);
  }
  if (live.empty()) return;
  std::vector<Call> calls;
  std::vector<Verdict> verdicts;
  pipeline(l, live, calls, &verdicts);
  // Admissions whose connection was gone are sent once more on a new one (a Redis restart must
  // not turn into warming): if the first did run, each such hold is never settled and costs at
  // most one bucket capacity, refilled within a minute.
  std::vector<Job*> again;
  std::vector<size_t> where;
  for (size_t i = 0; i < live.size(); ++i)
    if (calls[i] == Call::kLost) {
      again.push_back(live[i]);
      where.push_back(i);
    }
  if (!again.empty() && connect(l)) {
    std::vector<Call> calls2;
    std::vector<Verdict> verdicts2;
    pipeline(l, again, calls2, &verdicts2);
    for (size_t k = 0; k < again.size(); ++k) {
      calls[where[k]] = calls2[k];
      verdicts[where[k]] = std::move(verdicts2[k]);
    }
  }
  for (size_t i = 0; i < live.size(); ++i) {
    Verdict v = std::move(verdicts[i]);
    if (calls[i] == Call::kOk) {
      script_failing_since_ns_ = 0;
    } else if (!l.c || calls[i] == Call::kLost) {
      v = downVerdict();  // connection gone: warming, then open
    } else {
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
    }
    live[i]->done(std::move(v));
  }
}

void RedisCounters::serveSettlements(Lane& l, std::vector<Job>& batch) {
  if (!l.c) {
    dropped_.fetch_add(batch.size(), std::memory_order_relaxed);
    return;
  }
  std::vector<Job*> jobs;
  for (Job& j : batch) jobs.push_back(&j);
  std::vector<Call> calls;
  pipeline(l, jobs, calls, nullptr);
  // (never resent: a settlement applied twice would refund or charge twice)
  for (Call c : calls)
    if (c != Call::kOk) dropped_.fetch_add(1, std::memory_order_relaxed);
}

void RedisCounters::run(Lane& l) {
  std::vector<Job> batch;
  for (;;) {
    batch.clear();
    {
      std::unique_lock lk(l.mu);
      // Down: wake at least once a second to reconnect.
      l.cv.wait_for(lk, std::chrono::seconds(1), [&] { return l.stop || !l.queue.empty(); });
      if (l.stop) return;
      while (!l.queue.empty() && batch.size() < pipeline_) {
        batch.push_back(std::move(l.queue.front()));
        l.queue.pop_front();
      }
    }
    maybeReconnect(l);
    if (batch.empty()) continue;
    if (!l.admissions) {
      serveSettlements(l, batch);
    } else if (!l.c) {
      for (Job& j : batch) j.done(downVerdict());
    } else {
      serveAdmissions(l, batch);
    }
  }
}

std::string RedisCounters::renderMetrics() const {
  auto line = [](const char* name, const char* type, const char* help, uint64_t v) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
  };
  auto lane = [](const char* name, const char* l, uint64_t v) {
    return std::string(name) + "{lane=\"" + l + "\"} " + std::to_string(v) + "\n";
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
         "# HELP kvgate_quota_redis_round_trips_total Pipelined batches sent to the shared quota "
         "store, by lane (admissions, settlements).\n# TYPE kvgate_quota_redis_round_trips_total "
         "counter\n" +
         lane("kvgate_quota_redis_round_trips_total", admit_lane_.name,
              admit_lane_.round_trips.load()) +
         lane("kvgate_quota_redis_round_trips_total", settle_lane_.name,
              settle_lane_.round_trips.load()) +
         "# HELP kvgate_quota_redis_commands_total Script calls sent to the shared quota store, by "
         "lane (commands / round trips: the mean batch).\n# TYPE "
         "kvgate_quota_redis_commands_total counter\n" +
         lane("kvgate_quota_redis_commands_total", admit_lane_.name, admit_lane_.commands.load()) +
         lane("kvgate_quota_redis_commands_total", settle_lane_.name,
              settle_lane_.commands.load()) +
         line("kvgate_quota_redis_dropped_total", "counter",
              "Settlements not sent (queue full, Redis down, call failed; the hold costs at most "
              "one bucket capacity).",
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
