// HashContract against the golden vLLM vectors (tests/golden/engine_vectors.json, seed "0",
// sha256_cbor): event hashes taken from the file, never from the code under test.
#include "events/hash_contract.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvgate::events {
namespace {

using engines::KvEvent;
using engines::KvEventBatch;

// plain_2_blocks: tokens 0..15 and 16..31.
constexpr uint64_t kPlain0 = 12687895063098490012ull, kPlain1 = 1814341696565857452ull;
// lora "sql-lora", both blocks; cache_salt "tenant-a" (block 0 only).
constexpr uint64_t kLora0 = 6281122108716050286ull, kLora1 = 6671315359031647504ull;
constexpr uint64_t kSalt0 = 8020952614053081591ull, kSalt1 = 2326720499465815097ull;

KvEvent stored(std::vector<uint64_t> hashes, uint32_t first_token, std::optional<uint64_t> parent) {
  KvEvent e;
  e.block_hashes = std::move(hashes);
  e.block_size = 16;
  e.token_ids.resize(16 * e.block_hashes.size());
  std::iota(e.token_ids.begin(), e.token_ids.end(), first_token);
  if (parent) {
    e.has_parent = true;
    e.parent = *parent;
  }
  return e;
}

KvEventBatch batch(std::vector<KvEvent> ev) {
  KvEventBatch b;
  b.events = std::move(ev);
  return b;
}

TEST(HashContract, GoldenChainsVerify) {
  HashContract c(engines::VllmHashAlgo::kSha256Cbor, "0");
  auto r = c.check(batch({stored({kPlain0, kPlain1}, 0, std::nullopt)}));
  EXPECT_EQ(r.ok, 2u);
  EXPECT_EQ(r.mismatch, 0u);
  // A later store chains from a verified parent's full digest.
  HashContract d(engines::VllmHashAlgo::kSha256Cbor, "0");
  EXPECT_EQ(d.check(batch({stored({kPlain0}, 0, std::nullopt)})).ok, 1u);
  EXPECT_EQ(d.check(batch({stored({kPlain1}, 16, kPlain0)})).ok, 1u);
  // LoRA names (every block) and cache salts (block 0) are part of the recomputation.
  KvEvent l = stored({kLora0, kLora1}, 0, std::nullopt);
  l.lora_name = "sql-lora";
  EXPECT_EQ(c.check(batch({l})).ok, 2u);
  KvEvent s = stored({kSalt0}, 0, std::nullopt);
  s.cache_salt = "tenant-a";
  EXPECT_EQ(c.check(batch({s})).ok, 1u);
  EXPECT_EQ(c.check(batch({stored({kSalt1}, 16, kSalt0)})).ok, 1u);
}

TEST(HashContract, AnotherSeedIsAMismatchAndUnknownsAreUnverifiable) {
  HashContract c(engines::VllmHashAlgo::kSha256Cbor, "1");  // the engines run seed "0"
  auto r = c.check(batch({stored({kPlain0, kPlain1}, 0, std::nullopt)}));
  EXPECT_EQ(r.ok, 0u);
  EXPECT_EQ(r.mismatch, 2u);
  HashContract x(engines::VllmHashAlgo::kXxhashCbor, "0");  // another algorithm: mismatch too
  EXPECT_EQ(x.check(batch({stored({kPlain0}, 0, std::nullopt)})).mismatch, 1u);
  HashContract u(engines::VllmHashAlgo::kSha256Cbor, "0");
  EXPECT_EQ(u.check(batch({stored({kPlain1}, 16, kPlain0)})).unverifiable, 1u);  // parent unseen
  KvEvent tokenless = stored({kPlain0}, 0, std::nullopt);
  tokenless.token_ids.clear();
  EXPECT_EQ(u.check(batch({tokenless})).unverifiable, 1u);
  KvEvent mm = stored({kPlain0}, 0, std::nullopt);
  mm.extras.push_back({42});
  EXPECT_EQ(u.check(batch({mm})).unverifiable, 1u);
  // A clear forgets the verified digests.
  EXPECT_EQ(u.check(batch({stored({kPlain0}, 0, std::nullopt)})).ok, 1u);
  KvEvent clear;
  clear.kind = KvEvent::Kind::kCleared;
  u.check(batch({clear}));
  EXPECT_EQ(u.check(batch({stored({kPlain1}, 16, kPlain0)})).unverifiable, 1u);
}

TEST(HashContract, ContentTheEventsDoNotShowIsUnverifiableNotAMismatch) {
  // TensorRT-LLM: a block with a multimodal token_extra_id hashes content the drain does not
  // show; the hash value here is arbitrary because it must not be compared at all.
  HashContract t(HashContract::Engine::kTrtllm);
  KvEvent mm = stored({0x1234}, 0, std::nullopt);
  mm.extras.push_back({7});
  auto r = t.check(batch({mm}));
  EXPECT_EQ(r.unverifiable, 1u);
  EXPECT_EQ(r.mismatch, 0u);
  // vLLM: an adapter known only by its integer id hashes under a name the events do not carry.
  HashContract v(engines::VllmHashAlgo::kSha256Cbor, "0");
  KvEvent byid = stored({kLora0}, 0, std::nullopt);
  byid.lora_name = "#lora_id:3";
  r = v.check(batch({byid}));
  EXPECT_EQ(r.unverifiable, 1u);
  EXPECT_EQ(r.mismatch, 0u);
}

}  // namespace
}  // namespace kvgate::events
