#include "proxy/loop_probe.h"

#include <gtest/gtest.h>

#include <time.h>

#include <thread>

namespace kvgate::proxy {
namespace {

LoopInterval iv(double lag, double on_cpu, double wait, double steal) {
  LoopInterval v;
  v.lag = lag;
  v.on_cpu = on_cpu;
  v.cpu_wait = wait;
  v.steal = steal;
  v.interval = kProbePeriodSeconds + lag;
  return v;
}

// Hand-worked cases of the rule at the top of loop_probe.h (lag 20 ms: half is 10 ms).
TEST(LoopProbe, StallCausesByHand) {
  EXPECT_EQ(classifyStall(iv(0.020, 0.110, 0.001, 0.0)), StallCause::kBusy);
  EXPECT_EQ(classifyStall(iv(0.020, 0.090, 0.015, 0.0)), StallCause::kCpuWait);
  EXPECT_EQ(classifyStall(iv(0.020, 0.090, 0.010, 0.0)), StallCause::kCpuWait);  // exactly half
  EXPECT_EQ(classifyStall(iv(0.020, 0.100, 0.015, 0.010)), StallCause::kSteal);  // steal first
  EXPECT_EQ(classifyStall(iv(0.020, 0.004, 0.003, 0.0)), StallCause::kBlocked);  // 7 < 10 ms
  // 120 ms interval, 9 on a CPU or waiting: 111 asleep, of which at most 100 idle before the
  // due time, so 11 ms (over half the lag) asleep after it.
  EXPECT_EQ(classifyStall(iv(0.020, 0.005, 0.004, 0.0)), StallCause::kBlocked);
  EXPECT_EQ(classifyStall(iv(0.020, 0.008, 0.004, 0.0)), StallCause::kBusy);  // 8 asleep after
  // Lag 50: 20 ms on a CPU, 130 asleep: >= 30 of them after the due time.
  EXPECT_EQ(classifyStall(iv(0.050, 0.020, 0.0, 0.0)), StallCause::kBlocked);
  // The documented limit: 40 ms on a CPU then blocked: only 10 ms provably asleep after due.
  EXPECT_EQ(classifyStall(iv(0.050, 0.040, 0.0, 0.0)), StallCause::kBusy);
  LoopInterval unknown = iv(0.020, 0, 0, 0);
  unknown.known = false;
  EXPECT_EQ(classifyStall(unknown), StallCause::kUnknown);
}

TEST(LoopProbe, ParsesSchedstatAndRefusesJunk) {
  auto s = parseSchedstat("349938047 1367701 74\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->on_cpu_ns, 349938047u);
  EXPECT_EQ(s->wait_ns, 1367701u);
  EXPECT_FALSE(parseSchedstat(""));
  EXPECT_FALSE(parseSchedstat("12"));
  EXPECT_FALSE(parseSchedstat("x 1 2"));
  EXPECT_FALSE(parseSchedstat("-1 2 3"));
  EXPECT_FALSE(parseSchedstat("99999999999999999999999 1 1"));  // overflow
}

TEST(LoopProbe, ParsesProcStatStealAndRefusesJunk) {
  const char* text =
      "cpu  3820653 31117 556689 6190882 15096 0 86630 10304 0 0\n"
      "cpu0 1812240 17004 262206 3212063 3667 0 43826 5122 0 0\n"
      "cpu1 2008412 14113 294483 2978818 11428 0 42803 5181 0 0\n"
      "intr 1 2 3\nctxt 5\n";
  auto s = parseProcStatSteal(text);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ticks, 10304u);
  EXPECT_EQ(s->cpus, 2u);
  EXPECT_FALSE(parseProcStatSteal(""));
  EXPECT_FALSE(parseProcStatSteal("cpu0 1 2 3 4 5 6 7 8\n"));          // no total line
  EXPECT_FALSE(parseProcStatSteal("cpu  1 2 3 4 5 6 7\ncpu0 1\n"));      // too few fields
  EXPECT_FALSE(parseProcStatSteal("cpu  1 2 3 4 5 6 7 8 0 0\nintr 1\n"));  // no CPU lines
}

// This machine's files parse (Linux with scheduler accounting, as the probe expects), and a
// thread that spins shows time on a CPU there (one-sided: at least part of what it spun).
TEST(LoopProbe, ThisKernelsAccountingReads) {
  std::optional<ThreadSched> before, after;
  std::thread([&] {
    auto read = [] {
      char buf[256];
      FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
      if (!f) return std::optional<ThreadSched>();
      const size_t n = std::fread(buf, 1, sizeof buf, f);
      std::fclose(f);
      return parseSchedstat(std::string_view(buf, n));
    };
    before = read();
    // Spin until this thread has had 30 ms of CPU (its own clock: a busy machine only slows it).
    auto cpu = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
    };
    const long long until = cpu() + 30'000'000LL;
    volatile uint64_t x = 0;
    while (cpu() < until) x = x + 1;
    after = read();
  }).join();
  ASSERT_TRUE(before && after);
  EXPECT_GE(after->on_cpu_ns - before->on_cpu_ns, 20'000'000u);  // (scheduler tick granularity)
  FILE* f = std::fopen("/proc/stat", "r");
  ASSERT_TRUE(f);
  char buf[2048];
  const size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  auto st = parseProcStatSteal(std::string_view(buf, n));
  ASSERT_TRUE(st);
  EXPECT_GE(st->cpus, 1u);
}

}  // namespace
}  // namespace kvgate::proxy
