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
  connect();  // (before serving: a healthy Redis means no warming at start)
  if (!auth_error_.empty())
    return fail(2, "redis-auth-file",
                "Redis " + host_ + ":" + std::to_string(port_) + " refused: " + auth_error_);
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
  // The settlements still queued are sent (for up to 2 s): a clean shutdown leaks no hold.
  std::deque<Job> left;
  {
    std::lock_guard g(mu_);
    left.swap(queue_);
  }
  const int64_t until = steadyNs() + 2'000'000'000;
  for (Job& j : left) {
    if (j.done) {
      j.done(Verdict{State::kOpen, 0, LimitReason::kKeyRps, {}});
      continue;
    }
    if (c_ && steadyNs() < until) doSettle(j);  // (a failure disconnects: the rest are dropped)
  }
  disconnect();
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
    std::lock_guard g(mu_);
    if (queue_.size() < kMaxQueue && !stop_) {
      queue_.push_back(Job{false, steadyNs(), std::move(specs), {}, tokens, std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  done(shed());  // (overload: refused, never opened)
}

void RedisCounters::settle(std::vector<QuotaLedger::Held> held, int64_t used) {
  if (held.empty()) return;
  std::lock_guard g(mu_);
  // (settlements have room past the admissions' bound, so overload does not drop them; one that
  // still finds no room is dropped, counted: its hold costs at most one capacity)
  if (queue_.size() >= kMaxQueue + kMaxQueue / 4 || !up()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(Job{true, steadyNs(), {}, std::move(held), used, nullptr});
  cv_.notify_one();
}

void RedisCounters::disconnect() {
  if (c_) redisFree(c_);
  c_ = nullptr;
  if (up_.exchange(false)) {
    down_since_ns_ = steadyNs();
    log::warn("governance", "Redis " + host_ + ":" + std::to_string(port_) +
                                " unreachable: quotas answer token_quota_warming for 3 s, then "
                                "pass uncounted");
  }
}

bool RedisCounters::connect() {
  last_connect_ns_ = steadyNs();
  auth_error_.clear();
  timeval tv{0, 500000};
  c_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
  std::string why;
  if (!c_ || c_->err) {
    why = c_ ? c_->errstr : "out of memory";
  } else {
    redisSetTimeout(c_, tv);
    if (!auth_.password.empty()) {
      Reply r(auth_.user.empty()
                  ? redisCommand(c_, "AUTH %b", auth_.password.data(), auth_.password.size())
                  : redisCommand(c_, "AUTH %b %b", auth_.user.data(), auth_.user.size(),
                                 auth_.password.data(), auth_.password.size()));
      if (r.r && r.r->type == REDIS_REPLY_ERROR) {
        // Never the reply itself in a log or error: an unknown-command error echoes the
        // arguments, the password included. Refused credentials are told apart from other
        // errors (max clients reached: an outage, not a configuration mistake).
        const std::string_view reply(r.r->str, r.r->len);
        const bool refused = reply.starts_with("WRONGPASS") ||
                             reply.find("invalid password") != std::string_view::npos ||
                             reply.find("invalid username-password") != std::string_view::npos ||
                             reply.find("no password is set") != std::string_view::npos ||
                             reply.find("without any password configured") != std::string_view::npos;
        const std::string code(reply.substr(0, std::min(reply.find(' '), reply.size())));
        if (refused) {
          auth_error_ = code + " (the credentials in --redis-auth-file)";
          auth_failures_.fetch_add(1, std::memory_order_relaxed);
          why = "AUTH refused: " + auth_error_;
        } else {
          why = "AUTH failed: " + code;
        }
      } else if (!r.r) {
        why = c_->errstr;
      }
    }
  }
  if (why.empty() && c_) {
    for (auto [lua, sha] :
         {std::pair{kAdmitLua, &admit_sha_}, std::pair{kSettleLua, &settle_sha_}}) {
      Reply r(redisCommand(c_, "SCRIPT LOAD %s", lua));
      if (!r.r || r.r->type != REDIS_REPLY_STRING) {
        why = r.r && r.r->type == REDIS_REPLY_ERROR ? std::string(r.r->str) : c_->errstr;
        // An ACL user without SCRIPT LOAD: a configuration mistake (serve exits at start).
        if (r.r && r.r->type == REDIS_REPLY_ERROR && why.starts_with("NOPERM"))
          auth_error_ = "NOPERM on SCRIPT LOAD (the ACL user needs +script|load)";
        break;
      }
      sha->assign(r.r->str, r.r->len);
    }
  }
  if (!why.empty()) {
    if (c_) redisFree(c_);
    c_ = nullptr;
    if (steadyNs() - connect_logged_ns_ >= 60'000'000'000) {  // (at most once a minute)
      connect_logged_ns_ = steadyNs();
      log::warn("governance", "Redis " + host_ + ":" + std::to_string(port_) + ": " + why);
    }
    return false;
  }
  up_ = true;
  down_since_ns_ = 0;
  log::info("governance", "Redis " + host_ + ":" + std::to_string(port_) +
                              " connected (shared quota counters)");
  return true;
}

// One script call. kLost: the connection was gone before the command could run (EOF, reset):
// safe to send again on a new one. kFailed: a timeout (it may have run) or a script error.
RedisCounters::Call RedisCounters::call(const std::vector<std::string>& args, Verdict* v,
                                        const Job* j) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply r(redisCommandArgv(c_, int(argv.size()), argv.data(), lens.data()));
  if (!r.r) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    const bool lost = c_->err == REDIS_ERR_EOF ||
                      (c_->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
    disconnect();
    return lost ? Call::kLost : Call::kFailed;
  }
  if (r.r->type == REDIS_REPLY_ERROR) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    const std::string msg(r.r->str, r.r->len);
    if (steadyNs() - script_logged_ns_ >= 10'000'000'000) {  // (at most every 10 s)
      script_logged_ns_ = steadyNs();
      log::warn("governance", "Redis quota script error: " + msg);
    }
    // The scripts are gone (SCRIPT FLUSH, a restarted server on the same connection): load again.
    if (msg.starts_with("NOSCRIPT")) {
      disconnect();
      return Call::kLost;
    }
    return Call::kFailed;
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

RedisCounters::Call RedisCounters::doAdmit(const Job& j, Verdict& v) {
  std::vector<std::string> args{"EVALSHA", admit_sha_, std::to_string(j.specs.size())};
  for (const auto& s : j.specs) args.push_back("kvgate:q:" + s.key);
  args.push_back(
      std::to_string(std::clamp<int64_t>(j.tokens, 0, int64_t(QuotaLedger::kMaxTokens))));
  for (const auto& s : j.specs) {
    args.push_back(num(s.rate_per_s));
    args.push_back(num(s.capacity));
    args.push_back(isTpm(s.reason) ? "1" : "0");
  }
  v = Verdict{};
  return call(args, &v, &j);
}

RedisCounters::Call RedisCounters::doSettle(const Job& j) {
  std::vector<std::string> args{"EVALSHA", settle_sha_, std::to_string(j.held.size())};
  for (const auto& h : j.held) args.push_back("kvgate:q:" + h.key);
  args.push_back(
      std::to_string(std::clamp<int64_t>(j.tokens, 0, int64_t(QuotaLedger::kMaxTokens))));
  for (const auto& h : j.held) {
    args.push_back(num(h.amount));
    args.push_back(num(h.rate_per_s));
    args.push_back(num(h.capacity));
  }
  return call(args, nullptr, &j);
}

void RedisCounters::run() {
  for (;;) {
    Job j;
    {
      std::unique_lock lk(mu_);
      // Down: wake at least once a second to reconnect.
      cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      if (queue_.empty()) {
        lk.unlock();
        if (!c_ && steadyNs() - last_connect_ns_ >= 1'000'000'000) connect();
        continue;
      }
      j = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!c_ && steadyNs() - last_connect_ns_ >= 1'000'000'000) connect();
    if (!j.settle && steadyNs() - j.queued_ns > kMaxWaitNs) {
      j.done(shed());  // (waited too long: the client is better told to retry)
      continue;
    }
    if (!c_) {
      if (j.done) j.done(downVerdict());
      else dropped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (j.settle) {  // (never resent: a settlement applied twice would refund or charge twice)
      if (doSettle(j) != Call::kOk) dropped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // An admission whose connection was gone is sent once more on a new one (a Redis restart
    // must not turn into warming): if the first did run, its hold is never settled and costs at
    // most one bucket capacity, refilled within a minute.
    Verdict v;
    Call c = doAdmit(j, v);
    if (c == Call::kLost && connect()) c = doAdmit(j, v);
    if (c == Call::kOk) {
      script_failing_since_ns_ = 0;
    } else if (!c_) {
      v = downVerdict();  // connection gone: warming, then open
    } else {
      // A script error on a live connection: open for the first script_open_ns_ of the run
      // (counted as an error and a cold open), then closed until an admission works again.
      const int64_t now = steadyNs();
      if (script_failing_since_ns_ == 0) script_failing_since_ns_ = now;
      if (now - script_failing_since_ns_ < script_open_ns_) {
        v = Verdict{State::kOpen, 0, LimitReason::kKeyRps, {}};
        cold_open_.fetch_add(1, std::memory_order_relaxed);
      } else {
        v = Verdict{State::kClosed, 1, LimitReason::kKeyRps, {}};
        script_closed_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    j.done(std::move(v));
  }
}

std::string RedisCounters::renderMetrics() const {
  auto line = [](const char* name, const char* type, const char* help, uint64_t v) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
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
