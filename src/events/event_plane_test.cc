// EventPlane over real ZMQ sockets on loopback: a PUB socket in the test plays the engine and
// sends the golden vLLM batches (tests/golden/engine_vectors.json) with sequence frames; the
// index's scores show what was applied. Waits are one-sided with wide margins.
#include "events/event_plane.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <zmq.hpp>

#include "../../tests/support/test_util.h"
#include "kv/fingerprint.h"

namespace kvgate::events {
namespace {

std::string goldenBatch(const std::string& name) {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/engine_vectors.json");
  auto g = nlohmann::json::parse(in);
  for (const auto& b : g.at("vllm_kv_event_batches"))
    if (b.at("name") == name) {
      std::string hex = b.at("msgpack_hex").get<std::string>(), out;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      return out;
    }
  return {};
}

std::string seqFrame(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
  return s;
}

struct Engine {  // a PUB socket bound to a free loopback port
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  uint16_t port = 0;
  Engine() {
    pub.set(zmq::sockopt::linger, 0);
    pub.bind("tcp://127.0.0.1:*");
    std::string ep = pub.get(zmq::sockopt::last_endpoint);
    port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
  }
  void send(const std::string& topic, const std::string& seq, const std::string& payload) {
    pub.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(seq), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(payload), zmq::send_flags::none);
  }
};

// The overlap of tokens 0..31 (the golden batches' two blocks) on the source's worker.
uint32_t overlap(const kv::KvIndex& idx, int slot) {
  std::vector<uint32_t> t(32);
  std::iota(t.begin(), t.end(), 0);
  uint64_t chain[2];
  kv::prefixChain(t.data(), t.size(), 16, std::nullopt, chain, 2);
  std::array<uint32_t, kv::kMaxWorkers> ov{};
  idx.score(chain, 2, uint64_t{1} << slot, ov);
  return ov[static_cast<size_t>(slot)];
}

using kvgate::testing::waitUntil;

TEST(EventPlane, FollowsARealPublisher) {
  Engine eng;
  kv::KvIndex idx;
  EventPlane plane(idx, EventPlaneOptions{10, 1 << 20, 1000});
  plane.start();
  SourceSpec spec{"127.0.0.1", eng.port, 1, "kv"};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));
  const std::string stored = goldenBatch("v_post42892_bytes_hashes");  // stores blocks 0-1
  // PUB/SUB joins asynchronously: send seq 0 until it lands (repeats are duplicates).
  ASSERT_TRUE(waitUntil([&] {
    eng.send("kv", seqFrame(0), stored);
    return overlap(idx, slot) == 2;
  }));
  // Another topic is filtered out; malformed and undecodable messages change nothing.
  eng.send("other", seqFrame(1), goldenBatch("v0_9_positional_minimal"));
  eng.pub.send(zmq::buffer(std::string("kv")), zmq::send_flags::none);  // one frame
  eng.send("kv", seqFrame(1), "\xc1");                                  // not msgpack
  // seq 1: positional v0.9 batch: stores the same two blocks under int hashes and removes block
  // 1. An int hash is the last 8 digest bytes, exactly what the bytes hashes of seq 0 fold to
  // (engines.md §1.5), so the stores are duplicates and the removal drops block 1: 1 block left.
  eng.send("kv", seqFrame(1), goldenBatch("v0_9_positional_minimal"));
  ASSERT_TRUE(waitUntil([&] {
    auto st = plane.stats(spec.key());
    return st && st->batches >= 2 && st->malformed >= 1 && st->decode_errors >= 1;
  }));
  EXPECT_EQ(overlap(idx, slot), 1u);
  EXPECT_GE(plane.stats(spec.key())->apply.duplicate_blocks, 2u);
  // A restart (sequence back to 0) clears the worker, then applies the batch: the full
  // positional batch stores 2 blocks, removes 1 and ends with AllBlocksCleared: nothing left.
  eng.send("kv", seqFrame(0), goldenBatch("v_pre42892_positional_full"));
  ASSERT_TRUE(waitUntil([&] {
    auto st = plane.stats(spec.key());
    return st && st->restarts == 1;
  }));
  EXPECT_EQ(overlap(idx, slot), 0u);
  // A gap of 3 without a replay socket keeps the inventory and counts the lost batches.
  eng.send("kv", seqFrame(4), stored);
  ASSERT_TRUE(waitUntil([&] {
    auto st = plane.stats(spec.key());
    return st && st->lost_batches == 3;
  }));
  EXPECT_EQ(overlap(idx, slot), 2u);
  auto st = *plane.stats(spec.key());
  EXPECT_EQ(st.clears, 1u);        // the restart
  EXPECT_EQ(st.apply.clears, 1u);  // the AllBlocksCleared inside the full positional batch
  EXPECT_EQ(st.apply.unknown_removals, 0u);
  EXPECT_EQ(st.errors, 0u);
  // Dropping the source frees its worker.
  plane.setSources({});
  ASSERT_TRUE(waitUntil([&] { return !plane.slotsOf(spec.key()).has_value(); }));
  EXPECT_EQ(idx.blocks(slot), 0u);
  plane.stop();
}

// Two DP ranks publish on port and port + 1; each rank is its own inventory, so a restart of rank 1
// does not clear what rank 0 holds.
TEST(EventPlane, DataParallelRanksAreSeparateInventories) {
  std::unique_ptr<Engine> r0;
  zmq::socket_t* r1 = nullptr;
  std::unique_ptr<zmq::socket_t> r1_owner;
  for (int attempt = 0; attempt < 20 && !r1; ++attempt) {
    r0 = std::make_unique<Engine>();
    auto s = std::make_unique<zmq::socket_t>(r0->ctx, zmq::socket_type::pub);
    s->set(zmq::sockopt::linger, 0);
    try {
      s->bind("tcp://127.0.0.1:" + std::to_string(r0->port + 1));
      r1_owner = std::move(s);
      r1 = r1_owner.get();
    } catch (const zmq::error_t&) {  // port + 1 taken: try another pair
    }
  }
  ASSERT_NE(r1, nullptr);
  kv::KvIndex idx;
  EventPlane plane(idx, EventPlaneOptions{10, 1 << 20, 1000});
  plane.start();
  SourceSpec spec{"127.0.0.1", r0->port, 2, ""};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const uint64_t mask = *plane.slotsOf(spec.key());
  ASSERT_EQ(std::popcount(mask), 2);
  const int slot0 = std::countr_zero(mask), slot1 = 63 - std::countl_zero(mask);
  const std::string stored = goldenBatch("v_post42892_bytes_hashes");
  auto send1 = [&](uint64_t seq, const std::string& payload) {
    r1->send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    r1->send(zmq::buffer(seqFrame(seq)), zmq::send_flags::sndmore);
    r1->send(zmq::buffer(payload), zmq::send_flags::none);
  };
  ASSERT_TRUE(waitUntil([&] {
    r0->send("", seqFrame(0), stored);
    return overlap(idx, slot0) == 2;
  }));
  ASSERT_TRUE(waitUntil([&] {
    send1(7, stored);
    return overlap(idx, slot1) == 2;
  }));
  send1(0, goldenBatch("v_pre42892_positional_full"));  // rank 1 restarted: clears rank 1 only
  ASSERT_TRUE(waitUntil([&] { return plane.stats(spec.key())->restarts == 1; }));
  EXPECT_EQ(overlap(idx, slot1), 0u);
  EXPECT_EQ(overlap(idx, slot0), 2u);
  plane.stop();  // frees both inventories
  EXPECT_EQ(idx.blocks(slot0), 0u);
  EXPECT_FALSE(plane.slotsOf(spec.key()).has_value());
}

// Specs the event plane cannot follow are refused without touching the index.
TEST(EventPlane, InvalidSpecsAreRefused) {
  kv::KvIndex idx;
  EventPlane plane(idx, EventPlaneOptions{10, 1 << 20, 1000});
  plane.start();
  SourceSpec ok{"127.0.0.1", 1, 1, ""};
  plane.setSources({SourceSpec{"", 5557, 1, ""}, SourceSpec{"127.0.0.1", 65535, 2, ""},
                    SourceSpec{"127.0.0.1", 6000, kMaxRanks + 1, ""}, ok});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(ok.key()).has_value(); }));
  EXPECT_FALSE(plane.slotsOf(":5557").has_value());
  EXPECT_FALSE(plane.slotsOf("127.0.0.1:65535").has_value());
  EXPECT_FALSE(plane.slotsOf("127.0.0.1:6000").has_value());
  EXPECT_EQ(*plane.slotsOf(ok.key()), 1u);  // the valid source has worker 0
  plane.stop();
  EXPECT_EQ(idx.addWorker(), 0);  // stop() freed it, and the refused specs took none
  EXPECT_EQ(idx.addWorker(), 1);
}

}  // namespace
}  // namespace kvgate::events
