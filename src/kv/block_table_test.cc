// Hash flooding (issue 28 §1.6): keys built to collide under the tables' former public slot
// functions (inverted here from their published formulas, not from the code under test) spread
// under the keyed mix, and a probe never walks past BlockTable::kMaxProbe.
#include "kv/block_table.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "common/splitmix.h"
#include "kv/u64_map.h"

namespace kvgate::kv {
namespace {

uint64_t unXorShift(uint64_t y, int s) {  // x with x ^ (x >> s) == y
  uint64_t x = y;
  for (int i = 0; i < 64 / s + 1; ++i) x = y ^ (x >> s);
  return x;
}
uint64_t inverseOdd(uint64_t a) {  // a^-1 mod 2^64 (Newton)
  uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
// The tables' former public slot mixes, both k ^= k >> s1; k *= m; k ^= k >> s2 (BlockTable:
// 31, 0x9e3779b97f4a7c15, 29; U64Map: 33, 0xff51afd7ed558ccd, 33), and their inverses.
struct XorMulXor {
  int s1;
  uint64_t m;
  int s2;
  uint64_t operator()(uint64_t k) const {
    k ^= k >> s1;
    k *= m;
    return k ^ (k >> s2);
  }
  uint64_t inverse(uint64_t y) const { return unXorShift(unXorShift(y, s2) * inverseOdd(m), s1); }
};
constexpr XorMulXor kOldBlockMix{31, 0x9e3779b97f4a7c15ULL, 29};
constexpr XorMulXor kOldMapMix{33, 0xff51afd7ed558ccdULL, 33};

TEST(HashFlooding, KeysCollidingUnderThePublicMixSpreadInTheBlockTable) {
  constexpr size_t kCap = 1 << 16;
  std::vector<uint64_t> keys;
  for (uint64_t i = 1; i <= 20000; ++i) {  // every one with old home slot 0 of a 2^16 table
    const uint64_t k = kOldBlockMix.inverse(i << 16);
    ASSERT_EQ(kOldBlockMix(k) & (kCap - 1), 0u);
    keys.push_back(k);
  }
  BlockTable t(kCap);
  for (uint64_t k : keys) ASSERT_EQ(t.setBits(k, 1), BlockTable::Set::kOk);
  // Under the old mix they formed one 20,000-slot cluster; here an insert walks a few slots.
  EXPECT_LT(t.longestProbe(), 32u);
  for (uint64_t k : keys) EXPECT_EQ(t.lookup(k), 1u);
}

TEST(HashFlooding, ProbesNeverPassTheBound) {
  const TableKey known{0x1234, 0x5678};  // a key the "attacker" knows (tests only)
  BlockTable t(1024, known);
  // Keys whose home is slot 5 under this key, found by search.
  std::vector<uint64_t> same;
  common::SplitMix64 r{42};
  while (same.size() < 300) {
    const uint64_t k = r.next() | 1;
    if (t.slotOf(k) == 5) same.push_back(k);
  }
  size_t stored = 0, limited = 0;
  for (uint64_t k : same) {
    auto s = t.setBits(k, 2);
    stored += s == BlockTable::Set::kOk;
    limited += s == BlockTable::Set::kProbeLimit;
  }
  EXPECT_EQ(stored, BlockTable::kMaxProbe);  // slots 5 .. 5 + 127
  EXPECT_EQ(limited, same.size() - BlockTable::kMaxProbe);
  EXPECT_EQ(t.longestProbe(), BlockTable::kMaxProbe);
  for (size_t i = 0; i < same.size(); ++i)
    EXPECT_EQ(t.lookup(same[i]), i < BlockTable::kMaxProbe ? 2u : 0u) << i;
  t.clearBits(same.back(), 2);  // a key never stored: the walk ends at the bound
  EXPECT_EQ(t.lookup(same[0]), 2u);
  // Rebuilding keeps the key (and the entries it could place).
  auto next = t.rebuilt();
  EXPECT_EQ(next->lookup(same[0]), 2u);
}

TEST(HashFlooding, KeysCollidingUnderThePublicMixSpreadInTheFlatMap) {
  U64Map m;
  std::vector<uint64_t> keys;
  for (uint64_t i = 1; i <= 4096; ++i) keys.push_back(kOldMapMix.inverse(i << 20));
  for (uint64_t k : keys) ASSERT_EQ(kOldMapMix(k) & ((1u << 20) - 1), 0u);
  for (uint64_t k : keys) m.insert(k, k);
  std::map<size_t, size_t> per_home;
  size_t worst = 0;
  for (uint64_t k : keys) worst = std::max(worst, ++per_home[m.slotOf(k)]);
  EXPECT_LT(worst, 8u) << "keys that shared one home slot under the public mix still pile up";
  for (uint64_t k : keys) EXPECT_EQ(m.valueOr(k, 0), k);
}

}  // namespace
}  // namespace kvgate::kv
