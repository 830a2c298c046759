// Endpoint health: active probe result, passive failure detection, and the circuit breaker.
//
// All state is atomics on the shared EndpointState (one per ip:port, shared by every rule that
// uses the endpoint), so a change is seen by every worker and selector at once.
//
// Breaker (rules with cb_enable): CLOSED -> OPEN after `cb_failures` consecutive connect
// failures (default 5) or `origin_5xx` consecutive 5xx answers (LLB_PD_ORIGIN_ERR_THRESHOLD,
// default 3, 0 disables; a 4xx neither advances nor resets that streak); OPEN excludes the
// endpoint for `cb_open` (default 30 s); then HALF_OPEN lets exactly one trial request through:
// success closes the breaker, failure opens it again.
// Passive detection (every rule): `passive_failures` consecutive connect failures (default 3)
// mark the endpoint down for `passive_hold` (default 5 s) or until an active probe passes.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/clock.h"

namespace kvgate::endpoints {

struct HealthOptions {
  int cb_failures = 5;
  int origin_5xx = 3;
  std::chrono::milliseconds cb_open{30000};
  int passive_failures = 3;
  std::chrono::milliseconds passive_hold{5000};
};

enum class BreakerState : int { kClosed = 0, kOpen = 1, kHalfOpen = 2 };

class Health {
 public:
  // Time for the hold and open windows comes from `clock` (tests pass a ManualClock).
  explicit Health(const common::Clock& clock) : clock_(clock) {}

  // May a request be sent to this endpoint now? `breaker` applies the circuit breaker (the
  // rule's cb_enable). A half-open endpoint admits one trial: `trial` is set when this call took
  // it.
  bool admits(bool breaker, bool& trial);
  void onConnectFailure(const HealthOptions& o, bool breaker);
  // The upstream answered with `status` (after a trial, too).
  void onResponse(const HealthOptions& o, bool breaker, int status, bool trial);
  void onTrialAbandoned() { trial_in_flight_.store(false); }
  void setProbeUp(bool up);
  bool probeUp() const { return probe_up_.load(std::memory_order_relaxed); }
  bool up() const;  // probe up and not passively marked down
  BreakerState breaker() const;
  uint64_t transitions(BreakerState to) const {
    return transitions_[static_cast<int>(to)].load(std::memory_order_relaxed);
  }

 private:
  int64_t nowNs() const { return clock_.nowNs(); }
  const common::Clock& clock_;
  void open(const HealthOptions& o);
  void close();
  std::atomic<bool> probe_up_{true};
  std::atomic<int64_t> passive_down_until_ns_{0};
  std::atomic<int> connect_failures_{0};
  std::atomic<int> origin_5xx_streak_{0};
  std::atomic<int> state_{0};  // BreakerState
  std::atomic<int64_t> open_until_ns_{0};
  std::atomic<bool> trial_in_flight_{false};
  std::atomic<uint64_t> transitions_[3] = {};
};

}  // namespace kvgate::endpoints
