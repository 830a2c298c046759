// End to end over real processes and sockets: `kvgate sim --kv-events` publishes vLLM KV events
// for the prompts it caches; a raw ZMQ SUB checks the bytes (vLLM's sha256_cbor hashes with
// PYTHONHASHSEED "0": the golden `plain_2_blocks` event integers), and the EventPlane fed by the
// same stream gives the prompt's golden fingerprint chain its full overlap.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <zmq.hpp>

#include "../../tests/support/event_plane_options.h"
#include "../../tests/support/test_util.h"
#include "engines/vllm_events.h"
#include "events/event_plane.h"
#include "http/client.h"
#include "kv/fingerprint.h"

extern char** environ;

namespace kvgate::events {
namespace {

using kvgate::testing::testOptions;

struct Sim {  // a `kvgate sim` child process; stopped (SIGTERM, then waited for) on destruction
  pid_t pid = -1;
  nlohmann::json ready;
  explicit Sim(std::vector<std::string> args) {
    int fds[2];
    if (pipe(fds) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    args.insert(args.begin(), {KVGATE_BIN, "sim"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid, KVGATE_BIN, &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    std::string line;
    char c;
    pollfd pfd{fds[0], POLLIN, 0};
    // The ready line within 15 s (one-sided bound), or the test fails on an empty line.
    while (line.size() < 65536 && ::poll(&pfd, 1, 15000) == 1 && read(fds[0], &c, 1) == 1 &&
           c != '\n')
      line.push_back(c);
    close(fds[0]);
    ready = nlohmann::json::parse(line, nullptr, false);
  }
  ~Sim() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
  }
};

using kvgate::testing::waitUntil;

std::string complete(const std::string& url, uint32_t first, uint32_t n) {
  nlohmann::json prompt = nlohmann::json::array();
  for (uint32_t i = 0; i < n; ++i) prompt.push_back(first + i);
  nlohmann::json body = {{"model", "sim-model"}, {"prompt", prompt}, {"max_tokens", 1}};
  auto r = http::fetch(url, "POST", "/v1/completions", body.dump());
  return r ? std::to_string(r->status) : r.error().what;
}

TEST(SimKvEvents, PublishedStreamMatchesVllmAndFillsTheIndex) {
  Sim sim({"--workers", "1", "--port", "0", "--kv-events", "--kv-events-topic", "kv",
           "--kv-events-hash-seed", "0"});
  ASSERT_FALSE(sim.ready.is_discarded());
  const auto& w = sim.ready.at("workers").at(0);
  const std::string url = w.at("url").get<std::string>();
  const auto kv_port = w.at("kv_events_port").get<uint16_t>();

  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "kv");
  sub.set(zmq::sockopt::rcvtimeo, 200);
  sub.connect("tcp://127.0.0.1:" + std::to_string(kv_port));
  kv::KvIndex idx;
  EventPlane plane(idx, testOptions(1000));
  plane.start();
  SourceSpec spec{"127.0.0.1", kv_port, 1, "kv"};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));

  // PUB/SUB joins asynchronously: distinct throwaway prompts until one batch reaches both.
  uint32_t k = 1;
  zmq::message_t m;
  ASSERT_TRUE(waitUntil([&] {
    EXPECT_EQ(complete(url, 100000 * k++, 16), "200");
    bool got = false;
    while (sub.recv(m, zmq::recv_flags::dontwait)) got = got || !m.more();
    return got && plane.stats(spec.key()) && plane.stats(spec.key())->batches > 0;
  }));
  while (sub.recv(m, zmq::recv_flags::dontwait)) {
  }

  // The frames of the next whole message on `sub`, into `frames`.
  std::vector<zmq::message_t> frames;
  auto nextMessage = [&] {
    zmq::message_t f;
    while (sub.recv(f, zmq::recv_flags::dontwait)) {
      const bool more = f.more();
      frames.push_back(std::move(f));
      if (!more) return true;
    }
    return false;
  };
  // Tokens 0..63: four new blocks, stored in one batch.
  ASSERT_EQ(complete(url, 0, 64), "200");
  ASSERT_TRUE(waitUntil(nextMessage));
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].to_string(), "kv");
  ASSERT_EQ(frames[1].size(), 8u);
  engines::KvEventBatch batch;
  std::string err;
  ASSERT_TRUE(engines::decodeVllmBatch(frames[2].to_string_view(), batch, err)) << err;
  ASSERT_EQ(batch.events.size(), 1u);
  const auto& e = batch.events[0];
  ASSERT_EQ(e.block_hashes.size(), 4u);
  // engine_vectors.json plain_2_blocks (sha256_cbor, PYTHONHASHSEED "0", tokens 0..31).
  EXPECT_EQ(e.block_hashes[0], 12687895063098490012ull);
  EXPECT_EQ(e.block_hashes[1], 1814341696565857452ull);
  EXPECT_FALSE(e.has_parent);
  EXPECT_EQ(e.token_ids.size(), 64u);
  const uint64_t block3 = e.block_hashes[3];

  // The index fed by the same stream holds the whole golden chain of tokens 0..63.
  std::vector<uint32_t> tokens(64);
  std::iota(tokens.begin(), tokens.end(), 0);
  uint64_t chain[4];
  kv::prefixChain(tokens.data(), 64, 16, std::nullopt, chain, 4);
  ASSERT_TRUE(waitUntil([&] {
    std::array<uint32_t, kv::kMaxWorkers> ov{};
    idx.score(chain, 4, uint64_t{1} << slot, ov);
    return ov[static_cast<size_t>(slot)] == 4;
  }));
  // Extending the prompt stores only the new block, chained on block 3's hash.
  ASSERT_EQ(complete(url, 0, 80), "200");
  frames.clear();
  ASSERT_TRUE(waitUntil(nextMessage));
  ASSERT_TRUE(engines::decodeVllmBatch(frames.back().to_string_view(), batch, err)) << err;
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_TRUE(batch.events[0].has_parent);
  EXPECT_EQ(batch.events[0].parent, block3);
  EXPECT_EQ(batch.events[0].block_hashes.size(), 1u);
  plane.stop();
}

// A full cache evicts (BlockRemoved before the new BlockStored, in one batch), and
// /reset_prefix_cache empties it (AllBlocksCleared): the index follows both.
TEST(SimKvEvents, EvictionsAndResetsReachTheIndex) {
  // 5 blocks: a 64-token prompt's 4 and the block its first generated token needs.
  Sim sim({"--workers", "1", "--port", "0", "--num-blocks", "5", "--kv-events-port", "0",
           "--kv-events-encoding", "positional"});
  ASSERT_FALSE(sim.ready.is_discarded());
  const auto& w = sim.ready.at("workers").at(0);
  const std::string url = w.at("url").get<std::string>();
  const auto kv_port = w.at("kv_events_port").get<uint16_t>();
  kv::KvIndex idx;
  EventPlane plane(idx, testOptions(1000));
  plane.start();
  SourceSpec spec{"127.0.0.1", kv_port, 1, ""};
  plane.setSources({spec});
  ASSERT_TRUE(waitUntil([&] { return plane.slotsOf(spec.key()).has_value(); }));
  const int slot = std::countr_zero(*plane.slotsOf(spec.key()));
  auto overlapOf = [&](uint32_t first) {
    std::vector<uint32_t> t(64);
    std::iota(t.begin(), t.end(), first);
    uint64_t chain[4];
    kv::prefixChain(t.data(), 64, 16, std::nullopt, chain, 4);
    std::array<uint32_t, kv::kMaxWorkers> ov{};
    idx.score(chain, 4, uint64_t{1} << slot, ov);
    return ov[static_cast<size_t>(slot)];
  };
  // Join: prompts of 4 blocks at distinct offsets until one lands (each evicts the previous).
  uint32_t first = 500000;
  ASSERT_TRUE(waitUntil([&] {
    first += 1000;
    EXPECT_EQ(complete(url, first, 64), "200");
    return overlapOf(first) == 4;
  }));
  // Prompt 0..63 takes the whole cache: the previous prompt's blocks are evicted.
  ASSERT_EQ(complete(url, 0, 64), "200");
  ASSERT_TRUE(waitUntil([&] { return overlapOf(0) == 4; }));
  EXPECT_EQ(overlapOf(first), 0u);
  EXPECT_EQ(idx.blocks(slot), 4u);
  ASSERT_TRUE(http::fetch(url, "POST", "/reset_prefix_cache").has_value());
  ASSERT_TRUE(waitUntil([&] { return idx.blocks(slot) == 0; }));
  // (the source's counters are published after the index applied the batch: wait for them too)
  EXPECT_TRUE(waitUntil([&] { return plane.stats(spec.key())->apply.clears >= 1u; }));
  plane.stop();
}

}  // namespace
}  // namespace kvgate::events
