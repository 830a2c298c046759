#include "kv/block_table.h"

namespace kvgate::kv {

namespace {
size_t roundPow2(size_t n) {
  size_t c = 64;
  while (c < n) c *= 2;
  return c;
}
}  // namespace

BlockTable::BlockTable(size_t capacity)
    : slots_(new Slot[roundPow2(capacity)]), cap_(roundPow2(capacity)) {}

bool BlockTable::setBits(uint64_t fp, uint64_t bits) {
  const uint64_t k = fp == 0 ? 1 : fp;
  for (size_t i = slot(k);; i = (i + 1) & (cap_ - 1)) {
    const uint64_t sk = slots_[i].key.load(std::memory_order_relaxed);
    if (sk == k) {
      const uint64_t m = slots_[i].mask.load(std::memory_order_relaxed);
      if (m == 0 && bits != 0) --dead_;
      slots_[i].mask.store(m | bits, std::memory_order_release);
      return true;
    }
    if (sk == 0) {
      if ((used_ + 1) * 10 > cap_ * 9) return false;  // keep probes short: caller rebuilds
      slots_[i].mask.store(bits, std::memory_order_relaxed);
      slots_[i].key.store(k, std::memory_order_release);  // publishes the mask with it
      ++used_;
      return true;
    }
  }
}

void BlockTable::clearBits(uint64_t fp, uint64_t bits) {
  const uint64_t k = fp == 0 ? 1 : fp;
  for (size_t i = slot(k);; i = (i + 1) & (cap_ - 1)) {
    const uint64_t sk = slots_[i].key.load(std::memory_order_relaxed);
    if (sk == 0) return;
    if (sk == k) {
      const uint64_t m = slots_[i].mask.load(std::memory_order_relaxed);
      const uint64_t n = m & ~bits;
      if (m != 0 && n == 0) ++dead_;
      slots_[i].mask.store(n, std::memory_order_release);
      return;
    }
  }
}

std::unique_ptr<BlockTable> BlockTable::rebuilt(size_t extra) const {
  const size_t live = used_ - dead_ + extra;
  auto t = std::make_unique<BlockTable>(live * 2 + 64);
  for (size_t i = 0; i < cap_; ++i) {
    const uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
    const uint64_t m = slots_[i].mask.load(std::memory_order_relaxed);
    if (k != 0 && m != 0) t->setBits(k, m);
  }
  return t;
}

}  // namespace kvgate::kv
