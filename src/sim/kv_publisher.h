// KvPublisher: a simulated vLLM worker's KV-event stream (vLLM's --kv-events-config with the
// ZMQ publisher): a PUB socket bound on the worker's event port sending, per batch, the three
// frames [topic, seq (8 bytes big-endian, from 0), msgpack batch] (engines.md §1.3), with block
// hashes computed as vLLM computes them (sha256_cbor or xxhash_cbor over the block tokens, root
// NONE_HASH = H(CBOR(seed)); the seed is random per process unless given, as an xxhash-configured
// vLLM without PYTHONHASHSEED). The simulator's prefix cache (its own block keys) drives it:
// stored() when a request's prompt blocks enter the cache, evicted() when one leaves; flush()
// sends what was collected as one batch (one per admitted request, like one scheduler step).
// Sends never block: beyond the high-water mark ZMQ drops, and the subscriber sees the gap.
// Replay (engines.md §1.4, vLLM v0.26+ framing): with a replay port, a ROUTER bound there answers
// ["", start_seq (8 bytes BE)] with ["", topic, seq, payload] for every buffered batch with
// seq >= start_seq, then the end marker ["", topic, ff x 8, ""]; the buffer keeps the last
// replay_buffer batches (vLLM's buffer_steps). The ROUTER runs on its own thread; the buffer is
// shared under a mutex. Faults: dropNext(n) keeps the next n batches off the live stream (they
// stay in the replay buffer: a gap the subscriber can replay); restart() is an engine restart:
// numbering from 0 again, replay buffer and published hashes forgotten.
// With --engine sglang the events are SGLang's: positional, one BlockStored per page, page hashes
// SHA-256(parent digest || tokens as u32 LE) published as signed int64 (engines/sglang.h).
// With --engine trtllm there is no ZMQ: events queue (at most replay_buffer, oldest dropped, as
// TensorRT-LLM's event_buffer_max_size) until POST /kv_cache_events drains them as TensorRT-LLM's
// JSON (engines/trtllm.h), block keys v1 chained from the root; a cache reset is sent as removals.
// Not simulated yet: blocks completed during decode, DP ranks.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "engines/vllm_event_encoder.h"
#include "engines/vllm_hash.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace kvgate::sim {

struct KvEventsConfig {
  bool enabled = false;
  // First worker's port (worker i: port + i; with --hosts every worker on its own address uses
  // the same port, as one vLLM per host does); 0 = a free port each.
  uint16_t port = 0;
  bool same_port = false;  // --hosts: every worker publishes on `port`
  std::string topic;
  engines::VllmEventEncoding encoding = engines::VllmEventEncoding::kMap;
  engines::VllmHashAlgo algo = engines::VllmHashAlgo::kSha256Cbor;
  std::string hash_seed;         // PYTHONHASHSEED; "" = random per process
  bool sglang = false;           // --engine sglang: SGLang's events (engines/sglang.h)
  bool trtllm = false;           // --engine trtllm: events drained by POST /kv_cache_events
  bool full_report = false;      // --kv-events-full-report: stores re-send a prompt's cached blocks
  uint16_t replay_port = 0;      // first worker's replay ROUTER port (like `port`); 0 = no replay
  bool replay = false;           // --kv-events-replay-port given
  size_t replay_buffer = 10000;  // batches kept for replay
  int dp_ranks = 1;              // --kv-events-dp-ranks: data-parallel engines per worker
};

class KvPublisher {
 public:
  // `dp_rank`: the data-parallel engine this publisher speaks for (the batches' third element).
  KvPublisher(const KvEventsConfig& cfg, size_t block_size, std::string seed, int dp_rank = 0);
  ~KvPublisher();
  Result<uint16_t> bind(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }
  // Binds the replay ROUTER (port 0: a free one) and starts its thread.
  Result<uint16_t> bindReplay(const std::string& host, uint16_t port);
  uint16_t replayPort() const { return replay_port_; }
  void dropNext(uint64_t n);  // fault: the next n batches are not sent live
  void restart();             // fault: a publisher restart (sequence from 0, buffer emptied)
  // TensorRT-LLM: the JSON array of the events queued since the last call, which are dropped.
  std::string drain();

  // The prompt's blocks [first, first + count) (sim cache keys `keys`) entered the cache.
  void stored(const std::vector<uint32_t>& prompt, const std::vector<uint64_t>& keys, size_t first,
              size_t count);
  void evicted(uint64_t key);
  void cleared();  // the whole cache was emptied (reset_prefix_cache)
  void flush();
  uint64_t batchesSent() const { return seq_; }

 private:
  void serveReplay();
  void queueDrain(std::string event);
  KvEventsConfig cfg_;
  size_t block_size_;
  std::string none_hash_;
  std::unique_ptr<zmq::context_t> ctx_;
  std::unique_ptr<zmq::socket_t> pub_;
  uint16_t port_ = 0;
  uint64_t seq_ = 0;
  std::vector<engines::VllmEventOut> pending_;
  std::unordered_map<uint64_t, uint64_t> engine_hash_;  // sim key -> published hash
  uint64_t drop_next_ = 0;
  int dp_rank_ = 0;
  std::deque<std::string> drain_;  // TensorRT-LLM: queued events (JSON), at most replay_buffer
  // Replay: the ROUTER (its thread only) and the buffer (under buf_mu_).
  std::unique_ptr<zmq::socket_t> router_;
  uint16_t replay_port_ = 0;
  std::mutex buf_mu_;
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // (seq, payload)
  std::atomic<bool> stop_{false};
  std::thread replay_thread_;
};

// A random PYTHONHASHSEED-like string for this process (32 hex digits).
std::string randomHashSeed();

}  // namespace kvgate::sim
