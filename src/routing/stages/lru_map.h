// ShardedLru: a bounded map from 64-bit keys to values, shared by the data-plane threads.
//
// 16 shards, each a mutex over an LRU list and a hash map, held for one map operation only
// (never across I/O). Each shard holds at most max_entries / 16 entries; putting one more drops
// the shard's least recently put. Keys are hashes: the shard is chosen by their top bits.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace kvgate::routing {

template <class V>
class ShardedLru {
 public:
  explicit ShardedLru(size_t max_entries)
      : per_shard_(std::max<size_t>(1, max_entries / kShards)) {}

  std::optional<V> get(uint64_t key) const {
    const Shard& s = shard(key);
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end()) return std::nullopt;
    return it->second->second;
  }
  // Sets `key` to `v`, most recently used; true when an old entry was dropped to make room.
  bool put(uint64_t key, const V& v) {
    Shard& s = shard(key);
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.map.find(key);
    if (it != s.map.end()) {
      it->second->second = v;
      s.lru.splice(s.lru.begin(), s.lru, it->second);
      return false;
    }
    bool dropped = false;
    if (s.map.size() >= per_shard_) {
      s.map.erase(s.lru.back().first);
      s.lru.pop_back();
      dropped = true;
    }
    s.lru.emplace_front(key, v);
    s.map.emplace(key, s.lru.begin());
    return dropped;
  }
  // Erases `key` when `pred(value)` holds (always, by default); true when erased.
  template <class Pred>
  bool eraseIf(uint64_t key, Pred pred) {
    Shard& s = shard(key);
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.map.find(key);
    if (it == s.map.end() || !pred(it->second->second)) return false;
    s.lru.erase(it->second);
    s.map.erase(it);
    return true;
  }
  bool erase(uint64_t key) {
    return eraseIf(key, [](const V&) { return true; });
  }
  size_t size() const {
    size_t n = 0;
    for (const auto& s : shards_) {
      std::lock_guard<std::mutex> g(s.mu);
      n += s.map.size();
    }
    return n;
  }
  size_t capacity() const { return per_shard_ * kShards; }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::mutex mu;
    std::list<std::pair<uint64_t, V>> lru;  // front = most recently put
    std::unordered_map<uint64_t, typename std::list<std::pair<uint64_t, V>>::iterator> map;
  };
  Shard& shard(uint64_t key) { return shards_[(key >> 60) % kShards]; }
  const Shard& shard(uint64_t key) const { return shards_[(key >> 60) % kShards]; }
  const size_t per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace kvgate::routing
