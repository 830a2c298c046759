// KvIndex: events in, overlap out. Expected fingerprints come from the golden chain
// (xxh3_fingerprint.json, tokens 0..63, block size 16) and overlaps are counted by hand.
#include "kv/kv_index.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kv/fingerprint.h"

namespace kvgate::kv {
namespace {

using engines::KvEvent;
using engines::KvEventBatch;

// The golden prefix chain of tokens 0..63 (4 blocks of 16), read from the golden file.
std::vector<uint64_t> goldenChain0to63() {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/xxh3_fingerprint.json");
  auto g = nlohmann::json::parse(in);
  for (const auto& v : g.at("vectors"))
    if (v.at("name") == "tokens_0_63") {
      std::vector<uint64_t> out;
      for (const auto& h : v.at("prefix_hashes"))
        out.push_back(std::stoull(h.at("dec").get<std::string>()));
      return out;
    }
  return {};
}

std::vector<uint32_t> iota(uint32_t from, uint32_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

KvEvent stored(std::vector<uint64_t> hashes, std::vector<uint32_t> tokens, bool has_parent = false,
               uint64_t parent = 0) {
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.block_hashes = std::move(hashes);
  e.token_ids = std::move(tokens);
  e.block_size = 16;
  e.has_parent = has_parent;
  e.parent = parent;
  e.medium = "GPU";
  return e;
}

KvEvent removed(std::vector<uint64_t> hashes) {
  KvEvent e;
  e.kind = KvEvent::Kind::kRemoved;
  e.block_hashes = std::move(hashes);
  return e;
}

KvEventBatch batch(std::vector<KvEvent> events) {
  KvEventBatch b;
  b.events = std::move(events);
  return b;
}

struct Scored {
  size_t best;
  std::array<uint32_t, kMaxWorkers> overlap;
};
Scored score(const KvIndex& idx, const std::vector<uint64_t>& chain, uint64_t candidates) {
  Scored s{};
  s.overlap.fill(999);
  s.best = idx.score(chain.data(), chain.size(), candidates, s.overlap);
  return s;
}

TEST(KvIndex, StoredBlocksScoreByLongestLeadingRun) {
  const auto chain = goldenChain0to63();
  ASSERT_EQ(chain.size(), 4u);
  KvIndex idx;
  int a = idx.addWorker(), b = idx.addWorker(), c = idx.addWorker();
  ApplyStats st;
  // a holds blocks 0-2 (stored in two events, the second chained on engine hash 11);
  // b holds blocks 0-3; c holds only block 1 and 2 of a different root (an orphan: skipped).
  idx.apply(a, batch({stored({10, 11}, iota(0, 32)), stored({12}, iota(32, 16), true, 11)}), st);
  idx.apply(b, batch({stored({20, 21, 22, 23}, iota(0, 64))}), st);
  idx.apply(c, batch({stored({31, 32}, iota(16, 32), true, 99)}), st);
  EXPECT_EQ(st.stored_blocks, 7u);
  EXPECT_EQ(st.orphan_events, 1u);
  EXPECT_EQ(idx.blocks(a), 3u);
  EXPECT_EQ(idx.blocks(b), 4u);
  EXPECT_EQ(idx.blocks(c), 0u);
  const uint64_t all = (1u << a) | (1u << b) | (1u << c);
  Scored s = score(idx, chain, all);
  EXPECT_EQ(s.best, 4u);
  EXPECT_EQ(s.overlap[a], 3u);
  EXPECT_EQ(s.overlap[b], 4u);
  EXPECT_EQ(s.overlap[c], 0u);
  // Only the candidates asked about are scored.
  s = score(idx, chain, 1u << a);
  EXPECT_EQ(s.best, 3u);
  EXPECT_EQ(s.overlap[b], 999u);
}

TEST(KvIndex, RemovalsDuplicatesAndClears) {
  const auto chain = goldenChain0to63();
  KvIndex idx;
  int a = idx.addWorker();
  ApplyStats st;
  idx.apply(a, batch({stored({1, 2, 3, 4}, iota(0, 64))}), st);
  // vLLM re-sends stored blocks from block 0: idempotent.
  idx.apply(a, batch({stored({1, 2}, iota(0, 32))}), st);
  EXPECT_EQ(st.duplicate_blocks, 2u);
  EXPECT_EQ(idx.blocks(a), 4u);
  // Evicting block 1 (engine hash 2) cuts the leading run to 1 block.
  idx.apply(a, batch({removed({2, 77})}), st);
  EXPECT_EQ(st.removed_blocks, 1u);
  EXPECT_EQ(st.unknown_removals, 1u);
  EXPECT_EQ(score(idx, chain, 1).overlap[a], 1u);
  KvEvent clear;
  clear.kind = KvEvent::Kind::kCleared;
  idx.apply(a, batch({clear}), st);
  EXPECT_EQ(idx.blocks(a), 0u);
  EXPECT_EQ(score(idx, chain, 1).best, 0u);
}

// A worker's speculative credits go with its cache: after AllBlocksCleared (or a restart's clear,
// or its slot being freed) a sibling no longer follows a credit to a worker that holds nothing;
// another worker's credits stay, and new credits count again.
TEST(KvIndex, ClearsForgetTheWorkersSpeculativeCredits) {
  const auto chain = goldenChain0to63();
  KvIndex idx;
  SpeculativeOverlay overlay;
  idx.attachOverlay(&overlay);
  int a = idx.addWorker(), b = idx.addWorker();
  const int64_t now = 5'000'000'000, later = now + 2'000'000'000;
  overlay.credit(chain.data(), 2, a, later);
  overlay.credit(chain.data() + 2, 2, b, later);
  EXPECT_TRUE(overlay.credited(chain[0], a, now));
  EXPECT_TRUE(overlay.credited(chain[2], b, now));
  EXPECT_FALSE(overlay.credited(chain[0], b, now));    // credited to a, not b
  EXPECT_FALSE(overlay.credited(chain[0], a, later));  // expired
  ApplyStats st;
  KvEvent clear;
  clear.kind = KvEvent::Kind::kCleared;
  idx.apply(a, batch({clear}), st);
  EXPECT_FALSE(overlay.credited(chain[0], a, now));
  EXPECT_FALSE(overlay.credited(chain[1], a, now));
  EXPECT_TRUE(overlay.credited(chain[2], b, now));
  overlay.credit(chain.data(), 1, a, later);
  EXPECT_TRUE(overlay.credited(chain[0], a, now));
  idx.removeWorker(b);
  EXPECT_FALSE(overlay.credited(chain[2], b, now));
}

// A credit stands for its whole prefix (chained hashes): a run goes on over credits lost to
// later ones sharing their slots when a credit within the next kOverlayLookahead blocks
// survives, and stops at a longer gap. Expected values worked by hand.
TEST(KvIndex, OverlayRunSkipsLostCreditsWithinTheLookahead) {
  std::vector<uint64_t> chain(64);  // 64 distinct block fingerprints (the overlay reads no more)
  for (size_t i = 0; i < chain.size(); ++i) chain[i] = 0x9e3779b97f4a7c15ULL * (i + 1);
  KvIndex idx;
  SpeculativeOverlay overlay;
  idx.attachOverlay(&overlay);
  const int a = idx.addWorker(), b = idx.addWorker();
  const int64_t now = 5'000'000'000, later = now + 2'000'000'000;
  overlay.credit(chain.data(), 10, a, later);     // a was sent blocks 0..9
  overlay.credit(chain.data() + 3, 2, b, later);  // b's credits overwrite a's on blocks 3 and 4
  ASSERT_FALSE(overlay.credited(chain[3], a, now));
  std::array<uint32_t, kMaxWorkers> ov{};
  const uint64_t both = (1ull << a) | (1ull << b);
  const uint64_t via = idx.scoreWithOverlay(chain.data(), 64, both, overlay, now, ov);
  EXPECT_EQ(ov[static_cast<size_t>(a)], 10u);  // 0..2, (3, 4 lost: block 5 is a's), 5..9
  EXPECT_EQ(ov[static_cast<size_t>(b)], 5u);   // b's credit at 3 stands for 0..3; then 4
  EXPECT_EQ(via, 15u);
  // A gap longer than the lookahead ends the run: a holds 0..1 and (after 17 lost) 19.
  SpeculativeOverlay o2;
  o2.credit(chain.data(), 2, a, later);
  o2.credit(chain.data() + 19, 1, a, later);
  std::array<uint32_t, kMaxWorkers> ov2{};
  idx.scoreWithOverlay(chain.data(), 64, 1ull << a, o2, now, ov2);
  EXPECT_EQ(ov2[static_cast<size_t>(a)], 2u);
  // Within it (16 lost, the 17th block credited): the run reaches it.
  o2.credit(chain.data() + 18, 1, a, later);
  idx.scoreWithOverlay(chain.data(), 64, 1ull << a, o2, now, ov2);
  EXPECT_EQ(ov2[static_cast<size_t>(a)], 20u);
  // Expired credits count for nothing.
  idx.scoreWithOverlay(chain.data(), 64, 1ull << a, o2, later, ov2);
  EXPECT_EQ(ov2[static_cast<size_t>(a)], 0u);
}

// The inventory lists engine hashes once each, in store order, without removed ones.
TEST(KvIndex, EngineHashesInStoreOrder) {
  KvIndex idx;
  ApplyStats st;
  const int a = idx.addWorker();
  idx.apply(a, batch({stored({1, 2, 3, 4}, iota(0, 64))}), st);
  idx.apply(a, batch({stored({1, 2}, iota(0, 32)), removed({3}), stored({9}, iota(500, 16))}), st);
  std::vector<uint64_t> out;
  EXPECT_EQ(idx.engineHashes(a, 0, 100, out), 4u);
  EXPECT_EQ(out, (std::vector<uint64_t>{1, 2, 4, 9}));
  out.clear();
  EXPECT_EQ(idx.engineHashes(a, 1, 2, out), 4u);  // a page: entries 1 and 2
  EXPECT_EQ(out, (std::vector<uint64_t>{2, 4}));
  out.clear();
  EXPECT_EQ(idx.engineHashes(a, 10, 5, out), 4u);  // past the end: nothing
  EXPECT_TRUE(out.empty());
  idx.clear(a, st);
  EXPECT_EQ(idx.engineHashes(a, 0, 100, out), 0u);
}

TEST(KvIndex, OtherMediaGroupsAndMisfitsAreSkipped) {
  KvIndex idx;
  int a = idx.addWorker();
  ApplyStats st;
  KvEvent cpu = stored({1}, iota(0, 16));
  cpu.medium = "CPU";
  KvEvent swa = stored({2}, iota(0, 16));
  swa.spec_kind = "sliding_window";
  KvEvent g1 = stored({3}, iota(0, 16));
  g1.group_idx = 1;  // no spec kind: only group 0 is taken as full attention
  KvEvent misfit = stored({4, 5}, iota(0, 20));
  KvEvent tokenless = stored({6}, {});
  idx.apply(a, batch({cpu, swa, g1, misfit, tokenless}), st);
  EXPECT_EQ(st.skipped_events, 4u);
  EXPECT_EQ(st.misfit_events, 1u);
  EXPECT_EQ(idx.blocks(a), 0u);
}

TEST(KvIndex, LoraAndSaltPartitionsAndMultimodalNeverMatchPlainText) {
  const auto chain = goldenChain0to63();
  KvIndex idx;
  int lora = idx.addWorker(), salted = idx.addWorker(), mm = idx.addWorker();
  ApplyStats st;
  KvEvent l = stored({1, 2}, iota(0, 32));
  l.lora_name = "adapter";
  KvEvent s = stored({1, 2}, iota(0, 32));
  s.cache_salt = "tenant-a";
  KvEvent m = stored({1, 2}, iota(0, 32));
  m.extras.resize(2);
  m.extras[0].content_mix = 42;  // an image in block 0
  idx.apply(lora, batch({l}), st);
  idx.apply(salted, batch({s}), st);
  idx.apply(mm, batch({m}), st);
  const uint64_t all = 7;
  EXPECT_EQ(score(idx, chain, all).best, 0u);
  // The same prompt under the adapter's partition matches the adapter's worker only.
  auto tokens = iota(0, 64);
  std::vector<uint64_t> lchain(4);
  prefixChain(tokens.data(), tokens.size(), 16, partitionRoot("adapter", ""), lchain.data(), 4);
  Scored sc = score(idx, lchain, all);
  EXPECT_EQ(sc.overlap[lora], 2u);
  EXPECT_EQ(sc.overlap[salted], 0u);
  EXPECT_EQ(sc.overlap[mm], 0u);
}

TEST(KvIndex, MemoryCapEvictsOldestFirst) {
  KvIndex idx(/*max_blocks_per_worker=*/3);
  int a = idx.addWorker();
  ApplyStats st;
  // Five unrelated single-block prompts: the two oldest go.
  for (uint32_t i = 0; i < 5; ++i) idx.apply(a, batch({stored({100 + i}, iota(1000 * i, 16))}), st);
  EXPECT_EQ(idx.blocks(a), 3u);
  EXPECT_EQ(st.evicted_blocks, 2u);
  for (uint32_t i = 0; i < 5; ++i) {
    auto t = iota(1000 * i, 16);
    std::vector<uint64_t> ch(1);
    prefixChain(t.data(), t.size(), 16, std::nullopt, ch.data(), 1);
    EXPECT_EQ(score(idx, ch, 1).best, i >= 2 ? 1u : 0u) << i;
  }
}

// A block removed and stored again takes its new place in store order: with a cap of 3, blocks
// A B C stored, A removed and stored again (order B C A), then D: B (the oldest live) goes, not A.
TEST(KvIndex, ReStoredBlocksAreEvictedInTheirNewOrder) {
  KvIndex idx(/*max_blocks_per_worker=*/3);
  int a = idx.addWorker();
  ApplyStats st;
  auto store = [&](uint64_t h, uint32_t first) {
    idx.apply(a, batch({stored({h}, iota(first, 16))}), st);
  };
  store(1, 0);     // A
  store(2, 1000);  // B
  store(3, 2000);  // C
  idx.apply(a, batch({removed({1})}), st);
  store(1, 0);     // A again: newest now
  store(4, 3000);  // D: over the cap by one
  std::vector<uint64_t> held;
  EXPECT_EQ(idx.engineHashes(a, 0, 10, held), 3u);
  EXPECT_EQ(held, (std::vector<uint64_t>{3, 1, 4}));  // C, A, D in store order; B evicted
  store(5, 4000);                                     // E: C goes next
  held.clear();
  idx.engineHashes(a, 0, 10, held);
  EXPECT_EQ(held, (std::vector<uint64_t>{1, 4, 5}));
  EXPECT_EQ(st.evicted_blocks, 2u);
}

TEST(KvIndex, ManyBlocksRebuildTheTableAndWorkersComeAndGo) {
  KvIndex idx;
  int a = idx.addWorker(), b = idx.addWorker();
  ApplyStats st;
  // 5000 blocks of one long prompt on a (forces several table rebuilds), the first 100 on b.
  auto tokens = iota(0, 5000 * 16);
  std::vector<uint64_t> hashes(5000);
  std::iota(hashes.begin(), hashes.end(), 1);
  idx.apply(a, batch({stored(hashes, tokens)}), st);
  idx.apply(b, batch({stored({hashes.begin(), hashes.begin() + 100}, iota(0, 1600))}), st);
  std::vector<uint64_t> chain(5000);
  ASSERT_EQ(prefixChain(tokens.data(), tokens.size(), 16, std::nullopt, chain.data(), 5000), 5000u);
  Scored s = score(idx, chain, 3);
  EXPECT_EQ(s.overlap[a], 5000u);
  EXPECT_EQ(s.overlap[b], 100u);
  idx.removeWorker(a);
  s = score(idx, chain, 3);
  EXPECT_EQ(s.overlap[a], 0u);
  EXPECT_EQ(s.overlap[b], 100u);
  EXPECT_EQ(idx.addWorker(), a);  // the slot is reused, empty
  EXPECT_EQ(idx.blocks(a), 0u);
  EXPECT_GT(idx.bytes(), 0u);
}

// Hybrid models: removals carry only the group number. Full attention in group 1: its removals
// apply, group 0's (sliding window) never touch the full-attention blocks.
TEST(KvIndex, RemovalsFollowTheLearnedFullAttentionGroup) {
  const auto chain = goldenChain0to63();
  KvIndex idx;
  int a = idx.addWorker();
  ApplyStats st;
  KvEvent full = stored({1, 2}, iota(0, 32));
  full.group_idx = 1;
  full.spec_kind = "full_attention";
  KvEvent swa = stored({1, 2}, iota(0, 32));  // the same hashes in the sliding-window group
  swa.group_idx = 0;
  swa.spec_kind = "sliding_window";
  idx.apply(a, batch({full, swa}), st);
  EXPECT_EQ(idx.blocks(a), 2u);
  KvEvent rm_swa = removed({2});
  rm_swa.group_idx = 0;
  idx.apply(a, batch({rm_swa}), st);
  EXPECT_EQ(score(idx, chain, 1).overlap[a], 2u);  // group 0's eviction is not ours
  KvEvent rm_full = removed({2});
  rm_full.group_idx = 1;
  idx.apply(a, batch({rm_full}), st);
  EXPECT_EQ(score(idx, chain, 1).overlap[a], 1u);
}

// An engine hash stored again for other content moves to the new block; two engine hashes naming
// one block keep it until both are removed.
TEST(KvIndex, EngineHashesAndFingerprintsAreCountedNotAssumedOneToOne) {
  const auto chain = goldenChain0to63();
  KvIndex idx;
  int a = idx.addWorker();
  ApplyStats st;
  idx.apply(a, batch({stored({7}, iota(0, 16))}), st);    // hash 7 = block 0 of the chain
  idx.apply(a, batch({stored({7}, iota(500, 16))}), st);  // hash 7 reused: other content
  EXPECT_EQ(score(idx, chain, 1).overlap[a], 0u);
  EXPECT_EQ(idx.blocks(a), 1u);
  idx.apply(a, batch({stored({8}, iota(0, 16)), stored({9}, iota(0, 16))}), st);  // 8, 9: block 0
  EXPECT_EQ(idx.blocks(a), 2u);
  idx.apply(a, batch({removed({8})}), st);
  EXPECT_EQ(score(idx, chain, 1).overlap[a], 1u);  // still held under 9
  idx.apply(a, batch({removed({9})}), st);
  EXPECT_EQ(score(idx, chain, 1).overlap[a], 0u);
}

// Readers score while the writer stores and removes: every score is one a consistent index
// could give (a prefix of the blocks a worker held at some moment), never garbage.
TEST(KvIndex, ReadersRunConcurrentlyWithTheWriter) {
  KvIndex idx;
  int a = idx.addWorker();
  auto tokens = iota(0, 200 * 16);
  std::vector<uint64_t> chain(200);
  prefixChain(tokens.data(), tokens.size(), 16, std::nullopt, chain.data(), 200);
  std::atomic<bool> stop{false};
  std::atomic<size_t> bad{0};
  std::thread reader([&] {
    std::array<uint32_t, kMaxWorkers> ov{};
    while (!stop.load()) {
      size_t best = idx.score(chain.data(), chain.size(), 1, ov);
      if (best > 200 || ov[static_cast<size_t>(a)] != best) bad.fetch_add(1);
    }
  });
  ApplyStats st;
  // The scored prompt is stored and removed over and over, and between, 2,000 other blocks per
  // round pile up (then are cleared), so the table is rebuilt and republished under the reader.
  int b = idx.addWorker();
  for (int round = 0; round < 200; ++round) {
    std::vector<uint64_t> hashes(200);
    std::iota(hashes.begin(), hashes.end(), 1 + round * 1000);
    idx.apply(a, batch({stored(hashes, tokens)}), st);
    std::vector<uint64_t> other(2000);
    std::iota(other.begin(), other.end(), uint64_t{1} << 40 | static_cast<uint64_t>(round) << 20);
    idx.apply(b, batch({stored(other, iota(static_cast<uint32_t>(round) * 40000, 32000))}), st);
    idx.apply(a, batch({removed(hashes)}), st);
    if (round % 10 == 9) idx.clear(b, st);
  }
  stop.store(true);
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(idx.blocks(a), 0u);
}

}  // namespace
}  // namespace kvgate::kv
