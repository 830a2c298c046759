// Injectable time source for every time-dependent rule (health holds, breaker windows, TTLs).
//
// Production code uses SteadyClock (monotonic); unit tests construct a ManualClock and move it by
// hand, so no test depends on the wall clock. A component receives the clock it must use at
// construction (never a process-global), and keeps a reference: the clock outlives it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace kvgate::common {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds from an arbitrary origin.
  virtual int64_t nowNs() const = 0;
};

class SteadyClock final : public Clock {
 public:
  int64_t nowNs() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // The process's steady clock (stateless, so sharing one instance is safe).
  static const SteadyClock& instance() {
    static const SteadyClock c;
    return c;
  }
};

// A clock that moves only when told (tests). Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  int64_t nowNs() const override { return now_.load(std::memory_order_relaxed); }
  void set(int64_t ns) { now_.store(ns, std::memory_order_relaxed); }
  void advance(std::chrono::nanoseconds d) { now_.fetch_add(d.count(), std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace kvgate::common
