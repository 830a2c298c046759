// Fingerprint -> worker bitmask, written by one thread and read by many without locks.
//
// Open addressing with linear probing over slots of two atomics (key, mask). A key, once written
// into a slot, never changes: removals clear mask bits and leave the key (a "dead" slot while its
// mask is 0, revived if the block comes back). Readers load the key with acquire and then the
// mask, so they see either the old or the new mask of the right block, never another block's.
// The writer rebuilds into a fresh table when too many slots are used or dead; readers keep the
// table they loaded (KvIndex publishes tables through an atomic shared_ptr).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/prefetch.h"

namespace kvgate::kv {

class BlockTable {
 public:
  explicit BlockTable(size_t capacity);  // rounded up to a power of two (at least 64)

  // Reader side: the workers holding fingerprint `fp` (0 when none).
  uint64_t lookup(uint64_t fp) const {
    const uint64_t k = fp == 0 ? 1 : fp;  // 0 marks an empty slot
    for (size_t i = slot(k);; i = (i + 1) & (cap_ - 1)) {
      const uint64_t sk = slots_[i].key.load(std::memory_order_acquire);
      if (sk == k) return slots_[i].mask.load(std::memory_order_acquire);
      if (sk == 0) return 0;
    }
  }

  // Starts loading the slot where `fp` would be (the scorer prefetches the chain ahead: lookups
  // of one chain are independent, so cache misses overlap instead of adding up).
  void prefetch(uint64_t fp) const { common::prefetchRead(&slots_[slot(fp == 0 ? 1 : fp)]); }

  // Writer side. setBits is false when the table is too full to take a new key (rebuild first).
  bool setBits(uint64_t fp, uint64_t bits);
  void clearBits(uint64_t fp, uint64_t bits);
  size_t capacity() const { return cap_; }
  size_t used() const { return used_; }  // slots holding a key
  size_t dead() const { return dead_; }  // of those, slots whose mask is 0
  size_t bytes() const { return cap_ * sizeof(Slot); }
  bool needsRebuild() const { return used_ * 10 > cap_ * 7 || (dead_ > 4096 && dead_ * 2 > used_); }
  // A new table holding this one's live entries, sized for them with room to grow.
  std::unique_ptr<BlockTable> rebuilt(size_t extra = 0) const;

 private:
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> mask{0};
  };
  size_t slot(uint64_t k) const {
    k ^= k >> 31;
    k *= 0x9e3779b97f4a7c15ULL;
    k ^= k >> 29;
    return static_cast<size_t>(k) & (cap_ - 1);
  }
  struct Free {
    size_t bytes;
    void operator()(Slot* p) const;
  };
  std::unique_ptr<Slot[], Free> slots_;
  size_t cap_;
  size_t used_ = 0;
  size_t dead_ = 0;
};

}  // namespace kvgate::kv
