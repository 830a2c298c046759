// The hold experiment's queue (hold_queue.h states the algorithm and its knobs).
#include "bench/fleet/hold_queue.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace kvgate::bench::fleet {

HoldQueue::HoldQueue(size_t workers, size_t block_size, Order order, uint64_t cap_tokens,
                     std::chrono::milliseconds spill)
    : mem_(workers),
      queued_(workers, 0),
      generation_(workers, 1),
      bs_(block_size),
      order_(order),
      cap_tokens_(cap_tokens),
      spill_(spill) {}

// (a value that is not a positive integer falls back to the default: a cap of 0 would hold every
// request for good)
uint64_t HoldQueue::capFromEnv() {
  const char* v = std::getenv("KVGATE_HOLD_CAP_TOKENS");
  char* end = nullptr;
  const unsigned long long x = v && *v ? std::strtoull(v, &end, 10) : 0;
  return x > 0 && end && *end == 0 ? x : 8192;
}

std::chrono::milliseconds HoldQueue::spillFromEnv() {
  const char* v = std::getenv("KVGATE_HOLD_SPILL_MS");
  char* end = nullptr;
  const long long x = v && *v ? std::strtoll(v, &end, 10) : -1;
  return std::chrono::milliseconds(x >= 0 && end && *end == 0 ? x : 200);
}

void HoldQueue::add(Item& it, Clock::time_point now) {
  it.arrived = now;
  it.worker = SIZE_MAX;
  waiting_.push_back(&it);
  pump(now);
}

void HoldQueue::started(size_t w, uint32_t uncached, Clock::time_point now) {
  queued_[w] -= std::min<uint64_t>(queued_[w], uncached);
  pump(now);
}

bool HoldQueue::anyRoom() const {
  for (size_t w = 0; w < queued_.size(); ++w)
    if (room(w)) return true;
  return false;
}

uint32_t HoldQueue::overlapOf(Item& it, size_t w, Clock::time_point now) {
  if (it.seen.size() != queued_.size()) {
    it.seen.assign(queued_.size(), 0);
    it.overlap.assign(queued_.size(), 0);
  }
  if (it.seen[w] != generation_[w]) {
    it.overlap[w] = mem_.leading(w, it.chain, now);
    it.seen[w] = generation_[w];
  }
  return it.overlap[w];
}

size_t HoldQueue::leastQueued() const {
  size_t best = SIZE_MAX;
  for (size_t w = 0; w < queued_.size(); ++w)
    if (room(w) && (best == SIZE_MAX || queued_[w] < queued_[best])) best = w;
  return best;
}

void HoldQueue::bind(Item& it, size_t w, Clock::time_point now) {
  it.worker = w;
  it.uncached = static_cast<uint32_t>(it.chain.size() -
                                      std::min<size_t>(overlapOf(it, w, now), it.chain.size()));
  queued_[w] += it.uncached;
  mem_.remember(w, it.chain, now, std::chrono::seconds(600));
  ++generation_[w];
  ++counts_.bound;
  if (now - it.arrived > std::chrono::milliseconds(1)) ++counts_.waited;
}

void HoldQueue::pump(Clock::time_point now) {
  std::vector<Item*> q = waiting_;
  if (order_ == Order::kFewestUncached) {
    std::vector<std::pair<size_t, Item*>> keyed;
    keyed.reserve(q.size());
    for (Item* it : q) {
      uint32_t best = 0;
      for (size_t w = 0; w < queued_.size(); ++w) best = std::max(best, overlapOf(*it, w, now));
      keyed.emplace_back(it->chain.size() - std::min<size_t>(best, it->chain.size()), it);
    }
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = 0; k < q.size(); ++k) q[k] = keyed[k].second;
  }
  std::vector<Item*> bound;
  for (Item* it : q) {
    if (!anyRoom()) break;
    size_t holder = SIZE_MAX;
    uint32_t most = 0;
    for (size_t w = 0; w < queued_.size(); ++w) {
      const uint32_t o = overlapOf(*it, w, now);
      if (o > most || (o > 0 && o == most && queued_[w] < queued_[holder])) {
        most = o;
        holder = w;
      }
    }
    size_t w = SIZE_MAX;
    if (holder == SIZE_MAX) {
      w = leastQueued();
      if (w != SIZE_MAX) ++counts_.cold;
    } else if (room(holder)) {
      w = holder;
    } else if (now - it->arrived >= spill_) {
      w = leastQueued();
      if (w != SIZE_MAX) ++counts_.spills;
    }
    if (w == SIZE_MAX) continue;
    bind(*it, w, now);
    bound.push_back(it);
  }
  std::erase_if(waiting_, [](Item* it) { return it->worker != SIZE_MAX; });
  // Callbacks last: one may add or start a request (re-entering pump) once this pass is done.
  for (Item* it : bound)
    if (it->on_bound) std::exchange(it->on_bound, nullptr)();
}

}  // namespace kvgate::bench::fleet
