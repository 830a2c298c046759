// A flat hash map from 64-bit keys to values for one thread (the KV index's writer side):
// open addressing, linear probing, deletion by backward shift (no tombstones), power-of-two
// capacity kept between 1/8 and 1/2 full. Key 0 is stored beside the table.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>

#include "common/prefetch.h"
#include "kv/table_key.h"

namespace kvgate::kv {

// V: a trivially copyable value (U64Map: uint64_t; the hint index keeps a small struct inline so
// a lookup costs one cache line).
template <typename V>
class BasicU64Map {
 public:
  size_t size() const { return size_ + (has_zero_ ? 1 : 0); }
  bool empty() const { return size() == 0; }
  // Bytes held by the table (for the index's memory metric).
  size_t bytes() const { return cap_ * sizeof(Entry); }

  bool contains(uint64_t k) const { return const_cast<BasicU64Map*>(this)->find(k) != nullptr; }
  V valueOr(uint64_t k, V dflt) const {
    const V* v = const_cast<BasicU64Map*>(this)->find(k);
    return v ? *v : dflt;
  }
  V* find(uint64_t k) {
    if (k == 0) return has_zero_ ? &zero_value_ : nullptr;
    if (cap_ == 0) return nullptr;
    for (size_t i = slot(k);; i = (i + 1) & (cap_ - 1)) {
      if (e_[i].key == k) return &e_[i].value;
      if (e_[i].key == 0) return nullptr;
    }
  }
  // Starts loading k's home slot into the cache (a chain walk prefetches a few blocks ahead).
  void prefetch(uint64_t k) const {
    if (cap_ == 0) return;
    // (an entry that straddles two cache lines needs both: the key in one, the value in the next)
    const char* p = reinterpret_cast<const char*>(&e_[slot(k)]);
    common::prefetchRead(p);
    if ((reinterpret_cast<uintptr_t>(p) & 63) + sizeof(Entry) > 64) common::prefetchRead(p + sizeof(Entry) - 1);
  }
  // Inserts k with value v when absent; returns the value slot and whether it was inserted.
  std::pair<V*, bool> insert(uint64_t k, V v) {
    if (k == 0) {
      if (has_zero_) return {&zero_value_, false};
      has_zero_ = true;
      zero_value_ = v;
      return {&zero_value_, true};
    }
    if ((size_ + 1) * 2 > cap_) grow();
    for (size_t i = slot(k);; i = (i + 1) & (cap_ - 1)) {
      if (e_[i].key == k) return {&e_[i].value, false};
      if (e_[i].key == 0) {
        e_[i] = Entry{k, v};
        ++size_;
        return {&e_[i].value, true};
      }
    }
  }
  bool erase(uint64_t k) {
    if (k == 0) {
      bool had = has_zero_;
      has_zero_ = false;
      return had;
    }
    if (cap_ == 0) return false;
    size_t i = slot(k);
    while (e_[i].key != k) {
      if (e_[i].key == 0) return false;
      i = (i + 1) & (cap_ - 1);
    }
    // Backward shift: move later entries of the cluster into the hole when their home allows.
    for (size_t j = (i + 1) & (cap_ - 1);; j = (j + 1) & (cap_ - 1)) {
      if (e_[j].key == 0) break;
      size_t home = slot(e_[j].key);
      bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
      if (movable) {
        e_[i] = e_[j];
        i = j;
      }
    }
    e_[i] = Entry{};
    --size_;
    if (cap_ > 64 && size_ * 8 < cap_) rehash(cap_ / 2);
    return true;
  }
  void clear() {
    e_.reset();
    cap_ = size_ = 0;
    has_zero_ = false;
  }
  size_t slotOf(uint64_t k) const { return cap_ ? slot(k) : 0; }  // (tests)
  size_t capacity() const { return cap_; }
  template <typename F>
  void forEach(F f) const {
    if (has_zero_) f(uint64_t{0}, zero_value_);
    for (size_t i = 0; i < cap_; ++i)
      if (e_[i].key != 0) f(e_[i].key, e_[i].value);
  }

 private:
  struct Entry {
    uint64_t key = 0;
    V value{};
  };
  // Keys are hashes, but a client may choose them (the hint index's) or grind them: slots come
  // from the process's secret mix (kv/table_key.h), so colliding keys cannot be chosen.
  size_t slot(uint64_t k) const { return static_cast<size_t>(keyedMix(k, key_)) & (cap_ - 1); }
  void grow() { rehash(cap_ == 0 ? 16 : cap_ * 2); }
  // Tables of 4 MiB and more ask for transparent huge pages: a lookup into a big table is a
  // random access, and on 4 KiB pages each one also misses the TLB (a page walk, costlier still
  // under virtualization).
  struct Free {
    void operator()(Entry* p) const { std::free(p); }
  };
  using Storage = std::unique_ptr<Entry[], Free>;
  static Storage allocate(size_t cap) {
    const size_t bytes = cap * sizeof(Entry);
    constexpr size_t kHuge = size_t(2) << 20;
    void* p = bytes >= (size_t(4) << 20)
                  ? std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge)
                  : std::malloc(bytes);
    if (!p) throw std::bad_alloc();
    if (bytes >= (size_t(4) << 20)) madvise(p, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
    Entry* e = static_cast<Entry*>(p);
    for (size_t i = 0; i < cap; ++i) new (&e[i]) Entry{};
    return Storage(e);
  }
  void rehash(size_t cap) {
    Storage old = std::move(e_);
    size_t old_cap = cap_;
    e_ = allocate(cap);
    cap_ = cap;
    size_ = 0;
    for (size_t i = 0; i < old_cap; ++i)
      if (old[i].key != 0)
        for (size_t j = slot(old[i].key);; j = (j + 1) & (cap_ - 1))
          if (e_[j].key == 0) {
            e_[j] = old[i];
            ++size_;
            break;
          }
  }
  Storage e_;
  TableKey key_ = tableKey();
  size_t cap_ = 0, size_ = 0;
  bool has_zero_ = false;
  V zero_value_{};
};

using U64Map = BasicU64Map<uint64_t>;

}  // namespace kvgate::kv
