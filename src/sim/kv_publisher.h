// KvPublisher: a simulated vLLM worker's KV-event stream (vLLM's --kv-events-config with the
// ZMQ publisher): a PUB socket bound on the worker's event port sending, per batch, the three
// frames [topic, seq (8 bytes big-endian, from 0), msgpack batch] (engines.md §1.3), with block
// hashes computed as vLLM computes them (sha256_cbor or xxhash_cbor over the block tokens, root
// NONE_HASH = H(CBOR(seed)); the seed is random per process unless given, as an xxhash-configured
// vLLM without PYTHONHASHSEED). The simulator's prefix cache (its own block keys) drives it:
// stored() when a request's prompt blocks enter the cache, evicted() when one leaves; flush()
// sends what was collected as one batch (one per admitted request, like one scheduler step).
// Sends never block: beyond the high-water mark ZMQ drops, and the subscriber sees the gap.
// Not simulated yet: blocks completed during decode, the replay socket, DP ranks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
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
  std::string hash_seed;  // PYTHONHASHSEED; "" = random per process
};

class KvPublisher {
 public:
  KvPublisher(const KvEventsConfig& cfg, size_t block_size, std::string seed);
  ~KvPublisher();
  Result<uint16_t> bind(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }

  // The prompt's blocks [first, first + count) (sim cache keys `keys`) entered the cache.
  void stored(const std::vector<uint32_t>& prompt, const std::vector<uint64_t>& keys, size_t first,
              size_t count);
  void evicted(uint64_t key);
  void cleared();  // the whole cache was emptied (reset_prefix_cache)
  void flush();
  uint64_t batchesSent() const { return seq_; }

 private:
  KvEventsConfig cfg_;
  size_t block_size_;
  std::string none_hash_;
  std::unique_ptr<zmq::context_t> ctx_;
  std::unique_ptr<zmq::socket_t> pub_;
  uint16_t port_ = 0;
  uint64_t seq_ = 0;
  std::vector<engines::VllmEventOut> pending_;
  std::unordered_map<uint64_t, uint64_t> engine_hash_;  // sim key -> published hash
};

// A random PYTHONHASHSEED-like string for this process (32 hex digits).
std::string randomHashSeed();

}  // namespace kvgate::sim
