// The Redis counters against the in-process ledger (quota_test.cc checks that one against hand
// figures): the same admissions and settlements on a real redis-server (started here on a free
// loopback port, stopped at the end) give the same verdicts, reasons and holds. Refill rates are
// 1e-6 per second, so the few milliseconds between calls do not change a level.
#include "governance/redis_counters.h"

#include "bench/faults/delay_relay.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

extern char** environ;

namespace kvgate::governance {
namespace {

int freePort() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(s);
  return ntohs(a.sin_port);
}

struct RedisServer {
  pid_t pid = -1;
  int port = freePort();
  RedisServer() {
    const std::string p = std::to_string(port);
    const char* argv[] = {"redis-server", "--port",       p.c_str(), "--bind", "127.0.0.1",
                          "--save",       "",             "--appendonly", "no", nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid, "redis-server", &fa, nullptr, const_cast<char**>(argv), environ) != 0)
      pid = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  bool waitListening() const {  // (the server takes a moment to listen; at most 10 s)
    for (int i = 0; i < 500; ++i) {
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(port));
      const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(s);
      if (ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  ~RedisServer() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

RedisCounters::Verdict admit(RedisCounters& rc, const std::vector<BucketSpec>& specs,
                             int64_t tokens) {
  std::promise<RedisCounters::Verdict> p;
  auto f = p.get_future();
  rc.admit(specs, tokens, [&p](RedisCounters::Verdict v) { p.set_value(std::move(v)); });
  return f.get();
}

TEST(RedisCounters, SameVerdictsAsTheLocalLedger) {
  RedisServer server;
  ASSERT_GT(server.pid, 0) << "redis-server (installed by scripts/setup.sh) did not start";
  ASSERT_TRUE(server.waitListening());
  RedisCounters rc("127.0.0.1", server.port);
  ASSERT_TRUE(rc.start().has_value());
  ASSERT_TRUE(rc.up());
  QuotaLedger local;
  const std::string t = "t" + std::to_string(::getpid());  // (fresh keys per run)
  const std::vector<BucketSpec> specs{{"t|" + t, LimitReason::kTenantRps, 1e-6, 6},
                                      {"tq|" + t, LimitReason::kTenantTpm, 1e-6, 100}};
  struct Step {
    int64_t tokens;
    int64_t settle_used;  // >= 0: settle the hold of this step with this many tokens
  };
  // By hand (RPS capacity 6, TPM capacity 100): 200 holds 100 (capped), settled at 30: TPM 70;
  // 10: TPM 60; 50: TPM 10; 30: refused by TPM (its RPS token rolled back); 0 settled at 500:
  // TPM -490 (debt); then refused by TPM (in debt), twice.
  const Step steps[] = {{200, 30}, {10, -1}, {50, -1}, {30, -1}, {0, 500}, {0, -1}, {0, -1}};
  const bool ok_by_hand[] = {true, true, true, false, true, false, false};
  for (size_t i = 0; i < std::size(steps); ++i) {
    auto want = local.admit(specs, steps[i].tokens, 0);
    auto got = admit(rc, specs, steps[i].tokens);
    ASSERT_EQ(want.ok, ok_by_hand[i]) << "step " << i;
    ASSERT_EQ(got.state == RedisCounters::State::kOk, want.ok) << "step " << i;
    if (!want.ok) {
      EXPECT_EQ(got.state, RedisCounters::State::kRefused) << i;
      EXPECT_EQ(got.reason, want.reason) << i;
      EXPECT_EQ(got.retry_after_s, want.retry_after_s) << i;
      continue;
    }
    ASSERT_EQ(got.held.size(), want.held.size()) << i;
    for (size_t h = 0; h < want.held.size(); ++h)
      EXPECT_DOUBLE_EQ(got.held[h].amount, want.held[h].amount) << i;
    if (steps[i].settle_used >= 0) {
      local.settle(want.held, steps[i].settle_used, 0);
      rc.settle(got.held, steps[i].settle_used);
    }
  }
  // An RPS bucket of capacity 2: two pass, the third is refused by it, Retry-After capped at a day.
  const std::vector<BucketSpec> rps{{"k|" + t, LimitReason::kKeyRps, 1e-6, 2}};
  EXPECT_EQ(admit(rc, rps, 0).state, RedisCounters::State::kOk);
  EXPECT_EQ(admit(rc, rps, 0).state, RedisCounters::State::kOk);
  auto r = admit(rc, rps, 0);
  EXPECT_EQ(r.state, RedisCounters::State::kRefused);
  EXPECT_EQ(r.reason, LimitReason::kKeyRps);
  EXPECT_EQ(r.retry_after_s, 86400);
  EXPECT_NE(rc.renderMetrics().find("kvgate_quota_redis_errors_total 0\n"), std::string::npos);
}

// Issue 28 §1.8: a script error used to let every request through uncounted, forever. Redis at
// its memory limit (maxmemory 1, noeviction) fails the admission script's writes with OOM: the
// first errors pass (within the open window), and once the run outlasts the window the
// admissions are refused (kClosed) until one works again.
TEST(RedisCounters, ScriptErrorsFailClosedAfterTheirWindow) {
  RedisServer server;
  ASSERT_GT(server.pid, 0);
  ASSERT_TRUE(server.waitListening());
  auto cli = [&](const std::string& args) {
    return std::system(("redis-cli -p " + std::to_string(server.port) + " " + args +
                        " >/dev/null 2>&1").c_str());
  };
  const std::vector<BucketSpec> specs{{"t|oom" + std::to_string(::getpid()),
                                       LimitReason::kTenantRps, 1e-6, 1000}};
  {
    RedisCounters open("127.0.0.1", server.port);  // the default window: 10 s
    ASSERT_TRUE(open.start().has_value());
    ASSERT_EQ(admit(open, specs, 0).state, RedisCounters::State::kOk);
    ASSERT_EQ(cli("CONFIG SET maxmemory-policy noeviction"), 0);
    ASSERT_EQ(cli("CONFIG SET maxmemory 1"), 0);
    EXPECT_EQ(admit(open, specs, 0).state, RedisCounters::State::kOpen);  // (inside the window)
    EXPECT_NE(open.renderMetrics().find("kvgate_quota_redis_script_closed_total 0\n"),
              std::string::npos);
  }
  RedisCounters rc("127.0.0.1", server.port);
  rc.setScriptOpenWindow(0);  // no window: the first script error already fails closed
  ASSERT_TRUE(rc.start().has_value());
  auto v = admit(rc, specs, 0);
  EXPECT_EQ(v.state, RedisCounters::State::kClosed);
  EXPECT_EQ(admit(rc, specs, 0).state, RedisCounters::State::kClosed);
  EXPECT_NE(rc.renderMetrics().find("kvgate_quota_redis_script_closed_total 2\n"),
            std::string::npos)
      << rc.renderMetrics();
  // The store recovers: admissions work again.
  ASSERT_EQ(cli("CONFIG SET maxmemory 0"), 0);
  EXPECT_EQ(admit(rc, specs, 0).state, RedisCounters::State::kOk);
}

uint64_t metricValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? UINT64_MAX : std::stoull(text.substr(at + series.size() + 2));
}

std::string redisCli(int port, const std::string& args) {
  std::string out;
  if (FILE* f = ::popen(("redis-cli -p " + std::to_string(port) + " " + args).c_str(), "r")) {
    char b[256];
    while (size_t n = std::fread(b, 1, sizeof b, f)) out.append(b, n);
    ::pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Issue 28 §1.4: admissions and settlements are pipelined (one round trip per batch, not per
// request). Through a relay adding 2 ms each way, 400 admissions
// posted at once against an RPS bucket of capacity 300 (refill 1e-6/s): exactly 300 are granted
// and 100 refused by that bucket (by hand), in far fewer round trips than admissions (one at a
// time would take 400 round trips, 1.6 s). Settling the 300 TPM holds of 1000 with 10 used each
// leaves the TPM bucket (capacity 1e6) at 1e6 - 300 x 10 = 997000. After SCRIPT FLUSH, the
// settlement and the admission that meet NOSCRIPT are sent again once the scripts are loaded.
TEST(RedisCounters, PipelinedThroughADelayedLinkKeepsEveryBucketExact) {
  RedisServer server;
  ASSERT_GT(server.pid, 0);
  ASSERT_TRUE(server.waitListening());
  bench::DelayRelay relay({"127.0.0.1", 0}, {"127.0.0.1", uint16_t(server.port)}, 2'000'000);
  auto relay_port = relay.start();
  ASSERT_TRUE(relay_port.has_value());
  RedisCounters rc("127.0.0.1", *relay_port);
  ASSERT_TRUE(rc.start().has_value());
  ASSERT_TRUE(rc.up());
  const std::string t = "p" + std::to_string(::getpid());
  const std::vector<BucketSpec> specs{{"k|" + t, LimitReason::kKeyRps, 1e-6, 300},
                                      {"tq|" + t, LimitReason::kTenantTpm, 1e-6, 1e6}};
  std::mutex mu;
  std::vector<RedisCounters::Verdict> got;
  std::promise<void> all;
  for (int i = 0; i < 400; ++i)
    rc.admit(specs, 1000, [&](RedisCounters::Verdict v) {
      std::lock_guard g(mu);
      got.push_back(std::move(v));
      if (got.size() == 400) all.set_value();
    });
  ASSERT_EQ(all.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const std::string m = rc.renderMetrics();
  const uint64_t trips = metricValue(m, "kvgate_quota_redis_round_trips_total");
  EXPECT_EQ(metricValue(m, "kvgate_quota_redis_calls_total{kind=\"admission\"}"), 400u);
  EXPECT_LE(trips, 40u) << m;  // (one at a time: 400)
  int ok = 0, refused = 0;
  for (auto& v : got) {
    if (v.state == RedisCounters::State::kOk) {
      ++ok;
      ASSERT_EQ(v.held.size(), 1u);
      EXPECT_DOUBLE_EQ(v.held[0].amount, 1000);
      rc.settle(v.held, 10);
    } else {
      ++refused;
      EXPECT_EQ(v.state, RedisCounters::State::kRefused);
      EXPECT_EQ(v.reason, LimitReason::kKeyRps);
    }
  }
  EXPECT_EQ(ok, 300);
  EXPECT_EQ(refused, 100);
  // The settlements land: the TPM level is exact.
  // (the refill of 1e-6/s adds a few 1e-8 over the test)
  double level = 0;
  for (int i = 0; i < 500 && std::abs(level - 997000) > 0.01; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    level = std::atof(redisCli(server.port, "HGET kvgate:q:tq\\|" + t + " l").c_str());
  }
  EXPECT_NEAR(level, 997000, 0.01);
  const std::string m2 = rc.renderMetrics();
  EXPECT_NE(m2.find("kvgate_quota_redis_dropped_total 0\n"), std::string::npos);
  EXPECT_EQ(metricValue(m2, "kvgate_quota_redis_calls_total{kind=\"settlement\"}"), 300u);
  // Scripts flushed under a live connection: a settlement and an admission that meet NOSCRIPT
  // never ran, so they are sent again once the scripts are loaded, and the store stays up. By
  // hand: a hold of 50 taken before the flush, settled at 20 used after it, moves the TPM level
  // 997000 -> 996950 (held) -> 996980 (50 back, 20 charged).
  auto held = admit(rc, specs, 50);
  ASSERT_EQ(held.state, RedisCounters::State::kRefused);  // (the RPS bucket is empty)
  const std::vector<BucketSpec> tpm_only{{"tq|" + t, LimitReason::kTenantTpm, 1e-6, 1e6}};
  held = admit(rc, tpm_only, 50);
  ASSERT_EQ(held.state, RedisCounters::State::kOk);
  ASSERT_EQ(redisCli(server.port, "SCRIPT FLUSH"), "OK");
  rc.settle(held.held, 20);
  for (int i = 0; i < 500 && std::abs(level - 996980) > 0.01; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    level = std::atof(redisCli(server.port, "HGET kvgate:q:tq\\|" + t + " l").c_str());
  }
  EXPECT_NEAR(level, 996980, 0.01);
  ASSERT_EQ(redisCli(server.port, "SCRIPT FLUSH"), "OK");
  EXPECT_EQ(admit(rc, {{"k2|" + t, LimitReason::kKeyRps, 1e-6, 5}}, 0).state,
            RedisCounters::State::kOk);
  EXPECT_TRUE(rc.up());
  EXPECT_NE(rc.renderMetrics().find("kvgate_quota_redis_dropped_total 0\n"), std::string::npos);
}

TEST(RedisCounters, UnreachableIsWarmingNeverOpenAtOnce) {
  RedisCounters rc("127.0.0.1", freePort());  // nothing listens there
  ASSERT_TRUE(rc.start().has_value());
  EXPECT_FALSE(rc.up());
  auto v = admit(rc, {{"k|x", LimitReason::kKeyRps, 1, 1}}, 0);
  EXPECT_EQ(v.state, RedisCounters::State::kWarming);  // (within 3 s of start: warming)
  EXPECT_EQ(v.retry_after_s, 1);
}

// --redis-auth-file: user=/password= entries; malformed, duplicated, empty, oversized or
// loosely protected files are refused naming the flag, and nothing else is guessed.
TEST(RedisAuthFile, EntriesAndRefusals) {
  char dir[] = "/tmp/kvgate-redis-auth-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  int n = 0;
  auto file = [&](const std::string& text, mode_t mode = 0600) {
    const std::string path = std::string(dir) + "/f" + std::to_string(n++);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::fchmod(fd, mode);
    ::close(fd);
    return path;
  };
  auto a = loadRedisAuth(file("# ops\nuser=kvgate\npassword= p#a ss=w0rd \n"));
  ASSERT_TRUE(a.has_value()) << a.error().what;
  EXPECT_EQ(a->user, "kvgate");
  EXPECT_EQ(a->password, "p#a ss=w0rd");  // spaces, '#' and '=' kept; surrounding spaces not
  a = loadRedisAuth(file("password=only\n"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->user, "");
  for (const std::string& bad :
       {std::string("kvgate secret\n"), std::string("user=kvgate\n"), std::string("password=\n"),
        std::string("password=a\npassword=b\n"), std::string("user=\npassword=x\n"),
        std::string("token=x\npassword=y\n"), std::string(""), std::string(5000, 'p')}) {
    a = loadRedisAuth(file(bad));
    ASSERT_FALSE(a.has_value()) << bad;
    EXPECT_NE(a.error().what.find("--redis-auth-file"), std::string::npos) << a.error().what;
  }
  a = loadRedisAuth(file("password=x\n", 0644));
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().what.find("chmod 600"), std::string::npos);
  a = loadRedisAuth(std::string(dir) + "/missing");
  ASSERT_FALSE(a.has_value());
  for (int i = 0; i < n; ++i) ::unlink((std::string(dir) + "/f" + std::to_string(i)).c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace kvgate::governance
