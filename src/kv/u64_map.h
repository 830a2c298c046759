// A flat hash map from 64-bit keys to 64-bit values for one thread (the KV index's writer side):
// open addressing, linear probing, deletion by backward shift (no tombstones), power-of-two
// capacity kept between 1/8 and 1/2 full. Key 0 is stored beside the table.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace kvgate::kv {

class U64Map {
 public:
  size_t size() const { return size_ + (has_zero_ ? 1 : 0); }
  bool empty() const { return size() == 0; }
  // Bytes held by the table (for the index's memory metric).
  size_t bytes() const { return cap_ * sizeof(Entry); }

  bool contains(uint64_t k) const { return const_cast<U64Map*>(this)->find(k) != nullptr; }
  uint64_t valueOr(uint64_t k, uint64_t dflt) const {
    const uint64_t* v = const_cast<U64Map*>(this)->find(k);
    return v ? *v : dflt;
  }
  uint64_t* find(uint64_t k) {
    if (k == 0) return has_zero_ ? &zero_value_ : nullptr;
    if (cap_ == 0) return nullptr;
    for (size_t i = slot(k);; i = (i + 1) & (cap_ - 1)) {
      if (e_[i].key == k) return &e_[i].value;
      if (e_[i].key == 0) return nullptr;
    }
  }
  // Starts loading k's home slot into the cache (a chain walk prefetches a few blocks ahead).
  void prefetch(uint64_t k) const {
    if (cap_ != 0) __builtin_prefetch(&e_[slot(k)]);
  }
  // Inserts k with value v when absent; returns the value slot and whether it was inserted.
  std::pair<uint64_t*, bool> insert(uint64_t k, uint64_t v) {
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
  template <typename F>
  void forEach(F f) const {
    if (has_zero_) f(uint64_t{0}, zero_value_);
    for (size_t i = 0; i < cap_; ++i)
      if (e_[i].key != 0) f(e_[i].key, e_[i].value);
  }

 private:
  struct Entry {
    uint64_t key = 0;
    uint64_t value = 0;
  };
  size_t slot(uint64_t k) const {
    k ^= k >> 33;  // keys are hashes already; mix the high bits down anyway
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k) & (cap_ - 1);
  }
  void grow() { rehash(cap_ == 0 ? 16 : cap_ * 2); }
  void rehash(size_t cap) {
    std::unique_ptr<Entry[]> old = std::move(e_);
    size_t old_cap = cap_;
    e_.reset(new Entry[cap]);
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
  std::unique_ptr<Entry[]> e_;
  size_t cap_ = 0, size_ = 0;
  bool has_zero_ = false;
  uint64_t zero_value_ = 0;
};

}  // namespace kvgate::kv
