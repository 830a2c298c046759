// Two open-addressing hash maps for the encoder's hot path: byte-string -> id (vocabulary) and
// (left id, right id) -> (rank, merged id) (BPE merges). Built once at load, read-only afterwards,
// so lookups from many threads need no locks. Linear probing, load factor <= 0.5.
#pragma once
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::tok {

class FlatStrMap {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Keeps the first value inserted for a key; returns false if the key was present.
  bool insert(std::string_view key, uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    return insertNoGrow(key, value);
  }
  uint32_t find(std::string_view key) const {
    if (slots_.empty()) return kNone;
    uint64_t h = XXH3_64bits(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kNone) return kNone;
      if (s.hash == h && s.len == key.size() &&
          std::memcmp(arena_.data() + s.off, key.data(), s.len) == 0)
        return s.value;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t off = 0, len = 0;
    uint32_t value = kNone;
  };
  bool insertNoGrow(std::string_view key, uint32_t value) {
    uint64_t h = XXH3_64bits(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value == kNone) {
        s.hash = h;
        s.off = static_cast<uint32_t>(arena_.size());
        s.len = static_cast<uint32_t>(key.size());
        s.value = value;
        arena_.append(key);
        ++size_;
        return true;
      }
      if (s.hash == h && s.len == key.size() &&
          std::memcmp(arena_.data() + s.off, key.data(), s.len) == 0)
        return false;
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    std::string arena = std::move(arena_);
    arena_.clear();
    size_ = 0;
    reserve(old.size() < 16 ? 16 : old.size());
    for (const Slot& s : old)
      if (s.value != kNone) insertNoGrow(std::string_view(arena.data() + s.off, s.len), s.value);
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0, size_ = 0;
};

struct Merge {
  uint32_t rank = UINT32_MAX;
  uint32_t id = 0;
};

class PairMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, Merge{});
    mask_ = cap - 1;
  }
  // A pair listed twice keeps its last listing, as HF does.
  void insert(uint32_t a, uint32_t b, Merge m) {
    uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == kEmpty) {
        keys_[i] = k;
        vals_[i] = m;
        return;
      }
      if (keys_[i] == k) {
        vals_[i] = m;  // HF builds its merge map with collect(): the last listing wins
        return;
      }
    }
  }
  Merge find(uint32_t a, uint32_t b) const {
    uint64_t k = key(a, b);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == k) return vals_[i];
      if (keys_[i] == kEmpty) return Merge{};
    }
  }

 private:
  static constexpr uint64_t kEmpty = UINT64_MAX;
  static uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  std::vector<uint64_t> keys_;
  std::vector<Merge> vals_;
  size_t mask_ = 0;
};

}  // namespace kvgate::tok
