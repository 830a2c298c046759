#include "proxy/loop_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "common/log.h"
#include "proxy/worker.h"

namespace kvgate::proxy {
namespace {

bool parseU64(std::string_view& s, uint64_t& out) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), out);
  if (ec != std::errc() || p == s.data() + i) return false;
  s.remove_prefix(static_cast<size_t>(p - s.data()));
  return true;
}

// A file of /proc kept open and read again from offset 0 (each read regenerates it).
class ProcFile {
 public:
  explicit ProcFile(const char* path) : fd_(::open(path, O_RDONLY | O_CLOEXEC)) {}
  ~ProcFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;
  // The file's first bytes (up to the buffer's size), or empty when unreadable.
  std::string_view read() {
    if (fd_ < 0) return {};
    const ssize_t n = ::pread(fd_, buf_.data(), buf_.size(), 0);
    return n > 0 ? std::string_view(buf_.data(), static_cast<size_t>(n)) : std::string_view();
  }

 private:
  int fd_;
  std::array<char, 2048> buf_{};  // /proc/stat's cpu lines come first; the rest is not needed
};

// The machine's stolen ticks, read from /proc/stat by one worker's probe at a time (at most
// every 50 ms) and shared: the kernel builds the whole file (every CPU's and IRQ's line) for a
// read, so N workers do not each read it every tick.
struct SharedSteal {
  std::mutex mu;  // (held across the read only by the worker that won the turn: try_lock)
  ProcFile file{"/proc/stat"};
  std::atomic<uint64_t> ticks{0};
  std::atomic<bool> known{false};
  std::atomic<int64_t> read_at_ns{0};
};
SharedSteal& sharedSteal() {
  static SharedSteal s;
  return s;
}
std::optional<uint64_t> stolenTicks() {
  SharedSteal& s = sharedSteal();
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (now - s.read_at_ns.load(std::memory_order_relaxed) >= 50'000'000 && s.mu.try_lock()) {
    std::lock_guard lk(s.mu, std::adopt_lock);
    if (auto st = parseProcStatSteal(s.file.read())) {
      s.ticks.store(st->ticks, std::memory_order_relaxed);
      s.known.store(true, std::memory_order_release);
    }
    s.read_at_ns.store(now, std::memory_order_relaxed);
  }
  if (!s.known.load(std::memory_order_acquire)) return std::nullopt;
  return s.ticks.load(std::memory_order_relaxed);
}

}  // namespace

StallCause classifyStall(const LoopInterval& iv) {
  if (!iv.known) return StallCause::kUnknown;
  const double half = iv.lag / 2;
  if (iv.steal >= half) return StallCause::kSteal;
  if (iv.cpu_wait >= half) return StallCause::kCpuWait;
  // Asleep while the timer was due: the time neither on a CPU nor waiting for one, less the
  // 100 ms the loop may have idled in epoll before it (a lower bound of the blocked time).
  const double asleep = iv.interval - iv.on_cpu - iv.cpu_wait;
  if (asleep - kProbePeriodSeconds >= half || iv.on_cpu + iv.cpu_wait < half)
    return StallCause::kBlocked;
  return StallCause::kBusy;
}

std::optional<ThreadSched> parseSchedstat(std::string_view text) {
  ThreadSched t;
  if (!parseU64(text, t.on_cpu_ns) || !parseU64(text, t.wait_ns)) return std::nullopt;
  return t;
}

std::optional<StealTicks> parseProcStatSteal(std::string_view text) {
  if (!text.starts_with("cpu ")) return std::nullopt;
  text.remove_prefix(4);
  StealTicks out;
  // user nice system idle iowait irq softirq steal
  for (int field = 0; field < 8; ++field) {
    uint64_t v = 0;
    if (!parseU64(text, v)) return std::nullopt;
    if (field == 7) out.ticks = v;
  }
  for (size_t at = text.find("\ncpu"); at != std::string_view::npos;
       at = text.find("\ncpu", at + 4))
    if (at + 4 < text.size() && text[at + 4] >= '0' && text[at + 4] <= '9') ++out.cpus;
  if (out.cpus == 0) return std::nullopt;
  return out;
}

asio::awaitable<void> loopLagProbe(Worker& w, size_t index) {
  // A timer due every 100 ms; the time between when it was due and when this coroutine runs is
  // what any handler queued then waited for the loop.
  ProcFile sched("/proc/thread-self/schedstat");
  static const double kTick = [] {
    const long hz = ::sysconf(_SC_CLK_TCK);
    return 1.0 / static_cast<double>(hz > 0 ? hz : 100);
  }();
  static const double kCpus = [] {
    const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return static_cast<double>(n > 0 ? n : 1);
  }();
  std::optional<ThreadSched> last_sched = parseSchedstat(sched.read());
  std::optional<uint64_t> last_steal = stolenTicks();
  std::chrono::steady_clock::time_point last_warned{};
  asio::steady_timer t(w.io);
  while (!w.draining) {
    const auto due = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    t.expires_at(due);
    error_code ec;
    co_await t.async_wait(useEc(ec));
    if (ec) break;
    const auto now = std::chrono::steady_clock::now();
    LoopInterval iv;
    iv.lag = std::chrono::duration<double>(now - due).count();
    iv.interval = kProbePeriodSeconds + iv.lag;
    w.loop_lag.observe(iv.lag);
    const auto s = parseSchedstat(sched.read());
    if (s && last_sched && s->on_cpu_ns >= last_sched->on_cpu_ns &&
        s->wait_ns >= last_sched->wait_ns) {
      const uint64_t run = s->on_cpu_ns - last_sched->on_cpu_ns;
      const uint64_t wait = s->wait_ns - last_sched->wait_ns;
      w.loop_stats.cpu_ns.fetch_add(run, std::memory_order_relaxed);
      w.loop_stats.cpu_wait_ns.fetch_add(wait, std::memory_order_relaxed);
      iv.on_cpu = static_cast<double>(run) * 1e-9;
      iv.cpu_wait = static_cast<double>(wait) * 1e-9;
    } else {
      iv.known = false;
    }
    last_sched = s;
    const auto st = stolenTicks();
    if (st && last_steal && *st >= *last_steal)
      iv.steal = static_cast<double>(*st - *last_steal) * kTick / kCpus;
    last_steal = st;
    if (iv.lag >= kStallSeconds) {
      const StallCause cause = classifyStall(iv);
      w.loop_stats.stalls[static_cast<size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
      if (now - last_warned >= std::chrono::seconds(1)) {
        last_warned = now;
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "worker %zu event loop ran %.1f ms late (%s): in the last %.0f ms the thread "
                      "was on a CPU %.1f ms, waited for one %.1f ms; stolen per CPU %.1f ms",
                      index, iv.lag * 1e3, kStallCauseNames[static_cast<size_t>(cause)].data(),
                      (0.1 + iv.lag) * 1e3, iv.on_cpu * 1e3, iv.cpu_wait * 1e3, iv.steal * 1e3);
        log::warn("proxy", msg);
      }
    }
  }
}

}  // namespace kvgate::proxy
