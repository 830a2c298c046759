// OverloadMonitor: the gateway's memory bound (issue 28 §2 "limits"), in the spirit of Envoy's
// overload manager with its fixed-heap monitor.
//
// Algorithm: a thread samples, every `period` (250 ms), the heap in use H (glibc mallinfo2: bytes
// in allocated chunks plus mmapped ones: what the gateway holds, not what the allocator caches)
// and the KV index's bytes K (bounded by its own cap; refusing requests cannot free it). Two
// pressures, the larger one counts:
//   requests:  (H - K) / L       L = --max-heap-bytes, or the cgroup default below;
//   whole:     H / C             C = the cgroup budget (only when the cgroup sets the default):
//                                85 % of its memory limit less the resident set at startup, so
//                                a big KV index cannot carry the process to the OOM killer
//                                unnoticed while the requests' part looks small.
// Levels, with hysteresis:
//   kNormal -> kShed   at pressure >= 0.90: new requests answered 503 gateway_overloaded
//                      (Retry-After: 1) as soon as their head is read (before the body, routing
//                      or upstream work), their connection closed; streams in flight go on;
//   kShed -> kPause    at >= 0.98: the data plane's listeners also stop accepting (connections
//                      wait in the kernel's backlog);
//   back down a level only below (threshold - 0.05), so the state does not flap.
// Over 0.90 with no client connection open for 2 s, the memory is not the requests' (the KV
// index and other state fill the budget): an error says so once a minute (raise the memory
// limit or lower LOXILB_KV_MAX_BLOCKS); the level stays at most kShed (requests get a fast 503
// rather than wait in a backlog nobody accepts from), as requests would only add to it.
// Knobs: `serve --max-heap-bytes N` (L). Default, when the process's cgroup (or a parent) has a
// memory limit below the machine's memory (v2 memory.max, v1 memory.limit_in_bytes): L = 70 % of
// that limit less the resident set at startup, C = 85 % of it; the rest is for allocator slack,
// socket buffers the kernel charges to the cgroup, and the page cache the binary needs. None
// otherwise (0 = off). Metrics: kvgate_heap_bytes (H - K), kvgate_heap_limit_bytes (L),
// kvgate_heap_total_bytes (H), kvgate_heap_budget_bytes (C), kvgate_overload_state (0, 1, 2),
// kvgate_overload_shed_total. Transitions are logged. The index itself is not capped here
// (LOXILB_KV_MAX_BLOCKS is its cap); at 90 % of C new requests are refused.
// The bound is sampled, not enforced per allocation: a burst inside one period (large request
// bodies, up to --max-body-bytes each) can pass it; the margins above are for that.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace kvgate::proxy {

enum class Overload : uint8_t { kNormal = 0, kShed = 1, kPause = 2 };

struct OverloadLimits {
  uint64_t limit = 0;   // L in bytes (the requests' heap); 0 = off
  uint64_t budget = 0;  // C in bytes (the whole heap; the cgroup default only); 0 = none
  double shed_ratio = 0.90;
  double pause_ratio = 0.98;
  double hysteresis = 0.05;
};

// The next level from `cur` at `pressure` (a fraction of the bound; pure, checked by hand).
Overload nextOverloadAt(Overload cur, double pressure, const OverloadLimits& l);
// The next level for `used` bytes of requests' heap against L alone.
Overload nextOverload(Overload cur, uint64_t used, const OverloadLimits& l);
// max((heap - index) / L, heap / C): the pressure nextOverloadAt takes.
double overloadPressure(uint64_t heap, uint64_t index, const OverloadLimits& l);

// The memory limit of this process's cgroup (v2 memory.max or v1 memory.limit_in_bytes), read
// under `root` (normally "" for / : /proc/self/cgroup and /sys/fs/cgroup); nullopt when there is
// none, it is "max", or it is not below the machine's memory (`mem_total`, bytes).
std::optional<uint64_t> cgroupMemoryLimit(const std::string& root, uint64_t mem_total);
// The default L and C from cgroupMemoryLimit("") and the resident set now; {0, 0} without one.
OverloadLimits defaultHeapLimits();
// 70 % of what the cgroup leaves above what is resident already (code, libraries, stacks); at
// least 16 MiB.
uint64_t defaultHeapBound(uint64_t cgroup_limit, uint64_t resident);
// 85 % of the same; at least the bound.
uint64_t defaultHeapBudget(uint64_t cgroup_limit, uint64_t resident);

class OverloadMonitor {
 public:
  struct Out {  // written by the monitor thread, read by every worker
    std::atomic<uint8_t> level{0};
    std::atomic<uint64_t> heap{0};    // H - K: against L
    std::atomic<uint64_t> total{0};   // H: against C
    std::atomic<uint64_t> limit{0};   // L
    std::atomic<uint64_t> budget{0};  // C
  };
  struct Probes {
    std::function<uint64_t()> sample;  // heap bytes in use (default mallinfo2)
    // Bytes of the heap that refusing requests cannot free (the KV index, bounded by its own
    // cap): left out of the requests' measure (H - K against L), not of the whole (H against
    // C). Null: none.
    std::function<uint64_t()> exempt;
    // True when no client connection is open: over the bound so, the memory is not the
    // requests' (an error log says so). Null: never.
    std::function<bool()> idle;
  };
  OverloadMonitor(OverloadLimits limits, Out& out, std::chrono::milliseconds period,
                  Probes probes = {});
  ~OverloadMonitor();
  void start();
  void stop();
  // One sample and transition, on the caller's thread (the thread's loop body; tests).
  void tick();

 private:
  OverloadLimits limits_;
  Out& out_;
  std::chrono::milliseconds period_;
  Probes probes_;
  int idle_over_ = 0;  // consecutive samples over the bound with no connection open
  static constexpr int kIdleOverSamples = 8;
  std::chrono::steady_clock::time_point idle_logged_{};
  bool idle_logged_once_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

uint64_t heapInUse();  // mallinfo2: uordblks + hblkhd

}  // namespace kvgate::proxy
