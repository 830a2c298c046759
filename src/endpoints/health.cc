#include "endpoints/health.h"

namespace kvgate::endpoints {

bool Health::up() const {
  if (!probe_up_.load(std::memory_order_relaxed)) return false;
  int64_t until = passive_down_until_ns_.load(std::memory_order_relaxed);
  return until == 0 || nowNs() >= until;  // no clock read on the common path
}

BreakerState Health::breaker() const {
  int s = state_.load(std::memory_order_relaxed);
  if (s == static_cast<int>(BreakerState::kClosed)) return BreakerState::kClosed;
  if (s == static_cast<int>(BreakerState::kOpen) &&
      nowNs() >= open_until_ns_.load(std::memory_order_relaxed))
    return BreakerState::kHalfOpen;  // the open window has passed: next request is the trial
  return static_cast<BreakerState>(s);
}

bool Health::admits(bool breaker, bool& trial) {
  trial = false;
  if (!up()) return false;
  if (!breaker) return true;
  BreakerState s = this->breaker();
  if (s == BreakerState::kClosed) return true;
  if (s == BreakerState::kOpen) return false;
  // Half-open: exactly one trial at a time.
  bool expected = false;
  if (!trial_in_flight_.compare_exchange_strong(expected, true)) return false;
  if (state_.load() == static_cast<int>(BreakerState::kOpen)) {
    state_.store(static_cast<int>(BreakerState::kHalfOpen));
    transitions_[static_cast<int>(BreakerState::kHalfOpen)].fetch_add(1);
  }
  trial = true;
  return true;
}

void Health::open(const HealthOptions& o) {
  open_until_ns_.store(nowNs() +
                       std::chrono::duration_cast<std::chrono::nanoseconds>(o.cb_open).count());
  state_.store(static_cast<int>(BreakerState::kOpen));
  transitions_[static_cast<int>(BreakerState::kOpen)].fetch_add(1);
  trial_in_flight_.store(false);
  connect_failures_.store(0);
  origin_5xx_streak_.store(0);
}

void Health::close() {
  if (state_.exchange(static_cast<int>(BreakerState::kClosed)) != 0)
    transitions_[static_cast<int>(BreakerState::kClosed)].fetch_add(1);
  trial_in_flight_.store(false);
}

void Health::onConnectFailure(const HealthOptions& o, bool breaker) {
  int n = connect_failures_.fetch_add(1) + 1;
  if (n >= o.passive_failures)
    passive_down_until_ns_.store(
        nowNs() + std::chrono::duration_cast<std::chrono::nanoseconds>(o.passive_hold).count());
  if (!breaker) return;
  if (state_.load() == static_cast<int>(BreakerState::kHalfOpen) || n >= o.cb_failures) open(o);
}

void Health::onResponse(const HealthOptions& o, bool breaker, int status, bool trial) {
  // Plain loads before stores: the common path (2xx, nothing to reset) writes no shared line.
  if (connect_failures_.load(std::memory_order_relaxed) != 0) connect_failures_.store(0);
  if (status >= 500) {
    int n = origin_5xx_streak_.fetch_add(1) + 1;
    if (breaker && (trial || (o.origin_5xx > 0 && n >= o.origin_5xx)))
      open(o);
    else if (trial)
      trial_in_flight_.store(false);
    return;
  }
  if (status >= 400) {  // a 4xx neither advances nor resets the origin streak
    if (trial && breaker) close();
    return;
  }
  if (origin_5xx_streak_.load(std::memory_order_relaxed) != 0) origin_5xx_streak_.store(0);
  if (breaker && state_.load() != 0) close();
}

void Health::setProbeUp(bool up) {
  probe_up_.store(up);
  if (up) {
    passive_down_until_ns_.store(0);
    connect_failures_.store(0);
  }
}

}  // namespace kvgate::endpoints
