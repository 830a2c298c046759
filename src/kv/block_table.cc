#include "kv/block_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

namespace kvgate::kv {

namespace {
size_t roundPow2(size_t n) {
  size_t c = 64;
  while (c < n) c *= 2;
  return c;
}
}  // namespace

// Large tables live on transparent huge pages where the kernel allows (madvise mode): a lookup is
// a random access into up to hundreds of MiB, and with 4 KiB pages nearly every cold lookup also
// misses the TLB.
namespace {
constexpr size_t kHugePage = 2 << 20;
void* allocSlots(size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (!p) throw std::bad_alloc();
  ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without THP the table works the same
  return p;
}
}  // namespace

void BlockTable::Free::operator()(Slot* p) const {
  for (size_t i = 0; i < bytes / sizeof(Slot); ++i) p[i].~Slot();
  if (bytes < kHugePage)
    ::operator delete(p);
  else
    std::free(p);
}

BlockTable::BlockTable(size_t capacity, const TableKey& key)
    : slots_(nullptr, Free{roundPow2(capacity) * sizeof(Slot)}),
      cap_(roundPow2(capacity)),
      key_(key) {
  void* mem = allocSlots(cap_ * sizeof(Slot));
  Slot* s = static_cast<Slot*>(mem);
  for (size_t i = 0; i < cap_; ++i) new (s + i) Slot();
  slots_.reset(s);
}

BlockTable::Set BlockTable::setBits(uint64_t fp, uint64_t bits) {
  const uint64_t k = fp == 0 ? 1 : fp;
  size_t i = slot(k);
  for (size_t n = 0; n < kMaxProbe; ++n, i = (i + 1) & (cap_ - 1)) {
    const uint64_t sk = slots_[i].key.load(std::memory_order_relaxed);
    if (sk == k) {
      const uint64_t m = slots_[i].mask.load(std::memory_order_relaxed);
      if (m == 0 && bits != 0) --dead_;
      slots_[i].mask.store(m | bits, std::memory_order_release);
      return Set::kOk;
    }
    if (sk == 0) {
      if ((used_ + 1) * 10 > cap_ * 9) return Set::kFull;  // keep probes short: caller rebuilds
      slots_[i].mask.store(bits, std::memory_order_relaxed);
      slots_[i].key.store(k, std::memory_order_release);  // publishes the mask with it
      ++used_;
      longest_probe_ = std::max(longest_probe_, n + 1);
      return Set::kOk;
    }
  }
  return Set::kProbeLimit;
}

void BlockTable::clearBits(uint64_t fp, uint64_t bits) {
  const uint64_t k = fp == 0 ? 1 : fp;
  size_t i = slot(k);
  for (size_t n = 0; n < kMaxProbe; ++n, i = (i + 1) & (cap_ - 1)) {
    const uint64_t sk = slots_[i].key.load(std::memory_order_relaxed);
    if (sk == 0) return;
    if (sk == k) {
      const uint64_t m = slots_[i].mask.load(std::memory_order_relaxed);
      const uint64_t left = m & ~bits;
      if (m != 0 && left == 0) ++dead_;
      slots_[i].mask.store(left, std::memory_order_release);
      return;
    }
  }
}

std::unique_ptr<BlockTable> BlockTable::rebuilt(size_t extra, size_t* dropped) const {
  const size_t live = used_ - dead_ + extra;
  auto t = std::make_unique<BlockTable>(live * 2 + 64, key_);
  for (size_t i = 0; i < cap_; ++i) {
    const uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
    const uint64_t m = slots_[i].mask.load(std::memory_order_relaxed);
    if (k != 0 && m != 0 && t->setBits(k, m) != Set::kOk && dropped) ++*dropped;
  }
  return t;
}

}  // namespace kvgate::kv
