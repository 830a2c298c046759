// EndpointLease: one request's hold on an endpoint, from the moment it is picked.
//
// Taking the lease counts the request in the endpoint's in-flight gauge (so a burst does not
// herd onto one endpoint while its connections are still being opened); a half-open breaker's
// trial travels with it. Whatever path the request takes (success, upstream error, timeout,
// client disconnect, exception), the destructor gives the count back and releases an unsettled
// trial, so no path can leak either. The prompt's KV blocks (addBlocks) travel the same way.
#pragma once
#include "endpoints/endpoint.h"

namespace kvgate::endpoints {

class EndpointLease {
 public:
  EndpointLease() = default;
  EndpointLease(EndpointState& s, bool trial) : s_(&s), trial_(trial) {
    s.active.fetch_add(1, std::memory_order_relaxed);
  }
  EndpointLease(EndpointLease&& o) noexcept : s_(o.s_), trial_(o.trial_), blocks_(o.blocks_) {
    o.s_ = nullptr;
    o.blocks_ = 0;
  }
  EndpointLease& operator=(EndpointLease&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = o.s_;
      trial_ = o.trial_;
      blocks_ = o.blocks_;
      o.s_ = nullptr;
      o.blocks_ = 0;
    }
    return *this;
  }
  // Counts the request's prompt blocks in the endpoint's active blocks until the lease ends.
  void addBlocks(uint32_t n) {
    if (!s_ || n == 0) return;
    s_->active_blocks.fetch_add(n, std::memory_order_relaxed);
    blocks_ += n;
  }
  EndpointLease(const EndpointLease&) = delete;
  EndpointLease& operator=(const EndpointLease&) = delete;
  ~EndpointLease() { reset(); }

  // The upstream answered with `status` (or the gateway judged it: 502, 504): the breaker and
  // passive detection learn it, and a trial is settled by it.
  void settle(const HealthOptions& o, bool breaker, int status) {
    if (!s_) return;
    s_->health.onResponse(o, breaker, status, trial_);
    trial_ = false;
  }
  // The connection could not be opened.
  void connectFailed(const HealthOptions& o, bool breaker) {
    if (!s_) return;
    s_->connect_failures.fetch_add(1, std::memory_order_relaxed);
    s_->health.onConnectFailure(o, breaker);
    if (trial_) s_->health.onTrialAbandoned();  // (a half-open failure re-opened it already)
    trial_ = false;
  }
  // Gives the count back; an unsettled trial is released for the next request to take.
  void reset() {
    if (!s_) return;
    s_->active.fetch_sub(1, std::memory_order_relaxed);
    if (blocks_) s_->active_blocks.fetch_sub(blocks_, std::memory_order_relaxed);
    if (trial_) s_->health.onTrialAbandoned();
    s_ = nullptr;
    trial_ = false;
    blocks_ = 0;
  }

 private:
  EndpointState* s_ = nullptr;
  bool trial_ = false;
  uint32_t blocks_ = 0;
};

}  // namespace kvgate::endpoints
