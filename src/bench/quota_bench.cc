// kvgate bench quota: admissions per second through the shared quota store (Redis), as a metered
// gateway drives it: `--concurrency` requests in flight, each an admission (a key RPS and a
// tenant TPM bucket, buckets spread over `--tenants`) followed by its settlement, then the next.
// Capacities are huge, so every admission is granted: what is measured is the store's ceiling.
// Runs once per `--pipeline` value (the script calls per round trip; 1 sends one at a time), on
// the same Redis in the same run, and prints one JSON line each: the round trip measured with
// PING (median of 200), admissions/s, the mean batch, and how many were shed or passed
// uncounted. Figures and the namespace script (bench/quota_rtt.sh) in docs/benchmarks.md.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "governance/redis_counters.h"

namespace kvgate::bench {

namespace {

using governance::RedisCounters;
using Clock = std::chrono::steady_clock;

double pingRttUs(const net::HostPort& hp) {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout(hp.host.c_str(), hp.port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return -1;
  }
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = Clock::now();
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    const auto t1 = Clock::now();
    if (!r) break;
    freeReplyObject(r);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  redisFree(c);
  if (us.empty()) return -1;
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

struct Run {
  std::atomic<uint64_t> ok{0}, refused{0}, warming{0}, open{0}, closed{0};
  std::atomic<int> chains{0};
  std::atomic<int64_t> end_ns{0};  // (steady clock)
  std::mutex mu;
  std::condition_variable cv;
};

void chain(RedisCounters& rc, Run& run, std::vector<governance::BucketSpec> specs) {
  if (Clock::now().time_since_epoch().count() >= run.end_ns.load()) {
    std::lock_guard g(run.mu);
    if (--run.chains == 0) run.cv.notify_all();
    return;
  }
  auto again = specs;
  rc.admit(std::move(specs), 100,
           [&rc, &run, again = std::move(again)](RedisCounters::Verdict v) mutable {
             using S = RedisCounters::State;
             switch (v.state) {
               case S::kOk:
                 run.ok.fetch_add(1);
                 rc.settle(std::move(v.held), 60);
                 break;
               case S::kRefused:
                 run.refused.fetch_add(1);
                 break;
               case S::kWarming:
                 run.warming.fetch_add(1);
                 break;
               case S::kOpen:
                 run.open.fetch_add(1);
                 break;
               case S::kClosed:
                 run.closed.fetch_add(1);
                 break;
             }
             // (from the I/O thread: admit only queues) A store that failed ends the run: an
             // admission answered at once would otherwise recurse.
             if (v.state != S::kOk && v.state != S::kRefused) run.end_ns = 0;
             chain(rc, run, std::move(again));
           });
}

uint64_t metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return 0;
  return std::stoull(text.substr(at + series.size() + 2));
}

}  // namespace

int quotaBench(int argc, char** argv) {
  std::optional<net::HostPort> redis;
  uint64_t concurrency = 256, seconds = 5, tenants = 1000;
  std::vector<uint64_t> pipelines{1, RedisCounters::kDefaultPipeline};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[++i] : "";
    bool ok = true;
    if (a == "--redis") {
      redis = net::parseHostPort(v);
      ok = redis.has_value();
    } else if (a == "--concurrency") {
      ok = net::parseUint(v, 60000, concurrency) && concurrency > 0;
    } else if (a == "--seconds") {
      ok = net::parseUint(v, 3600, seconds) && seconds > 0;
    } else if (a == "--tenants") {
      ok = net::parseUint(v, 1000000, tenants) && tenants > 0;
    } else if (a == "--pipeline") {
      pipelines.clear();
      size_t from = 0;
      while (ok && from <= v.size()) {
        const size_t comma = std::min(v.find(',', from), v.size());
        uint64_t x = 0;
        ok = net::parseUint(std::string_view(v).substr(from, comma - from),
                            RedisCounters::kMaxPipeline, x) &&
             x > 0;
        pipelines.push_back(x);
        from = comma + 1;
      }
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate bench quota: bad or unknown flag %s %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  if (!redis) {
    std::fprintf(stderr,
                 "usage: kvgate bench quota --redis HOST:PORT [--pipeline 1,128] "
                 "[--concurrency 256] [--seconds 5] [--tenants 1000]\n");
    return 2;
  }
  const double rtt = pingRttUs(*redis);
  if (rtt < 0) {
    std::fprintf(stderr, "kvgate bench quota: Redis %s:%u does not answer PING\n",
                 redis->host.c_str(), unsigned(redis->port));
    return 1;
  }
  for (uint64_t pipe : pipelines) {
    RedisCounters rc(redis->host, redis->port);
    rc.setPipeline(pipe);
    if (auto st = rc.start(); !st || !rc.up()) {
      std::fprintf(stderr, "kvgate bench quota: Redis did not connect\n");
      return 1;
    }
    Run run;
    run.chains = int(concurrency);
    const auto t0 = Clock::now();
    run.end_ns = (t0 + std::chrono::seconds(seconds)).time_since_epoch().count();
    for (uint64_t i = 0; i < concurrency; ++i) {
      const std::string t = std::to_string(i % tenants);
      chain(rc, run,
            {{"bench|k|" + t, governance::LimitReason::kKeyRps, 1e9, 1e9},
             {"bench|tq|" + t, governance::LimitReason::kTenantTpm, 1e9, 1e9}});
    }
    {
      std::unique_lock lk(run.mu);
      run.cv.wait(lk, [&] { return run.chains == 0; });
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string m = rc.renderMetrics();
    rc.stop();
    const uint64_t trips = metric(m, "kvgate_quota_redis_round_trips_total");
    const uint64_t cmds = metric(m, "kvgate_quota_redis_calls_total{kind=\"admission\"}") +
                          metric(m, "kvgate_quota_redis_calls_total{kind=\"settlement\"}");
    std::printf(
        "{\"pipeline\":%llu,\"rtt_us\":%.0f,\"concurrency\":%llu,\"seconds\":%.2f,"
        "\"admissions_per_s\":%.0f,\"granted\":%llu,\"refused\":%llu,\"shed_or_warming\":%llu,"
        "\"open\":%llu,\"closed\":%llu,\"mean_batch\":%.1f,\"settlements_dropped\":%llu}\n",
        static_cast<unsigned long long>(pipe), rtt, static_cast<unsigned long long>(concurrency),
        secs, double(run.ok + run.refused) / secs, static_cast<unsigned long long>(run.ok.load()),
        static_cast<unsigned long long>(run.refused.load()),
        static_cast<unsigned long long>(run.warming.load()),
        static_cast<unsigned long long>(run.open.load()),
        static_cast<unsigned long long>(run.closed.load()), trips ? double(cmds) / trips : 0.0,
        static_cast<unsigned long long>(metric(m, "kvgate_quota_redis_dropped_total")));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace kvgate::bench
