// AdmissionQueue: the FIFO of requests the admission gate parked for one endpoint (seed 000,
// "The admission gate": hold, don't drop), with slot hand-off.
//
// A parked request is a Waiter. When a request holding a slot on the endpoint ends, its
// EndpointLease asks the queue to hand the slot over (handOff): the first waiter still waiting
// is granted the slot, which stays counted in the endpoint's in-flight gauge, so no new arrival
// can take it in between; the waiter's wake callback then tells its thread. A waiter that gives
// up (queue timeout, client gone, drain) moves kWaiting -> kGone; the hand-off moves kWaiting ->
// kGranted; exactly one wins (compare-and-swap), so a slot is never lost nor given twice. A
// granted waiter that finds itself gone must give the slot back through a lease (which hands it
// to the next). A release that read an empty queue just before a request parked leaves a free
// slot no hand-off gives away: parked requests also look for free slots themselves (right after
// parking, then every 250 ms; claim()), on their endpoint or on a sibling nobody waits for.
// The mutex is held for the deque only; wake callbacks run after it is released.
// Shared by every worker thread.
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace kvgate::endpoints {

class AdmissionQueue {
 public:
  struct Waiter {
    enum State : int { kWaiting, kGranted, kGone };
    std::atomic<int> state{kWaiting};
    std::function<void()> wake;  // called (any thread) once the slot is granted
    bool giveUp() {              // true: this waiter is gone; false: it was granted a slot first
      int w = kWaiting;
      return state.compare_exchange_strong(w, kGone);
    }
    // The waiter found a free slot itself (one freed without a hand-off): true when it was still
    // waiting, false when a hand-off granted it first.
    bool claim() {
      int w = kWaiting;
      return state.compare_exchange_strong(w, kGranted);
    }
  };

  // Parks `w` at the back unless `max_depth` waiters wait already. `queued` mirrors the depth.
  bool push(std::shared_ptr<Waiter> w, size_t max_depth, std::atomic<int64_t>& queued) {
    std::lock_guard<std::mutex> g(mu_);
    if (q_.size() >= max_depth) return false;
    q_.push_back(std::move(w));
    queued.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Removes a waiter that gave up.
  void remove(const Waiter* w, std::atomic<int64_t>& queued) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = q_.begin(); it != q_.end(); ++it)
      if (it->get() == w) {
        q_.erase(it);
        queued.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
  }
  // A slot freed: grants it to the first waiter still waiting. True when granted (the caller
  // keeps the slot counted); false when nobody waits (the caller releases it).
  bool handOff(std::atomic<int64_t>& queued) {
    std::shared_ptr<Waiter> granted;
    {
      std::lock_guard<std::mutex> g(mu_);
      while (!q_.empty()) {
        std::shared_ptr<Waiter> w = std::move(q_.front());
        q_.pop_front();
        queued.fetch_sub(1, std::memory_order_relaxed);
        int s = Waiter::kWaiting;
        if (w->state.compare_exchange_strong(s, Waiter::kGranted)) {
          granted = std::move(w);
          break;
        }
      }
    }
    if (!granted) return false;
    if (granted->wake) granted->wake();
    return true;
  }
  size_t depth() const {
    std::lock_guard<std::mutex> g(mu_);
    return q_.size();
  }

 private:
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<Waiter>> q_;
};

}  // namespace kvgate::endpoints
