// EndpointLease: one request's hold on an endpoint, from the moment it is picked.
//
// Taking the lease counts the request in the endpoint's in-flight gauge (so a burst does not
// herd onto one endpoint while its connections are still being opened); a half-open breaker's
// trial travels with it. Whatever path the request takes (success, upstream error, timeout,
// client disconnect, exception), the destructor gives the count back and releases an unsettled
// trial, so no path can leak either. A request's block chain (addChain) and its queued prefill
// (addPrefill, given back by prefillDone at the first response byte or at the end) travel the
// same way.
#pragma once
#include <algorithm>

#include "endpoints/endpoint.h"

namespace kvgate::endpoints {

class EndpointLease {
 public:
  EndpointLease() = default;
  EndpointLease(EndpointState& s, bool trial) : s_(&s), trial_(trial) {
    s.active.fetch_add(1, std::memory_order_relaxed);
    s.last_pick_ns.store(s.clock.nowNs(), std::memory_order_relaxed);
  }
  // Takes over a slot the admission queue handed to a parked request (already counted).
  struct Adopt {};
  EndpointLease(EndpointState& s, bool trial, Adopt) : s_(&s), trial_(trial) {
    s.last_pick_ns.store(s.clock.nowNs(), std::memory_order_relaxed);
  }
  EndpointLease(EndpointLease&& o) noexcept
      : s_(o.s_),
        trial_(o.trial_),
        prefill_(o.prefill_),
        prefill_tokens_(o.prefill_tokens_),
        ahead_tokens_(o.ahead_tokens_),
        sent_ns_(o.sent_ns_),
        started_(o.started_),
        chain_(std::move(o.chain_)) {
    o.s_ = nullptr;
    o.prefill_ = 0;
    o.started_ = false;
    o.chain_.clear();
  }
  EndpointLease& operator=(EndpointLease&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = o.s_;
      trial_ = o.trial_;
      prefill_ = o.prefill_;
      prefill_tokens_ = o.prefill_tokens_;
      ahead_tokens_ = o.ahead_tokens_;
      sent_ns_ = o.sent_ns_;
      started_ = o.started_;
      chain_ = std::move(o.chain_);
      o.s_ = nullptr;
      o.prefill_ = 0;
      o.started_ = false;
      o.chain_.clear();
    }
    return *this;
  }
  // A half-open breaker's trial travels with this (adopted) lease.
  void takeTrial() { trial_ = s_ != nullptr; }
  // Adds the request's block chain to the endpoint's distinct active blocks until the lease ends.
  void addChain(const std::vector<uint64_t>& chain) {
    if (!s_ || chain.empty() || !chain_.empty()) return;
    chain_ = chain;
    s_->active_set.add(chain_);
  }
  // Counts `blocks` uncached prompt blocks (of `block_tokens` tokens) as prefill queued on the
  // endpoint until prefillDone(); `now_ns` is when the request is sent.
  void addPrefill(uint32_t blocks, uint32_t block_tokens, int64_t now_ns) {
    if (!s_ || blocks == 0 || prefill_ != 0) return;
    prefill_ = blocks;
    prefill_tokens_ = int64_t{blocks} * block_tokens;
    ahead_tokens_ = std::max<int64_t>(
        0, s_->pending_prefill_tokens.fetch_add(prefill_tokens_, std::memory_order_relaxed));
    sent_ns_ = now_ns;
    s_->pending_prefill_blocks.fetch_add(blocks, std::memory_order_relaxed);
  }
  bool prefillPending() const { return prefill_ != 0; }
  // The first response byte arrived at `now_ns` (the engine is past this request's prefill: a
  // sample of its prefill rate, endpoints/prefill_rate.h), or, with -1, the request ended
  // without one (no sample).
  void prefillDone(int64_t now_ns = -1) {
    if (!s_ || prefill_ == 0) return;
    s_->pending_prefill_blocks.fetch_sub(prefill_, std::memory_order_relaxed);
    s_->pending_prefill_tokens.fetch_sub(prefill_tokens_, std::memory_order_relaxed);
    if (now_ns >= 0 && now_ns > sent_ns_)
      s_->prefill_rate.observe(static_cast<double>(ahead_tokens_ + prefill_tokens_),
                               static_cast<double>(now_ns - sent_ns_) / 1e9);
    prefill_ = 0;
  }
  // The answer is an event stream whose first body byte was relayed: counted in the endpoint's
  // started_streams until the lease ends.
  void markStarted() {
    if (!s_ || started_) return;
    started_ = true;
    s_->started_streams.fetch_add(1, std::memory_order_relaxed);
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
  // Gives the count back (or hands the slot to the first request the admission gate parked
  // here); an unsettled trial is released for the next request to take.
  void reset() {
    if (!s_) return;
    // (started and queued prefill first: a reader never sees more of either than in flight)
    if (started_) s_->started_streams.fetch_sub(1, std::memory_order_relaxed);
    started_ = false;
    prefillDone();
    if (s_->queued.load(std::memory_order_relaxed) == 0 || !s_->admission.handOff(s_->queued))
      s_->active.fetch_sub(1, std::memory_order_relaxed);
    if (!chain_.empty()) s_->active_set.remove(chain_);
    chain_.clear();
    if (trial_) s_->health.onTrialAbandoned();
    s_ = nullptr;
    trial_ = false;
  }

 private:
  EndpointState* s_ = nullptr;
  bool trial_ = false;
  uint32_t prefill_ = 0;         // addPrefill's blocks, not yet given back
  int64_t prefill_tokens_ = 0;   // and their tokens
  int64_t ahead_tokens_ = 0;     // queued prefill tokens there when this request was sent
  int64_t sent_ns_ = 0;
  bool started_ = false;         // counted in started_streams (markStarted)
  std::vector<uint64_t> chain_;  // addChain's blocks, removed from the endpoint's set at the end
};

}  // namespace kvgate::endpoints
