// SpeculativeOverlay: blocks credited to the worker a request was just routed to, for a short TTL,
// until that worker's KV events confirm them (issue 10, "speculative insert"). Without it, a burst
// of requests sharing a new prefix races the first BlockStored: every sibling sees no overlap and
// the rule's fallback scatters them over the fleet.
//
// Kept beside the single-writer index (kv_index.h), written by the data-plane threads: a
// direct-mapped table of kCapacity slots {fingerprint, worker + expiry}; a credit overwrites
// whatever shared its slot (lossy by design: a lost credit only costs the hint). Readers check
// the fingerprint before and after reading the value, so a slot being rewritten reads as absent.
// No locks, no allocation after construction (kCapacity x 16 bytes = 1 MiB).
//
// forget(w) drops every credit of worker w at once (its cache was emptied: AllBlocksCleared, a
// restart, its slot freed): each worker has a 16-bit generation stored in its credits, and a
// credit of another generation reads as absent (65,536 clears of one worker within one TTL would
// wrap it). A credit's value: expiry in ms of the routing clock (40 bits, 34 years) << 24 |
// generation << 8 | worker + 1.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvgate::kv {

class SpeculativeOverlay {
 public:
  static constexpr size_t kCapacity = 1 << 16;

  SpeculativeOverlay() : slots_(std::make_unique<Slot[]>(kCapacity)) {}

  // Credits chain[0..n) to index worker `w` (0..63) until `expiry_ns` (the routing clock).
  void credit(const uint64_t* chain, size_t n, int w, int64_t expiry_ns) {
    const uint64_t gen = gen_[static_cast<size_t>(w)].load(std::memory_order_acquire);
    const uint64_t v = (static_cast<uint64_t>(expiry_ns / 1'000'000) << 24) | (gen << 8) |
                       static_cast<uint64_t>(w + 1);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = chain[i] == 0 ? 1 : chain[i];
      Slot& s = slots_[slot(k)];
      s.key.store(0, std::memory_order_relaxed);
      s.val.store(v, std::memory_order_release);
      s.key.store(k, std::memory_order_release);
    }
    credits_.fetch_add(n, std::memory_order_relaxed);
  }

  // Whether `fp` is credited to worker `w` at `now_ns`.
  bool credited(uint64_t fp, int w, int64_t now_ns) const {
    const uint64_t k = fp == 0 ? 1 : fp;
    const Slot& s = slots_[slot(k)];
    if (s.key.load(std::memory_order_acquire) != k) return false;
    const uint64_t v = s.val.load(std::memory_order_acquire);
    if (s.key.load(std::memory_order_acquire) != k) return false;  // rewritten meanwhile
    return (v & 0xff) == static_cast<uint64_t>(w + 1) &&
           ((v >> 8) & 0xffff) == gen_[static_cast<size_t>(w)].load(std::memory_order_acquire) &&
           static_cast<int64_t>(v >> 24) > now_ns / 1'000'000;
  }

  // Drops worker w's credits (0..63). One writer (the event plane's thread).
  void forget(int w) {
    auto& g = gen_[static_cast<size_t>(w)];
    g.store(static_cast<uint16_t>(g.load(std::memory_order_relaxed) + 1),
            std::memory_order_release);
  }

  void countHits(uint64_t blocks) { hits_.fetch_add(blocks, std::memory_order_relaxed); }
  uint64_t credits() const { return credits_.load(std::memory_order_relaxed); }  // blocks
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }        // blocks matched

 private:
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> val{0};
  };
  static size_t slot(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k) & (kCapacity - 1);
  }
  std::unique_ptr<Slot[]> slots_;
  std::array<std::atomic<uint16_t>, 64> gen_{};  // per worker: credits of another are stale
  std::atomic<uint64_t> credits_{0}, hits_{0};
};

}  // namespace kvgate::kv
