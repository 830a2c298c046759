// SessionTable: Tier 0's pins, conversation key -> (prefill, decode) endpoint pair, per P/D rule.
//
// A ShardedLru (lru_map.h): shared by the worker threads, a short lock per operation, at most
// `max_entries` pins (the least recently pinned go first). A pin lives `ttl` after it was last
// set (each request of the conversation sets it again, so an active conversation keeps its
// pair). Owned with the rule's counters, so a rule update keeps the pins; a pinned endpoint that
// left the rule fails the session stage's check and the pin is evicted.
#pragma once
#include <cstdint>
#include <optional>

#include "endpoints/endpoint.h"
#include "routing/stages/lru_map.h"

namespace kvgate::routing {

class SessionTable {
 public:
  struct Pin {
    endpoints::EndpointId prefill = 0;
    endpoints::EndpointId decode = 0;
  };
  static constexpr size_t kDefaultMaxEntries = 100'000;
  explicit SessionTable(size_t max_entries = kDefaultMaxEntries) : map_(max_entries) {}

  // The pin of `key` unless it was set more than `ttl_ns` ago (then it is dropped).
  std::optional<Pin> lookup(uint64_t key, int64_t now_ns, int64_t ttl_ns) {
    auto e = map_.get(key);
    if (!e) return std::nullopt;
    if (now_ns - e->last_ns > ttl_ns) {
      map_.eraseIf(key, [&](const Entry& x) { return now_ns - x.last_ns > ttl_ns; });
      return std::nullopt;
    }
    return e->pin;
  }
  void pin(uint64_t key, Pin pin, int64_t now_ns) { map_.put(key, Entry{pin, now_ns}); }
  void evict(uint64_t key) { map_.erase(key); }
  size_t size() const { return map_.size(); }

 private:
  struct Entry {
    Pin pin;
    int64_t last_ns = 0;
  };
  ShardedLru<Entry> map_;
};

}  // namespace kvgate::routing
