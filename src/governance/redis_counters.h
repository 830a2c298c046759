// Quota counters shared by gateway replicas (issue 14 §3): the ledger's buckets (quota.h) kept in
// Redis (serve --redis HOST:PORT), so a tenant's limits hold across replicas.
//
// Algorithm. Admission is one Lua script over every bucket of the request: it reads each bucket
// (a hash: level, time), refills it with Redis's own clock (TIME: replicas' clocks do not matter),
// and either refuses (the first bucket short of min(cost, capacity), with the seconds until it
// would admit) or takes one request token / the reservation from every bucket at once. Atomic in
// Redis, so no rollback is needed and replicas together overshoot a bucket by at most one
// request's reservation each. Settlement is a second script (reservation back, usage charged,
// debt allowed). Each bucket key expires once it would be full again (its state is then the same
// as no state): Redis holds only buckets in use. Keys are "kvgate:q:" + the ledger's bucket key.
//
// Threads. One I/O thread owns the (synchronous, hiredis) connection and serves two bounded
// queues (kMaxQueue jobs each): admissions and settlements, so neither kind can crowd the other
// out of its queue. Data-plane workers never touch the socket: they post a job and their
// coroutine resumes on its own executor when the answer is posted back. The thread pipelines:
// each batch takes up to `pipeline` jobs (serve --redis-pipeline, default kDefaultPipeline),
// in the order they were posted across both queues, writes every script call, then reads the
// replies in order, so a batch costs one round trip whatever its size (a lone job still goes at
// once: nothing waits for a batch to fill). At 274 us RTT one call per round trip capped
// admissions near 1.6k/s, pipelined 27.4k/s (docs/benchmarks.md, "Shared quota store"). Order:
// a settlement posted before an admission is applied before it (a client's refund lands before
// its next request is admitted). While Redis is down, admissions are answered at once (warming,
// then open) and settlements wait in their queue for the reconnect, then go first. Timeouts:
// connect 500 ms, each read or write 500 ms; a connection idle for kIdlePingNs is PINGed.
// Overload is shed, never opened: a full admission queue, or an admission that waited over
// kMaxWaitNs in it, is answered kShed (429 token_quota_warming, Retry-After 1). Admissions whose
// connection was gone (EOF, reset) are sent once more on a new connection (had the first run,
// each hold costs at most one bucket capacity); timed-out ones are not, nor is a settlement
// whose outcome is unknown (twice would refund or charge twice). A call answered NOSCRIPT (a
// flushed script cache) never ran: the scripts are loaded again and it is sent again, whatever
// its kind. A script error on a live connection (Redis out of memory, an ACL without the
// scripts' commands) keeps the connection and answers kOpen (the request passes uncounted) for
// the first kScriptOpenNs (10 s) of an unbroken run of such errors, then kClosed (the gateway
// answers 503 quota_store_error) until an admission succeeds again: a store that keeps failing
// its script never lets traffic through uncounted for more than that window.
//
// Authentication: with serve --redis-auth-file, AUTH [user] password right after each connect
// (Redis 6 ACL users, or requirepass). Refused at start: serve exits naming Redis's answer.
// Refused later (a rotated password): a failed connect, counted in
// kvgate_quota_redis_auth_failures_total and logged (without the password), retried once a
// second, quotas warming then open as below. Script errors (NOPERM from an ACL user without the
// commands the scripts run) are counted and logged at most every 10 s.
//
// Redis unreachable (connection refused, dropped, timed out): for the first 3 s the answer is
// kWarming (the gateway answers 429 token_quota_warming with Retry-After: 1), then kOpen (the
// request passes uncounted: loxilb_ai_token_quota_cold_open_total). Reconnects are tried at most
// once a second (failures logged at most once a minute); the first success ends both. stop()
// sends the settlements still queued (for up to 2 s), so a clean shutdown leaks no reservation; a
// hold that is never settled (kill -9) costs at most one bucket capacity (quota.h).
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "governance/quota.h"

struct redisContext;

namespace kvgate::governance {

class RedisCounters {
 public:
  // (kShed answers kWarming; kClosed: the script has failed for over kScriptOpenNs)
  enum class State : uint8_t { kOk, kRefused, kWarming, kOpen, kClosed };
  struct Verdict {
    State state = State::kOk;
    int64_t retry_after_s = 0;
    LimitReason reason = LimitReason::kKeyRps;
    std::vector<QuotaLedger::Held> held;  // kOk: the TPM reservations to settle
  };
  using Done = std::function<void(Verdict)>;
  static constexpr size_t kMaxQueue = 65536;
  static constexpr int64_t kWarmingNs = 3'000'000'000;
  static constexpr int64_t kMaxWaitNs = 1'000'000'000;
  static constexpr int64_t kScriptOpenNs = 10'000'000'000;
  static constexpr size_t kDefaultPipeline = 128;
  static constexpr size_t kMaxPipeline = 4096;

  // Credentials (serve --redis-auth-file): sent with AUTH after each connect; an empty
  // password sends none, an empty user authenticates the default user (requirepass).
  struct Auth {
    std::string user, password;
  };
  RedisCounters(std::string host, int port, Auth auth = {});
  ~RedisCounters();
  // Connects (before serving: a healthy Redis means no warming at start) and starts the I/O
  // thread. An error when Redis answered but refused the credentials (AUTH): a configuration
  // mistake the operator must see at once, not a Redis outage.
  Result<void> start();
  void stop();  // (jobs still queued are answered kOpen)
  // How long a run of script errors passes requests uncounted (default kScriptOpenNs); before
  // start() only.
  void setScriptOpenWindow(int64_t ns) { script_open_ns_ = ns; }
  // At most this many script calls per round trip (1..kMaxPipeline; 1 sends one at a time);
  // before start() only.
  void setPipeline(size_t n) { pipeline_ = std::clamp<size_t>(n, 1, kMaxPipeline); }

  // `done` runs on the I/O thread (or at once when Redis is known to be down): post from it.
  void admit(std::vector<BucketSpec> specs, int64_t tokens, Done done);
  void settle(std::vector<QuotaLedger::Held> held, int64_t used);
  std::string renderMetrics() const;
  bool up() const { return up_.load(std::memory_order_relaxed); }

 private:
  struct Job {
    int64_t queued_ns = 0;
    std::vector<BucketSpec> specs;        // admission
    std::vector<QuotaLedger::Held> held;  // settlement
    int64_t tokens = 0;                   // the reservation, or the tokens used
    Done done;                            // admission: the answer (null: a settlement)
    uint64_t seq = 0;                     // arrival order across both queues
  };
  // kNoScript: the scripts were gone (SCRIPT FLUSH, a restarted server behind the same address):
  // the call never ran, so it is sent again once they are loaded. kLost: the connection was gone
  // (EOF, reset) before the reply: an admission is sent once more on a new connection. kBroken: a
  // timeout or another I/O error (it may have run: never resent). kScript: a script error on a
  // live connection (out of memory, ACL) or a reply of the wrong shape.
  enum class Call : uint8_t { kOk, kNoScript, kLost, kBroken, kScript };
  static constexpr int64_t kIdlePingNs = 15'000'000'000;

  Verdict downVerdict();  // warming or open, by how long Redis has been unreachable
  Verdict shed();         // overload: 429 warming
  void run();
  void serve(std::vector<Job>& batch);
  void pingIfIdle();
  // Writes one script call per job, then reads the replies in order (one round trip). calls[i]
  // says how jobs[i] went; an admission's verdict goes to verdicts[i].
  void pipeline(const std::vector<Job*>& jobs, std::vector<Call>& calls,
                std::vector<Verdict>& verdicts);
  Call parseReply(void* reply, Verdict* v, const Job* j);
  // (refused: set when Redis answered but refused the credentials or the scripts; start() only)
  bool connect(std::string* refused = nullptr);
  std::string loadScripts(std::string* refused = nullptr);  // "" or what failed
  void maybeReconnect();  // (at most once a second)
  void disconnect();

  std::string host_;
  int port_;
  Auth auth_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> admissions_, settlements_;  // (mu_)
  uint64_t next_seq_ = 0;                     // (mu_)
  bool stop_ = false;                         // (mu_)
  redisContext* c_ = nullptr;                 // (the I/O thread; stop() after the join)
  std::string admit_sha_, settle_sha_;
  int64_t last_connect_ns_ = 0;
  int64_t last_used_ns_ = 0;  // the last batch or PING (an idle connection is PINGed)
  int64_t connect_logged_ns_ = INT64_MIN / 2;
  size_t pipeline_ = kDefaultPipeline;
  std::atomic<bool> up_{false};
  std::atomic<int64_t> down_since_ns_{0};  // when Redis became unreachable (0: reachable)
  std::atomic<uint64_t> cold_open_{0}, warming_{0}, errors_{0}, dropped_{0}, shed_{0};
  std::atomic<uint64_t> script_closed_{0};  // admissions refused: script failing too long
  std::atomic<uint64_t> round_trips_{0}, admit_calls_{0}, settle_calls_{0};
  // I/O thread only: when the current run of script errors began (0: the last call worked),
  // and how long such a run passes requests uncounted (kScriptOpenNs; tests shorten it).
  int64_t script_failing_since_ns_ = 0;
  int64_t script_open_ns_ = kScriptOpenNs;
  std::atomic<uint64_t> auth_failures_{0};
  int64_t script_logged_ns_ = INT64_MIN / 2;
};

// serve --redis-auth-file: `user=NAME` (optional, a Redis 6 ACL user) and `password=SECRET`
// entries, each once and non-empty; the value is what follows the first '=' (spaces, '#' and '='
// included), trimmed. The file itself is checked by common/secret_file.h (owner, mode 0600/0400,
// at most 4 KiB). Errors name the flag and the entry.
Result<RedisCounters::Auth> loadRedisAuth(const std::string& path);

// The process's shared counters (null: quotas count in this process only).
RedisCounters* redisCounters();
void setRedisCounters(RedisCounters* c);

}  // namespace kvgate::governance
