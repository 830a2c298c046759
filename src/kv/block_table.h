// Fingerprint -> worker bitmask, written by one thread and read by many without locks.
//
// Open addressing with linear probing over slots of two atomics (key, mask). A key, once written
// into a slot, never changes: removals clear mask bits and leave the key (a "dead" slot while its
// mask is 0, revived if the block comes back). Readers load the key with acquire and then the
// mask, so they see either the old or the new mask of the right block, never another block's.
// The writer rebuilds into a fresh table when too many slots are used or dead; readers keep the
// table they loaded (KvIndex publishes tables through an atomic shared_ptr).
//
// Hash flooding (kv/table_key.h): slots come from a keyed mix with the process's secret, and no
// probe goes past kMaxProbe slots from a key's home: a key that would have to is not stored
// (setBits answers kProbeLimit; the block is then simply not routed to) and lookups stop there.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/prefetch.h"
#include "kv/table_key.h"

namespace kvgate::kv {

class BlockTable {
 public:
  static constexpr size_t kMaxProbe = 128;  // slots a probe may visit from a key's home
  // `capacity` is rounded up to a power of two (at least 64); `key`: the slot function's secret
  // (the process's, tableKey(), unless a test sets one).
  explicit BlockTable(size_t capacity, const TableKey& key = tableKey());

  // Reader side: the workers holding fingerprint `fp` (0 when none).
  uint64_t lookup(uint64_t fp) const {
    const uint64_t k = fp == 0 ? 1 : fp;  // 0 marks an empty slot
    size_t i = slot(k);
    for (size_t n = 0; n < kMaxProbe; ++n, i = (i + 1) & (cap_ - 1)) {
      const uint64_t sk = slots_[i].key.load(std::memory_order_acquire);
      if (sk == k) return slots_[i].mask.load(std::memory_order_acquire);
      if (sk == 0) return 0;
    }
    return 0;
  }

  // Starts loading the slot where `fp` would be (the scorer prefetches the chain ahead: lookups
  // of one chain are independent, so cache misses overlap instead of adding up).
  void prefetch(uint64_t fp) const { common::prefetchRead(&slots_[slot(fp == 0 ? 1 : fp)]); }

  // Writer side. kFull: the table is too full to take a new key (rebuild first); kProbeLimit:
  // the key's probe would pass kMaxProbe (not stored; a bigger table rarely helps an attack).
  enum class Set : uint8_t { kOk, kFull, kProbeLimit };
  Set setBits(uint64_t fp, uint64_t bits);
  void clearBits(uint64_t fp, uint64_t bits);
  size_t capacity() const { return cap_; }
  size_t used() const { return used_; }  // slots holding a key
  size_t dead() const { return dead_; }  // of those, slots whose mask is 0
  size_t longestProbe() const { return longest_probe_; }  // slots the longest insert walked
  size_t slotOf(uint64_t fp) const { return slot(fp == 0 ? 1 : fp); }  // a key's home (tests)
  size_t bytes() const { return cap_ * sizeof(Slot); }
  bool needsRebuild() const { return used_ * 10 > cap_ * 7 || (dead_ > 4096 && dead_ * 2 > used_); }
  // A new table holding this one's live entries, sized for them with room to grow; `dropped`
  // (when given) counts live entries the new table refused (the probe bound).
  std::unique_ptr<BlockTable> rebuilt(size_t extra = 0, size_t* dropped = nullptr) const;

 private:
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> mask{0};
  };
  size_t slot(uint64_t k) const { return static_cast<size_t>(keyedMix(k, key_)) & (cap_ - 1); }
  struct Free {
    size_t bytes;
    void operator()(Slot* p) const;
  };
  std::unique_ptr<Slot[], Free> slots_;
  size_t cap_;
  TableKey key_;
  size_t used_ = 0;
  size_t dead_ = 0;
  size_t longest_probe_ = 0;
};

}  // namespace kvgate::kv
