// `kvgate bench kvflood`: a KV publisher that floods (issue 28 §2 faults). It binds a ZMQ PUB as
// a vLLM engine does and sends vLLM KV-event batches [topic, seq (8 bytes BE), msgpack batch] as
// fast as --rate allows: each batch --batch BlockStored events of one block (16 token ids, the
// parent the previous block, hashes from a counter: never seen before, so every one is new to the
// index) chained from the root within the batch (one new prompt per batch, as an engine's
// scheduler step stores it), paced every millisecond. --restart-at S closes the socket after S seconds, waits
// 500 ms and binds again with the sequence back at 0 (an engine restart). Sends never block:
// beyond ZMQ's high-water mark (--sndhwm, default 1000 messages) messages are dropped, as the
// engine's would be (silently: a PUB socket reports no drop, the subscriber sees the gap).
// Prints one JSON line: events and batches offered, seconds, restarts.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/net.h"
#include "engines/vllm_event_encoder.h"

namespace kvgate::bench {
namespace {

std::string seqBytes(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return s;
}

}  // namespace

int kvFloodMain(int argc, char** argv) {
  std::string bind;
  uint64_t rate = 1000000, seconds = 10, batch = 64, restart_at = 0, sndhwm = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    bool ok = true;
    if (a == "--bind") bind = v;
    else if (a == "--rate") ok = net::parseUint(v, 100000000, rate) && rate > 0;
    else if (a == "--seconds") ok = net::parseUint(v, 86400, seconds) && seconds > 0;
    else if (a == "--batch") ok = net::parseUint(v, 4096, batch) && batch > 0;
    else if (a == "--restart-at") ok = net::parseUint(v, 86400, restart_at);
    else if (a == "--sndhwm") ok = net::parseUint(v, 10000000, sndhwm);
    else {
      std::fprintf(stderr,
                   "usage: kvgate bench kvflood --bind tcp://IP:PORT [--rate EVENTS_PER_S] "
                   "[--seconds S] [--batch N] [--restart-at S] [--sndhwm N]\n");
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate bench kvflood: bad value for %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  if (bind.empty()) {
    std::fprintf(stderr, "kvgate bench kvflood: --bind tcp://IP:PORT is required\n");
    return 2;
  }
  zmq::context_t ctx(1);
  auto open = [&] {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pub);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::sndhwm, static_cast<int>(sndhwm));
    s->bind(bind);
    return s;
  };
  std::unique_ptr<zmq::socket_t> pub;
  try {
    pub = open();
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "kvgate bench kvflood: bind %s: %s\n", bind.c_str(), e.what());
    return 1;
  }
  std::printf("{\"ready\":true}\n");
  std::fflush(stdout);
  std::vector<engines::VllmEventOut> events(batch);
  std::vector<uint32_t> tokens(16);
  uint64_t next_hash = 0x9e3779b97f4a7c15ULL, seq = 0, sent_events = 0, sent_batches = 0;
  uint64_t restarts = 0;
  std::optional<uint64_t> parent;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::seconds(seconds);
  bool restarted = restart_at == 0;
  auto pace_from = t0;       // pacing restarts with the publisher (no catch-up burst)
  uint64_t pace_base = 0;    // events offered before pace_from
  for (uint64_t tick = 1;; ++tick) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= end) break;
    if (!restarted && now - t0 >= std::chrono::seconds(restart_at)) {
      restarted = true;
      pub.reset();  // the engine dies...
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      pub = open();  // ...and comes back numbering from 0 with an empty cache
      seq = 0;
      parent.reset();
      ++restarts;
      pace_from = std::chrono::steady_clock::now();
      pace_base = sent_events;
    }
    // Pace: by this millisecond, rate x elapsed events should have been offered.
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pace_from).count();
    const uint64_t due = pace_base + static_cast<uint64_t>(elapsed * static_cast<double>(rate));
    while (sent_events + batch <= due + batch / 2) {
      parent.reset();  // each batch a new prompt's blocks, chained from the root
      for (auto& e : events) {
        e.kind = engines::VllmEventOut::Kind::kStored;
        e.block_hashes.assign(1, next_hash);
        e.parent = parent;
        for (size_t k = 0; k < tokens.size(); ++k)
          tokens[k] = static_cast<uint32_t>((next_hash >> (k % 8)) & 0x7fff);
        e.token_ids = tokens;
        parent = next_hash;
        next_hash = next_hash * 6364136223846793005ULL + 1442695040888963407ULL;
      }
      const double ts =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      const std::string payload =
          engines::encodeVllmBatch(ts, events, 0, engines::VllmEventEncoding::kMap);
      const std::string sb = seqBytes(seq++);
      pub->send(zmq::buffer(std::string_view()), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub->send(zmq::buffer(sb), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      pub->send(zmq::buffer(payload), zmq::send_flags::dontwait);
      sent_events += batch;
      ++sent_batches;
    }
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(tick));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"events\":%llu,\"batches\":%llu,\"seconds\":%.2f,\"events_per_s\":%.0f,"
      "\"restarts\":%llu}\n",
      static_cast<unsigned long long>(sent_events), static_cast<unsigned long long>(sent_batches),
      secs, static_cast<double>(sent_events) / secs, static_cast<unsigned long long>(restarts));
  return 0;
}

}  // namespace kvgate::bench
