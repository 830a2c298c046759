// OverloadMonitor: the gateway's memory bound (issue 28 §2 "limits"), in the spirit of Envoy's
// overload manager with its fixed-heap monitor.
//
// Algorithm: a thread samples the heap in use (glibc mallinfo2: bytes in allocated chunks plus
// mmapped ones; what the gateway holds, not what the allocator keeps cached) less what refusing
// requests cannot free (the KV index, which has its own cap) every `period` (250 ms) and moves
// one level with hysteresis against the limit L:
//   kNormal -> kShed   at >= shed_ratio x L (0.90): new requests answered 503 gateway_overloaded
//                      (Retry-After: 1) as soon as their head is read (before the body, routing
//                      or upstream work), their connection closed; streams in flight go on;
//   kShed -> kPause    at >= pause_ratio x L (0.98): the data plane's listeners also stop
//                      accepting (connections wait in the kernel's backlog);
//   back down a level only below (ratio - 0.05) x L, so the state does not flap;
//   over the bound for 2 s (8 samples) with no client connection open (shedding closes each
//   refused connection), the memory is not the requests': back to normal, an error logged.
// Knobs: `serve --max-heap-bytes N` (L). Default, when the process's cgroup has a memory limit
// below the machine's memory (v2 memory.max, v1 memory.limit_in_bytes): 70 % of that limit less
// what is resident at startup (code, libraries, stacks); the other 30 % is for allocator slack,
// socket buffers the kernel charges to the cgroup, and the page cache the binary needs (squeezed,
// it is re-read from disk and everything slows). None otherwise (0 = off). Metrics: kvgate_heap_bytes, kvgate_heap_limit_bytes,
// kvgate_overload_state (0, 1, 2), kvgate_overload_shed_total. Transitions are logged.
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
  uint64_t limit = 0;  // L in bytes; 0 = off
  double shed_ratio = 0.90;
  double pause_ratio = 0.98;
  double hysteresis = 0.05;
};

// The next level from `cur` for `used` bytes (pure: the unit tests check it by hand).
Overload nextOverload(Overload cur, uint64_t used, const OverloadLimits& l);

// The memory limit of this process's cgroup (v2 memory.max or v1 memory.limit_in_bytes), read
// under `root` (normally "" for / : /proc/self/cgroup and /sys/fs/cgroup); nullopt when there is
// none, it is "max", or it is not below the machine's memory (`mem_total`, bytes).
std::optional<uint64_t> cgroupMemoryLimit(const std::string& root, uint64_t mem_total);
// The default L: defaultHeapBound(cgroupMemoryLimit(""), resident set now), else 0.
uint64_t defaultHeapLimit();
// 70 % of what the cgroup leaves above what is resident already (code, libraries, stacks); at
// least 16 MiB.
uint64_t defaultHeapBound(uint64_t cgroup_limit, uint64_t resident);

class OverloadMonitor {
 public:
  struct Out {  // written by the monitor thread, read by every worker
    std::atomic<uint8_t> level{0};
    std::atomic<uint64_t> heap{0};
    std::atomic<uint64_t> limit{0};
  };
  struct Probes {
    std::function<uint64_t()> sample;  // heap bytes in use (default mallinfo2)
    // Bytes of the heap that refusing requests cannot free (the KV index, bounded by its own
    // cap): left out of the measure. Null: none.
    std::function<uint64_t()> exempt;
    // True when no client connection is open: over the bound with nothing to shed, the memory is
    // not the requests'; shedding would refuse every request for good, so the level goes back
    // to normal with an error log (raise the bound). Null: never.
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
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

uint64_t heapInUse();  // mallinfo2: uordblks + hblkhd

}  // namespace kvgate::proxy
