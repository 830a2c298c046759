// The event-loop probe of a data-plane worker (issue 34): how late its loop runs a timer due
// every 100 ms, and, when it runs 10 ms or more late (a stall), why.
//
// Algorithm: at each tick the worker reads its own thread's scheduler accounting
// (/proc/thread-self/schedstat: nanoseconds on a CPU, nanoseconds runnable but waiting for one)
// and the machine's stolen time (/proc/stat's steal column, read by one worker at a time at most
// every 50 ms and shared; divided by the online CPUs: a VM's vCPUs the host did not run). Over
// the interval since the previous tick (100 ms + the lag), a stall of `lag` is put down to:
//   steal     the host ran something else: stolen CPU time >= lag / 2 (our thread's "on a CPU"
//             time may include it, so this is checked first; 10 ms tick resolution);
//   cpu_wait  the thread was ready but other threads or processes held the CPUs: its run-queue
//             wait grew by >= lag / 2;
//   blocked   asleep in a call that blocks (disk, a lock, a page fault from disk) while a timer
//             was due: the interval's time neither on a CPU nor waiting for one, less the 100 ms
//             the loop may have idled before the due time, >= lag / 2 (or on a CPU and waiting
//             together < lag / 2);
//   busy      otherwise: its own handlers ran (long handlers, a burst of handshakes).
// The counters cover the whole interval, not the lag alone: steal and cpu_wait are exact when
// they happen at all; busy against blocked is a lower-bound judgement (a loop that ran 20 ms and
// then blocked 30 ms reads as busy).
// Knobs: none (the 100 ms period and the 10 ms stall bar are constants). Metrics:
// kvgate_worker_loop_lag_seconds{worker}, kvgate_worker_loop_stalls_total{worker,cause},
// kvgate_worker_cpu_seconds_total{worker}, kvgate_worker_cpu_wait_seconds_total{worker}; a
// warning per stall (at most one a second per worker) names the cause and the numbers.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http/asio.h"

namespace kvgate::proxy {

class Worker;

enum class StallCause : uint8_t { kBusy, kCpuWait, kSteal, kBlocked, kUnknown };
inline constexpr std::array<std::string_view, 5> kStallCauseNames = {"busy", "cpu_wait", "steal",
                                                                     "blocked", "unknown"};
inline constexpr double kStallSeconds = 0.010;  // a tick this late is a stall
inline constexpr double kProbePeriodSeconds = 0.100;

// What one interval between ticks held, in seconds (deltas of the counters above).
struct LoopInterval {
  double lag = 0;       // how late the tick ran
  double interval = 0;  // since the previous tick (the 100 ms period + lag)
  double on_cpu = 0;    // the thread's time on a CPU (schedstat field 1)
  double cpu_wait = 0;  // its time runnable, waiting for a CPU (schedstat field 2)
  double steal = 0;     // the machine's stolen time, per CPU (/proc/stat steal / CPUs)
  bool known = true;    // false: the accounting could not be read
};
StallCause classifyStall(const LoopInterval& iv);

// Per-worker counters, written by the worker's thread, read by scrapes.
struct LoopStats {
  std::array<std::atomic<uint64_t>, kStallCauseNames.size()> stalls{};
  std::atomic<uint64_t> cpu_ns{0};       // on a CPU, summed over ticks
  std::atomic<uint64_t> cpu_wait_ns{0};  // runnable, waiting for a CPU
};

// Readers of the accounting files (kept open; pread at offset 0 regenerates them).
struct ThreadSched {
  uint64_t on_cpu_ns = 0, wait_ns = 0;
};
std::optional<ThreadSched> parseSchedstat(std::string_view text);
// Sum of the "steal" column of the "cpu " line, in clock ticks, and the number of cpuN lines.
struct StealTicks {
  uint64_t ticks = 0;
  unsigned cpus = 0;
};
std::optional<StealTicks> parseProcStatSteal(std::string_view text);

// Every 100 ms on the worker's thread: observe the lag, classify stalls (see the top).
asio::awaitable<void> loopLagProbe(Worker& w, size_t index);

}  // namespace kvgate::proxy
