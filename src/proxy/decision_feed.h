// DecisionFeed: the last routing decisions, for the live dashboard's feed (/ui, the management
// API's /kvgate/v1/ui/stream). Workers append one record per answered request, and only while
// a dashboard is open (active(): an atomic read otherwise), with a try-lock: a worker never
// waits, a record that meets the lock held is dropped (dropped()). The control thread reads what
// came after its cursor. Bounded: kCapacity records kept, older ones dropped; every string cut to
// kMaxField bytes (model names are the client's). The mutex is held for a copy, never for I/O.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::proxy {

struct DecisionRecord {
  uint64_t seq = 0;
  int64_t unix_ms = 0;
  std::string request_id, rule, model, endpoint, prefill, tier, key;
  int status = 0;
  bool spilled = false;
  int32_t matched = -1;  // Tier 1.5's pick: leading prompt blocks held there (-1: another stage)
  double ttfb_ms = -1;  // first byte to the client (-1: none)
};

class DecisionFeed {
 public:
  static constexpr size_t kCapacity = 256;
  static constexpr size_t kMaxField = 128;

  bool active() const { return viewers_.load(std::memory_order_relaxed) > 0; }
  void addViewer() { viewers_.fetch_add(1, std::memory_order_relaxed); }
  void removeViewer() { viewers_.fetch_sub(1, std::memory_order_relaxed); }
  int viewers() const { return viewers_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  static std::string cut(std::string_view s) {
    return std::string(s.substr(0, kMaxField));
  }
  void push(DecisionRecord r) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    r.seq = ++seq_;
    ring_.push_back(std::move(r));
    if (ring_.size() > kCapacity) ring_.pop_front();
  }
  // The records after `cursor` (oldest first); `cursor` moves to the newest.
  std::vector<DecisionRecord> since(uint64_t& cursor) {
    std::vector<DecisionRecord> out;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& r : ring_)
      if (r.seq > cursor) out.push_back(r);
    if (!ring_.empty()) cursor = std::max(cursor, ring_.back().seq);
    return out;
  }
  // The newest sequence number (a new viewer starts from the records already kept).
  uint64_t newest() {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }

 private:
  std::atomic<int> viewers_{0};
  std::atomic<uint64_t> dropped_{0};  // records a worker dropped rather than wait for the lock
  std::mutex mu_;
  std::deque<DecisionRecord> ring_;
  uint64_t seq_ = 0;
};

}  // namespace kvgate::proxy
