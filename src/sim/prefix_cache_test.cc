#include "sim/prefix_cache.h"

#include <gtest/gtest.h>

namespace kvgate::sim {
namespace {

// n consecutive token ids starting at `first`.
std::vector<uint32_t> seq(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<uint32_t>(i);
  return t;
}

std::vector<uint32_t> cat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCache, PartialTailNeverCached) {
  PrefixCache c(16, 4096);
  auto a = c.acquire(seq(0, 15));
  EXPECT_EQ(a.cached_tokens, 0u);
  EXPECT_TRUE(a.keys.empty());
  EXPECT_EQ(c.cachedBlocks(), 0u);
  c.release(a);
  // 40 tokens = 2 full blocks + 8-token tail: only 2 blocks enter the cache.
  auto b = c.acquire(seq(100, 40));
  EXPECT_EQ(b.cached_tokens, 0u);
  EXPECT_EQ(b.keys.size(), 2u);
  EXPECT_EQ(c.cachedBlocks(), 2u);
  c.release(b);
}

TEST(PrefixCache, IdenticalPromptSecondTimeHitsAllFullBlocks) {
  PrefixCache c(16, 4096);
  auto first = c.acquire(seq(0, 40));
  EXPECT_EQ(first.cached_tokens, 0u);
  c.release(first);
  auto second = c.acquire(seq(0, 40));
  EXPECT_EQ(second.cached_tokens, 32u);  // 2 full blocks of 16; the 8-token tail is not cached
  // While still running, a third identical request shares the same blocks.
  auto third = c.acquire(seq(0, 40));
  EXPECT_EQ(third.cached_tokens, 32u);
  EXPECT_EQ(c.usedBlocks(), 2u);
  EXPECT_EQ(c.cachedBlocks(), 2u);
  c.release(second);
  EXPECT_EQ(c.usedBlocks(), 2u);  // `third` still holds them
  c.release(third);
  EXPECT_EQ(c.usedBlocks(), 0u);
  EXPECT_EQ(c.cachedBlocks(), 2u);
}

TEST(PrefixCache, SharingOnlyTheFirstBlockHits16) {
  PrefixCache c(16, 4096);
  c.release(c.acquire(seq(0, 40)));
  auto other = cat(seq(0, 16), seq(1000, 24));  // same first block, different rest
  auto a = c.acquire(other);
  EXPECT_EQ(a.cached_tokens, 16u);
  EXPECT_EQ(c.cachedBlocks(), 3u);  // 2 old + 1 new second block
  c.release(a);
}

TEST(PrefixCache, BlockIdentityIsChained) {
  PrefixCache c(16, 4096);
  auto x = seq(0, 16), y = seq(500, 16), z = seq(900, 16);
  c.release(c.acquire(cat(x, y)));
  // Y after Z is a different block than Y after X: no hit at all.
  auto a = c.acquire(cat(z, y));
  EXPECT_EQ(a.cached_tokens, 0u);
  EXPECT_EQ(c.cachedBlocks(), 4u);
  EXPECT_NE(c.blockKeys(cat(x, y))[1], c.blockKeys(cat(z, y))[1]);
  // The first key only depends on the first block.
  EXPECT_EQ(c.blockKeys(cat(x, y))[0], c.blockKeys(cat(x, z))[0]);
  EXPECT_EQ(c.blockKeys(x)[0], PrefixCache::blockKey(PrefixCache::kRootKey, x.data(), 16));
  c.release(a);
}

TEST(PrefixCache, LruEvictionOrderCapacity4) {
  PrefixCache c(16, 4);
  auto pa = seq(0, 32), pb = seq(100, 32), pc = seq(200, 16);
  auto ka = c.blockKeys(pa), kb = c.blockKeys(pb), kc = c.blockKeys(pc);
  c.release(c.acquire(pa));  // LRU (oldest first): a1 a0   (freed tail first)
  c.release(c.acquire(pb));  // LRU: a1 a0 b1 b0
  EXPECT_EQ(c.cachedBlocks(), 4u);
  auto r = c.acquire(pc);  // full: evicts a1
  EXPECT_EQ(r.cached_tokens, 0u);
  EXPECT_FALSE(c.contains(ka[1]));
  EXPECT_TRUE(c.contains(ka[0]));
  EXPECT_TRUE(c.contains(kc[0]));
  c.release(r);  // LRU: a0 b1 b0 c0
  // pa again: a0 hits (and leaves the LRU), a1 is missing and evicts the oldest free block, b1.
  auto again = c.acquire(pa);
  EXPECT_EQ(again.cached_tokens, 16u);
  EXPECT_FALSE(c.contains(kb[1]));
  EXPECT_TRUE(c.contains(kb[0]));
  EXPECT_TRUE(c.contains(kc[0]));
  EXPECT_EQ(c.cachedBlocks(), 4u);
  c.release(again);
}

TEST(PrefixCache, ReferencedBlocksAreNeverEvicted) {
  PrefixCache c(16, 4);
  auto p = seq(0, 48);  // 3 blocks, held
  auto held = c.acquire(p);
  EXPECT_EQ(c.usedBlocks(), 3u);
  // q needs 2 blocks: one free slot, then the cache is full of referenced blocks.
  auto q = c.acquire(seq(1000, 32));
  EXPECT_EQ(q.cached_tokens, 0u);
  EXPECT_EQ(q.keys.size(), 1u);
  EXPECT_EQ(c.cachedBlocks(), 4u);
  EXPECT_EQ(c.usedBlocks(), 4u);
  // A third prompt cannot cache anything and evicts nothing.
  auto r = c.acquire(seq(2000, 64));
  EXPECT_TRUE(r.keys.empty());
  for (uint64_t k : held.keys) EXPECT_TRUE(c.contains(k));
  auto p2 = c.acquire(p);
  EXPECT_EQ(p2.cached_tokens, 48u);
  c.release(p2);
  c.release(r);
  c.release(q);
  c.release(held);
  EXPECT_EQ(c.usedBlocks(), 0u);
}

TEST(PrefixCache, ReleaseMakesBlocksEvictableTailFirst) {
  PrefixCache c(16, 4);
  auto p = seq(0, 64);  // 4 blocks
  auto kp = c.blockKeys(p);
  auto held = c.acquire(p);
  c.release(held);  // LRU: p3 p2 p1 p0
  EXPECT_EQ(c.usedBlocks(), 0u);
  EXPECT_EQ(c.cachedBlocks(), 4u);
  auto q = c.acquire(seq(1000, 32));  // evicts p3 then p2
  EXPECT_EQ(q.keys.size(), 2u);
  EXPECT_FALSE(c.contains(kp[3]));
  EXPECT_FALSE(c.contains(kp[2]));
  EXPECT_TRUE(c.contains(kp[1]));
  EXPECT_TRUE(c.contains(kp[0]));
  c.release(q);
  auto again = c.acquire(p);
  EXPECT_EQ(again.cached_tokens, 32u);
  c.release(again);
}

TEST(PrefixCache, ClearUnreferencedKeepsReferencedBlocks) {
  PrefixCache c(16, 4096);
  auto held = c.acquire(seq(0, 32));
  c.release(c.acquire(seq(500, 32)));
  EXPECT_EQ(c.cachedBlocks(), 4u);
  EXPECT_EQ(c.clearUnreferenced(), 2u);
  EXPECT_EQ(c.cachedBlocks(), 2u);
  EXPECT_EQ(c.usedBlocks(), 2u);
  EXPECT_EQ(c.acquire(seq(500, 32)).cached_tokens, 0u);
  EXPECT_EQ(c.acquire(seq(0, 32)).cached_tokens, 32u);
  c.release(held);
}

}  // namespace
}  // namespace kvgate::sim
