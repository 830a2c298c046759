#include "proxy/overload.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace kvgate::proxy {

Overload nextOverload(Overload cur, uint64_t used, const OverloadLimits& l) {
  if (l.limit == 0) return Overload::kNormal;
  return nextOverloadAt(cur, static_cast<double>(used) / static_cast<double>(l.limit), l);
}

double overloadPressure(uint64_t heap, uint64_t index, const OverloadLimits& l) {
  double p = 0;
  if (l.limit > 0)
    p = static_cast<double>(heap > index ? heap - index : 0) / static_cast<double>(l.limit);
  if (l.budget > 0) p = std::max(p, static_cast<double>(heap) / static_cast<double>(l.budget));
  return p;
}

Overload nextOverloadAt(Overload cur, double u, const OverloadLimits& l) {
  if (l.limit == 0 && l.budget == 0) return Overload::kNormal;
  if (u >= l.pause_ratio) return Overload::kPause;
  if (cur == Overload::kPause && u >= l.pause_ratio - l.hysteresis) return Overload::kPause;
  if (u >= l.shed_ratio) return Overload::kShed;
  if (cur != Overload::kNormal && u >= l.shed_ratio - l.hysteresis) return Overload::kShed;
  return Overload::kNormal;
}

namespace {

std::optional<uint64_t> readLimit(const std::string& file) {
  std::ifstream f(file);
  std::string v;
  if (!(f >> v) || v == "max") return std::nullopt;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9' || n > (UINT64_MAX - 9) / 10) return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

}  // namespace

// The smallest limit in `file` at `path` and each of its ancestors under `base` (a limit set on a
// parent, such as a systemd slice, binds its children; in a container without a cgroup
// namespace the path names the host's hierarchy, which is not mounted, and the container's own
// cgroup is the mount's root: reached as the last ancestor).
std::optional<uint64_t> smallestUp(const std::string& base, std::string path,
                                   const std::string& file) {
  std::optional<uint64_t> best;
  for (;;) {
    if (auto v = readLimit(base + path + (path.empty() || path.back() != '/' ? "/" : "") + file))
      if (!best || *v < *best) best = v;
    if (path.empty() || path == "/") break;
    const size_t cut = path.find_last_of('/');
    path = cut == std::string::npos || cut == 0 ? "/" : path.substr(0, cut);
  }
  return best;
}

std::optional<uint64_t> cgroupMemoryLimit(const std::string& root, uint64_t mem_total) {
  // /proc/self/cgroup lines: "0::/path" (v2) or "N:memory:/path" (v1, controllers listed).
  std::ifstream f(root + "/proc/self/cgroup");
  std::string line;
  std::optional<uint64_t> lim;
  while (std::getline(f, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path.empty() || path[0] != '/' || path.find("..") != std::string::npos) continue;
    std::optional<uint64_t> v;
    if (ctl.empty())
      v = smallestUp(root + "/sys/fs/cgroup", path, "memory.max");
    else if (("," + ctl + ",").find(",memory,") != std::string::npos)
      v = smallestUp(root + "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes");
    if (v && *v > 0 && (!lim || *v < *lim)) lim = v;
  }
  if (!lim || (mem_total > 0 && *lim >= mem_total)) return std::nullopt;
  return lim;
}

OverloadLimits defaultHeapLimits() {
  OverloadLimits out;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const uint64_t total = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
  auto lim = cgroupMemoryLimit("", total);
  if (!lim) return out;
  // What the process holds outside the heap already (code, libraries, stacks): resident now.
  uint64_t size = 0, resident = 0;
  if (std::ifstream statm("/proc/self/statm"); !(statm >> size >> resident)) resident = 0;
  const uint64_t held = resident * static_cast<uint64_t>(page > 0 ? page : 4096);
  out.limit = defaultHeapBound(*lim, held);
  out.budget = defaultHeapBudget(*lim, held);
  return out;
}

uint64_t defaultHeapBudget(uint64_t cgroup_limit, uint64_t resident) {
  const uint64_t bound = defaultHeapBound(cgroup_limit, resident);
  if (cgroup_limit <= resident) return bound;
  return std::max<uint64_t>((cgroup_limit - resident) / 20 * 17, bound);
}

uint64_t defaultHeapBound(uint64_t cgroup_limit, uint64_t resident) {
  if (cgroup_limit <= resident) return 16ULL << 20;  // (the smallest bound serve accepts)
  return std::max<uint64_t>((cgroup_limit - resident) / 10 * 7, 16ULL << 20);
}

uint64_t heapInUse() {
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

OverloadMonitor::OverloadMonitor(OverloadLimits limits, Out& out, std::chrono::milliseconds period,
                                 Probes probes)
    : limits_(limits), out_(out), period_(period), probes_(std::move(probes)) {
  if (!probes_.sample) probes_.sample = heapInUse;
  out_.limit.store(limits_.limit, std::memory_order_relaxed);
  out_.budget.store(limits_.budget, std::memory_order_relaxed);
}

OverloadMonitor::~OverloadMonitor() { stop(); }

void OverloadMonitor::tick() {
  const uint64_t heap = probes_.sample();
  const uint64_t index = probes_.exempt ? probes_.exempt() : 0;
  const uint64_t used = heap > index ? heap - index : 0;
  out_.heap.store(used, std::memory_order_relaxed);
  const auto cur = static_cast<Overload>(out_.level.load(std::memory_order_relaxed));
  out_.total.store(heap, std::memory_order_relaxed);
  Overload next = nextOverloadAt(cur, overloadPressure(heap, index, limits_), limits_);
  if (next != Overload::kNormal && probes_.idle && probes_.idle()) {
    const auto now = std::chrono::steady_clock::now();
    // Not the requests' memory: at most shed (a fast 503, the connection closed), never pause,
    // or connections would wait in the backlog until their clients gave up.
    if (++idle_over_ >= kIdleOverSamples && next == Overload::kPause) next = Overload::kShed;
    if (idle_over_ >= kIdleOverSamples &&
        (!idle_logged_once_ || now - idle_logged_ >= std::chrono::minutes(1))) {
      idle_logged_once_ = true;
      idle_logged_ = now;
      log::error("overload", "heap " + std::to_string(heap >> 20) + " MiB (KV index " +
                                 std::to_string(index >> 20) +
                                 " MiB) is over the bound with no client connection open: the "
                                 "memory is not the requests'; raise the memory limit (or "
                                 "--max-heap-bytes) or lower LOXILB_KV_MAX_BLOCKS");
    }
  } else {
    idle_over_ = 0;
  }
  if (next == cur) return;
  out_.level.store(static_cast<uint8_t>(next), std::memory_order_relaxed);
  const std::string mib = std::to_string(used >> 20) + " MiB of " +
                          std::to_string(limits_.limit >> 20) + " MiB" +
                          (limits_.budget ? ", whole heap " + std::to_string(heap >> 20) +
                                                " MiB of " + std::to_string(limits_.budget >> 20) +
                                                " MiB (the cgroup's room)"
                                          : std::string(" (--max-heap-bytes)"));
  if (next == Overload::kNormal)
    log::info("overload", "heap " + mib + ": serving normally again");
  else if (next == Overload::kShed)
    log::warn("overload", "heap " + mib + ": new requests get 503 gateway_overloaded" +
                              (cur == Overload::kPause ? "; accepting again" : ""));
  else
    log::warn("overload", "heap " + mib + ": not accepting connections, new requests get 503");
}

void OverloadMonitor::start() {
  if ((limits_.limit == 0 && limits_.budget == 0) || thread_.joinable()) return;
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stop_) {
      lk.unlock();
      tick();
      lk.lock();
      cv_.wait_for(lk, period_, [this] { return stop_; });
    }
  });
}

void OverloadMonitor::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kvgate::proxy
