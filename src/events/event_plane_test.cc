// EventPlane over real ZMQ sockets on loopback: a PUB socket in the test plays the engine and
// sends the golden vLLM batches (tests/golden/engine_vectors.json) with sequence frames; the
// index's scores show what was applied. Waits are one-sided with wide margins.
#include "events/event_plane.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <zmq.hpp>

#include "../../tests/support/event_plane_options.h"
#include "../../tests/support/test_util.h"
#include "engines/trtllm.h"
#include "engines/vllm_event_encoder.h"
#include "kv/fingerprint.h"

namespace kvgate::events {
namespace {

using kvgate::testing::testOptions;

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
    pub.set(zmq::sockopt::sndhwm, 100000);  // bursts of thousands of batches are not dropped
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
  EventPlane plane(idx, testOptions(1000));
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
  EventPlane plane(idx, testOptions(1000));
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

// A batch storing one root block: tokens first..first+15 under engine hash `first` + 1.
std::string rootBlockBatch(uint32_t first) {
  engines::VllmEventOut e;
  e.block_hashes = {uint64_t{first} + 1};
  e.token_ids.resize(16);
  std::iota(e.token_ids.begin(), e.token_ids.end(), first);
  return engines::encodeVllmBatch(0, {e}, 0, engines::VllmEventEncoding::kMap);
}

// Whether the worker holds the root block of tokens first..first+15.
bool holds(const kv::KvIndex& idx, int slot, uint32_t first) {
  std::vector<uint32_t> t(16);
  std::iota(t.begin(), t.end(), first);
  uint64_t chain[1];
  kv::prefixChain(t.data(), t.size(), 16, std::nullopt, chain, 1);
  std::array<uint32_t, kv::kMaxWorkers> ov{};
  idx.score(chain, 1, uint64_t{1} << slot, ov);
  return ov[static_cast<size_t>(slot)] == 1;
}

// An engine with a replay ROUTER (engines.md §1.4, v0.26+ framing), answered on a thread from
// `history` (seq -> payload) unless `mute`.
struct ReplayEngine : Engine {
  zmq::socket_t router{ctx, zmq::socket_type::router};
  uint16_t replay_port = 0;
  std::mutex mu;
  std::map<uint64_t, std::string> history;
  std::vector<uint64_t> requests;  // start seqs asked for
  std::atomic<bool> mute{false}, stop{false};
  std::thread thread;
  ReplayEngine() {
    router.set(zmq::sockopt::linger, 0);
    router.bind("tcp://127.0.0.1:*");
    std::string ep = router.get(zmq::sockopt::last_endpoint);
    replay_port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
    thread = std::thread([this] { serve(); });
  }
  ~ReplayEngine() {
    stop = true;
    thread.join();
  }
  void serve() {
    while (!stop) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> f;
      bool more = true;
      while (more) {
        zmq::message_t m;
        (void)router.recv(m);
        more = m.more();
        f.push_back(std::move(m));
      }
      if (f.size() != 3 || f[1].size() != 0 || f[2].size() != 8) continue;  // [id, "", seq]
      uint64_t start = 0;
      for (int i = 0; i < 8; ++i)
        start = (start << 8) | static_cast<const uint8_t*>(f[2].data())[i];
      std::map<uint64_t, std::string> h;
      {
        std::lock_guard<std::mutex> g(mu);
        requests.push_back(start);
        h = history;
      }
      if (mute) continue;
      const std::string id(static_cast<const char*>(f[0].data()), f[0].size());
      auto reply = [&](const std::string& seq, const std::string& payload) {
        router.send(zmq::buffer(id), zmq::send_flags::sndmore);
        router.send(zmq::message_t(), zmq::send_flags::sndmore);
        router.send(zmq::buffer(std::string("kv")), zmq::send_flags::sndmore);
        router.send(zmq::buffer(seq), zmq::send_flags::sndmore);
        router.send(zmq::buffer(payload), zmq::send_flags::none);
      };
      for (auto& [seq, payload] : h)
        if (seq >= start) reply(seqFrame(seq), payload);
      reply(std::string(8, '\xff'), "");
    }
  }
  void keep(uint64_t seq, const std::string& payload) {
    std::lock_guard<std::mutex> g(mu);
    history[seq] = payload;
  }
  std::vector<uint64_t> asked() {
    std::lock_guard<std::mutex> g(mu);
    return requests;
  }
};

// An engine whose block size is not the rule's kvBlockSize: its stores could never match a
// prompt chain, so they are skipped and counted (reason block_size), and nothing is indexed.
TEST(EventPlane, StoresOfAnotherBlockSizeAreSkippedAndCounted) {
  Engine eng;
  kv::KvIndex idx;
  EventPlane plane(idx, testOptions(1000));
  plane.start();
  SourceSpec spec{"127.0.0.1", eng.port, 1, "kv"};
  spec.block_size = 32;  // the golden batch stores 2 blocks of 16 tokens
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));
  ASSERT_TRUE(waitUntil([&] {
    eng.send("kv", seqFrame(0), goldenBatch("v_post42892_bytes_hashes"));
    auto st = plane.stats(spec.key());
    return st && st->batches >= 1;
  }));
  auto st = *plane.stats(spec.key());
  EXPECT_EQ(st.block_size_mismatch, 2u);
  EXPECT_EQ(st.apply.stored_blocks, 0u);
  EXPECT_EQ(idx.blocks(slot), 0u);
  EXPECT_NE(plane.renderMetrics().find("reason=\"block_size\"} 2"), std::string::npos);
  plane.stop();
}

// A replay port nobody answers on: the first gap's replay times out (history lost: cleared, then
// the live batch applied); within the cooldown the next gap is not replayed (`busy`: the
// no-replay rule keeps the inventory), so a dead port costs one held stream per cooldown.
TEST(EventPlane, ABrokenReplayPortCostsOneTimeoutPerCooldown) {
  ReplayEngine eng;
  kv::KvIndex idx;
  EventPlaneOptions o = testOptions(1000);
  o.replay_timeout_ms = 300;
  o.replay_cooldown_ms = 60000;
  EventPlane plane(idx, o);
  plane.start();
  // Nothing listens on this port: bind a socket to find a free one, then close it.
  uint16_t dead_port = 0;
  {
    zmq::socket_t probe(eng.ctx, zmq::socket_type::router);
    probe.set(zmq::sockopt::linger, 0);
    probe.bind("tcp://127.0.0.1:*");
    std::string ep = probe.get(zmq::sockopt::last_endpoint);
    dead_port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
  }
  SourceSpec dead{"127.0.0.1", eng.port, 1, "kv", dead_port};
  plane.setSources({dead});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(dead.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(dead.key()));
  auto stats = [&] { return *plane.stats(dead.key()); };
  ASSERT_TRUE(waitUntil([&] {
    eng.send("kv", seqFrame(0), rootBlockBatch(0));
    return holds(idx, slot, 0);
  }));
  eng.send("kv", seqFrame(3), rootBlockBatch(300));  // 1..2 lost: a replay nobody answers
  ASSERT_TRUE(waitUntil([&] { return stats().replays_timeout == 1 && holds(idx, slot, 300); }));
  EXPECT_FALSE(holds(idx, slot, 0));  // the gap could not be covered: cleared
  EXPECT_EQ(stats().clears, 1u);
  eng.send("kv", seqFrame(5), rootBlockBatch(500));  // 4 lost: cooling down, no replay
  ASSERT_TRUE(waitUntil([&] { return holds(idx, slot, 500); }));
  EXPECT_EQ(stats().replays_busy, 1u);
  EXPECT_EQ(stats().replays_timeout, 1u);
  EXPECT_TRUE(holds(idx, slot, 300));  // kept: the no-replay rule, a gap of 1
  EXPECT_EQ(stats().clears, 1u);
  plane.stop();
}

// Gaps are replayed from the engine's ROUTER: covered (nothing cleared), history lost (cleared,
// then what the replay had), a replay that never ends (timeout: cleared), and a restart replayed
// from 0. Block "first=100*k" marks batch k.
TEST(EventPlane, GapsAndRestartsAreReplayed) {
  ReplayEngine eng;
  kv::KvIndex idx;
  EventPlaneOptions o = testOptions(1000);
  o.replay_timeout_ms = 500;
  EventPlane plane(idx, o);
  plane.start();
  SourceSpec spec{"127.0.0.1", eng.port, 1, "kv", eng.replay_port};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));
  auto stats = [&] { return *plane.stats(spec.key()); };
  auto batch = [&](uint64_t seq) {
    std::string b = rootBlockBatch(static_cast<uint32_t>(100 * seq));
    eng.keep(seq, b);
    return b;
  };
  ASSERT_TRUE(waitUntil([&] {
    eng.send("kv", seqFrame(0), batch(0));
    return holds(idx, slot, 0);
  }));
  // 1 and 2 are lost on the live stream; 3 arrives: 1..2 replayed, then 3.
  batch(1);
  batch(2);
  eng.send("kv", seqFrame(3), batch(3));
  ASSERT_TRUE(waitUntil([&] { return stats().replays_ok == 1 && holds(idx, slot, 300); }));
  EXPECT_TRUE(holds(idx, slot, 0));
  EXPECT_TRUE(holds(idx, slot, 100));
  EXPECT_TRUE(holds(idx, slot, 200));
  EXPECT_EQ(stats().replayed_batches, 2u);
  EXPECT_EQ(stats().lost_batches, 2u);
  EXPECT_EQ(stats().clears, 0u);
  EXPECT_EQ(eng.asked(), (std::vector<uint64_t>{1}));
  // 4 is gone from the engine's buffer too, 5 is there: history lost, the inventory cleared,
  // then 5 and 6 applied.
  batch(5);
  eng.send("kv", seqFrame(6), batch(6));
  ASSERT_TRUE(waitUntil([&] { return stats().replays_partial == 1 && holds(idx, slot, 600); }));
  EXPECT_FALSE(holds(idx, slot, 0));
  EXPECT_TRUE(holds(idx, slot, 500));
  EXPECT_EQ(stats().clears, 1u);
  // A replay that never answers times out: cleared, then the live batch applied.
  eng.mute = true;
  eng.send("kv", seqFrame(9), batch(9));
  ASSERT_TRUE(waitUntil([&] { return stats().replays_timeout == 1 && holds(idx, slot, 900); }));
  EXPECT_FALSE(holds(idx, slot, 600));
  EXPECT_EQ(stats().clears, 2u);
  // Live batches keep flowing after it.
  eng.send("kv", seqFrame(10), batch(10));
  ASSERT_TRUE(waitUntil([&] { return holds(idx, slot, 1000); }));
  // The engine restarts: its new batches 0 and 1 were missed, 2 arrives (back from 10): cleared,
  // 0..1 replayed from the new process, then 2.
  eng.mute = false;
  {
    std::lock_guard<std::mutex> g(eng.mu);
    eng.history.clear();
  }
  eng.keep(0, rootBlockBatch(5000));
  eng.keep(1, rootBlockBatch(5100));
  eng.send("kv", seqFrame(2), rootBlockBatch(5200));
  ASSERT_TRUE(waitUntil([&] { return stats().restarts == 1 && holds(idx, slot, 5200); }));
  EXPECT_TRUE(holds(idx, slot, 5000));
  EXPECT_TRUE(holds(idx, slot, 5100));
  EXPECT_FALSE(holds(idx, slot, 1000));
  EXPECT_EQ(stats().replays_ok, 2u);
  EXPECT_EQ(eng.asked().back(), 0u);
  // The inventory (asked of the event thread): the engine hashes in store order.
  auto inv = plane.inventory(spec.key(), 0, 0, 10);
  ASSERT_TRUE(inv.has_value()) << inv.error().what;
  EXPECT_EQ(inv->total, 3u);
  EXPECT_EQ(inv->hashes, (std::vector<uint64_t>{5001, 5101, 5201}));
  EXPECT_EQ(plane.inventory(spec.key(), 1, 0, 10).error().code, 404);  // one rank only
  EXPECT_EQ(plane.inventory("127.0.0.1:1", 0, 0, 10).error().code, 404);
  EXPECT_EQ(stats().errors, 0u);
  plane.stop();
}

// While a replay runs, live batches are held up to kMaxHeldBatches; one more abandons the replay
// (cleared: the gap was not replayed) and every held batch is applied in order.
TEST(EventPlane, TooManyHeldBatchesAbandonTheReplay) {
  ReplayEngine eng;
  eng.mute = true;
  kv::KvIndex idx;
  EventPlaneOptions o = testOptions(100000);
  o.replay_timeout_ms = 600000;  // never: only the overflow ends this replay
  EventPlane plane(idx, o);
  plane.start();
  SourceSpec spec{"127.0.0.1", eng.port, 1, "kv", eng.replay_port};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));
  auto stats = [&] { return *plane.stats(spec.key()); };
  ASSERT_TRUE(waitUntil([&] {
    eng.send("kv", seqFrame(0), rootBlockBatch(0));
    return holds(idx, slot, 0);
  }));
  const uint64_t last = 2 + kMaxHeldBatches;  // batch 1 lost; 2..last live (one past the bound)
  for (uint64_t seq = 2; seq <= last; ++seq)
    eng.send("kv", seqFrame(seq), rootBlockBatch(static_cast<uint32_t>(16 * seq)));
  ASSERT_TRUE(waitUntil([&] { return stats().replays_overflow == 1; }, 30000));
  ASSERT_TRUE(waitUntil([&] { return holds(idx, slot, static_cast<uint32_t>(16 * last)); }));
  EXPECT_FALSE(holds(idx, slot, 0));  // cleared: batch 1 was never replayed
  EXPECT_TRUE(holds(idx, slot, 32));  // batch 2, the first held
  EXPECT_EQ(stats().batches, 1 + (last - 1));
  EXPECT_EQ(stats().lost_batches, 1u);
  plane.stop();
}

// The subscriber's connection state (ZMQ socket monitor): connected once the SUB reaches the
// engine, disconnected when the engine goes away, a reconnection counted when it is back, and the
// lookup's connected_ns stamped with the plane's clock.
TEST(EventPlane, SubscriberConnectionsAreTracked) {
  auto eng = std::make_unique<Engine>();
  const uint16_t port = eng->port;
  kv::KvIndex idx;
  common::ManualClock clock(5'000'000'000);
  EventPlane plane(idx, testOptions(1000), clock);
  plane.start();
  SourceSpec spec{"127.0.0.1", port, 1, ""};
  plane.setSources({spec});
  auto connected = [&] {
    auto st = plane.stats(spec.key());
    return st && st->connected;
  };
  ASSERT_TRUE(waitUntil(connected));
  EXPECT_EQ(plane.snapshot()->at(spec.key()).connected_ns, 5'000'000'000);
  EXPECT_NE(plane.renderMetrics().find("loxilb_kv_subscriber_connected{source=\"127.0.0.1:" +
                                       std::to_string(port) + "\"} 1"),
            std::string::npos);
  eng.reset();  // the engine goes away
  ASSERT_TRUE(waitUntil([&] { return !connected(); }));
  EXPECT_EQ(plane.snapshot()->at(spec.key()).connected_ns, -1);
  clock.advance(std::chrono::seconds(3));
  // Back on the same port: ZMQ reconnects by itself (100 ms backoff, doubling).
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(waitUntil(connected, 20000));
  EXPECT_EQ(plane.stats(spec.key())->reconnects, 1u);
  EXPECT_EQ(plane.snapshot()->at(spec.key()).connected_ns, 8'000'000'000);
  plane.stop();
}

// LoRA names seen in stored events are published for the request path (adapters()).
TEST(EventPlane, AdapterNamesArePublished) {
  Engine eng;
  kv::KvIndex idx;
  EventPlane plane(idx, testOptions(1000));
  plane.start();
  SourceSpec spec{"127.0.0.1", eng.port, 1, ""};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  engines::VllmEventOut e;
  e.block_hashes = {77};
  e.token_ids.assign(16, 5);
  e.lora_name = "sql-lora";
  const std::string b = engines::encodeVllmBatch(0, {e}, 0, engines::VllmEventEncoding::kMap);
  uint64_t seq = 0;
  ASSERT_TRUE(waitUntil([&] {
    eng.send("", seqFrame(seq++), b);
    return plane.adapters()->count("sql-lora") == 1;
  }));
  EXPECT_EQ(plane.adapters()->size(), 1u);
  // The source's names go with it.
  plane.setSources({});
  ASSERT_TRUE(waitUntil([&] { return plane.adapters()->empty(); }));
  plane.stop();
}

// A fake TensorRT-LLM drain: a loopback listener that answers each connection with the next
// queued body (after reading the request), or, when `silent`, accepts and never answers.
struct FakeDrain {
  int fd = -1;
  uint16_t port = 0;
  std::mutex mu;
  std::deque<std::string> bodies;
  std::atomic<bool> silent{false}, stop{false};
  std::atomic<int> served{0};
  std::vector<int> held;  // silent connections kept open
  std::thread thread;
  FakeDrain() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread = std::thread([this] { run(); });
  }
  ~FakeDrain() {
    stop = true;
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    thread.join();
    for (int c : held) ::close(c);
  }
  void run() {
    while (!stop) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return;
      if (silent) {
        held.push_back(c);
        continue;
      }
      // Read the whole request head first: closing with unread bytes would reset the connection.
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string body = "[]";
      {
        std::lock_guard<std::mutex> g(mu);
        if (!bodies.empty()) {
          body = bodies.front();
          bodies.pop_front();
        }
      }
      const std::string resp =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      (void)::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
      ++served;
    }
  }
  void queue(std::string b) {
    std::lock_guard<std::mutex> g(mu);
    bodies.push_back(std::move(b));
  }
};

// TensorRT-LLM's drain: answers applied by event_id; an answer the gateway cannot decode lost
// events for good (the drain is destructive), so the inventory is cleared and the next answer is
// a new baseline; an engine that never answers is cut at the timeout and stop() does not wait on
// it.
TEST(EventPlane, TrtllmDrainAppliesClearsAndTimesOut) {
  FakeDrain eng;
  kv::KvIndex idx;
  EventPlaneOptions o = testOptions(1000);
  o.drain_poll_ms = 20;
  o.drain_timeout_ms = 2000;  // wide: a slow exchange on a busy machine must not count as lost
  EventPlane plane(idx, o);
  plane.start();
  SourceSpec spec{"127.0.0.1", eng.port, 1, "", 0, "blockhash_trtllm", true};
  std::vector<uint32_t> t0(16), t1(16);
  std::iota(t0.begin(), t0.end(), 0);
  std::iota(t1.begin(), t1.end(), 500);
  eng.queue("[" + engines::trtllmStoredJson(1, 0, {11}, t0, 16) + "]");
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));
  ASSERT_TRUE(waitUntil([&] { return holds(idx, slot, 0); }));
  EXPECT_TRUE(plane.stats(spec.key())->connected);
  eng.queue(R"([{"event_id":2,"data":{"type":"removed","block_hashes":[-1]}}])");  // rejected
  eng.queue("[" + engines::trtllmStoredJson(7, 0, {12}, t1, 16) + "]");
  ASSERT_TRUE(waitUntil([&] { return holds(idx, slot, 500); }));
  EXPECT_FALSE(holds(idx, slot, 0));  // cleared with the rejected answer
  auto st = *plane.stats(spec.key());
  EXPECT_EQ(st.decode_errors, 1u);
  EXPECT_EQ(st.clears, 1u);
  EXPECT_EQ(st.lost_batches, 0u);  // event 7 after the reset is a new baseline, not a gap
  // Silent engine: every exchange times out; the source reads as disconnected.
  eng.silent = true;
  ASSERT_TRUE(waitUntil([&] { return !plane.stats(spec.key())->connected; }));
  plane.stop();  // returns within a drain timeout (the test would hang otherwise)
}

// Specs the event plane cannot follow are refused without touching the index.
TEST(EventPlane, InvalidSpecsAreRefused) {
  kv::KvIndex idx;
  EventPlane plane(idx, testOptions(1000));
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
