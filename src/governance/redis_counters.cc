#include "governance/redis_counters.h"

#include <hiredis/hiredis.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/log.h"

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
  if ARGV[3 * i + 1] == '1' then cost = tokens end
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

RedisCounters* g_counters = nullptr;

}  // namespace

RedisCounters* redisCounters() { return g_counters; }
void setRedisCounters(RedisCounters* c) { g_counters = c; }

RedisCounters::RedisCounters(std::string host, int port) : host_(std::move(host)), port_(port) {
  down_since_ns_ = steadyNs();  // unknown until the first connect: warming
}

RedisCounters::~RedisCounters() { stop(); }

void RedisCounters::start() {
  thread_ = std::thread([this] { run(); });
}

void RedisCounters::stop() {
  {
    std::lock_guard g(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  disconnect();
  std::deque<Job> left;
  {
    std::lock_guard g(mu_);
    left.swap(queue_);
  }
  for (Job& j : left)
    if (j.done) j.done(Verdict{State::kOpen, 0, LimitReason::kKeyRps, {}});
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

void RedisCounters::admit(std::vector<BucketSpec> specs, int64_t tokens, Done done) {
  if (!up()) {  // known down: answer at once (no queueing behind timeouts)
    done(downVerdict());
    return;
  }
  {
    std::lock_guard g(mu_);
    if (queue_.size() < kMaxQueue && !stop_) {
      queue_.push_back(Job{false, std::move(specs), {}, tokens, std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  done(downVerdict());
}

void RedisCounters::settle(std::vector<QuotaLedger::Held> held, int64_t used) {
  if (held.empty()) return;
  std::lock_guard g(mu_);
  if (queue_.size() >= kMaxQueue || stop_ || !up()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);  // (the bucket keeps the reservation)
    return;
  }
  queue_.push_back(Job{true, {}, std::move(held), used, nullptr});
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
  timeval tv{0, 500000};
  c_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (!c_ || c_->err) {
    if (c_) redisFree(c_);
    c_ = nullptr;
    return false;
  }
  redisSetTimeout(c_, tv);
  for (auto [lua, sha] : {std::pair{kAdmitLua, &admit_sha_}, std::pair{kSettleLua, &settle_sha_}}) {
    Reply r(redisCommand(c_, "SCRIPT LOAD %s", lua));
    if (!r.r || r.r->type != REDIS_REPLY_STRING) {
      redisFree(c_);
      c_ = nullptr;
      return false;
    }
    sha->assign(r.r->str, r.r->len);
  }
  up_ = true;
  down_since_ns_ = 0;
  log::info("governance", "Redis " + host_ + ":" + std::to_string(port_) + " connected (shared quota counters)");
  return true;
}

std::optional<RedisCounters::Verdict> RedisCounters::doAdmit(const Job& j) {
  std::vector<std::string> args{"EVALSHA", admit_sha_, std::to_string(j.specs.size())};
  for (const auto& s : j.specs) args.push_back("kvgate:q:" + s.key);
  args.push_back(std::to_string(std::clamp<int64_t>(j.tokens, 0, int64_t(QuotaLedger::kMaxTokens))));
  for (const auto& s : j.specs) {
    args.push_back(num(s.rate_per_s));
    args.push_back(num(s.capacity));
    args.push_back(isTpm(s.reason) ? "1" : "0");
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply r(redisCommandArgv(c_, int(argv.size()), argv.data(), lens.data()));
  if (!r.r || r.r->type != REDIS_REPLY_ARRAY || r.r->elements < 1 ||
      r.r->element[0]->type != REDIS_REPLY_INTEGER) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (r.r && r.r->type == REDIS_REPLY_ERROR)
      log::warn("governance", std::string("Redis quota script: ") + r.r->str);
    return std::nullopt;  // (the caller reconnects once, which loads the scripts again)
  }
  Verdict v;
  const long long i = r.r->element[0]->integer;
  if (i == 0) {
    for (const auto& s : j.specs)
      if (isTpm(s.reason))
        v.held.push_back({s.key, std::clamp(double(j.tokens), 0.0, QuotaLedger::kMaxTokens),
                          s.rate_per_s, s.capacity, s.reason});
    return v;
  }
  if (i < 1 || size_t(i) > j.specs.size() || r.r->elements < 2 ||
      r.r->element[1]->type != REDIS_REPLY_STRING) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  v.state = State::kRefused;
  v.reason = j.specs[size_t(i - 1)].reason;
  const double wait = std::min(std::strtod(r.r->element[1]->str, nullptr), 86400.0);
  v.retry_after_s = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::isfinite(wait) ? wait : 86400.0)));
  return v;
}

bool RedisCounters::doSettle(const Job& j) {
  std::vector<std::string> args{"EVALSHA", settle_sha_, std::to_string(j.held.size())};
  for (const auto& h : j.held) args.push_back("kvgate:q:" + h.key);
  args.push_back(std::to_string(std::clamp<int64_t>(j.tokens, 0, int64_t(QuotaLedger::kMaxTokens))));
  for (const auto& h : j.held) {
    args.push_back(num(h.amount));
    args.push_back(num(h.rate_per_s));
    args.push_back(num(h.capacity));
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply r(redisCommandArgv(c_, int(argv.size()), argv.data(), lens.data()));
  if (!r.r || r.r->type == REDIS_REPLY_ERROR) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
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
    if (!c_) {
      if (j.done) j.done(downVerdict());
      continue;
    }
    // A failed call (Redis restarted, connection dropped) reconnects at once and tries again.
    if (j.settle) {
      if (!doSettle(j)) {
        disconnect();
        if (connect()) doSettle(j);
      }
      continue;
    }
    auto v = doAdmit(j);
    if (!v) {
      disconnect();
      if (connect()) v = doAdmit(j);
      if (!v) {
        disconnect();
        v = downVerdict();
      }
    }
    j.done(std::move(*v));
  }
}

std::string RedisCounters::renderMetrics() const {
  auto line = [](const char* name, const char* type, const char* help, uint64_t v) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + " " + std::to_string(v) + "\n";
  };
  return line("loxilb_ai_token_quota_cold_open_total", "counter",
              "Requests passed uncounted because the shared quota store (Redis) was unreachable "
              "for more than 3 s.",
              cold_open_.load()) +
         line("kvgate_quota_warming_total", "counter",
              "Requests answered 429 token_quota_warming (Redis unreachable for less than 3 s).",
              warming_.load()) +
         line("kvgate_quota_redis_up", "gauge", "1 while the shared quota store is connected.",
              up() ? 1 : 0) +
         line("kvgate_quota_redis_errors_total", "counter", "Failed Redis quota calls.",
              errors_.load()) +
         line("kvgate_quota_redis_dropped_total", "counter",
              "Quota jobs not queued (queue full or Redis down; settlements keep the reservation).",
              dropped_.load());
}

}  // namespace kvgate::governance
