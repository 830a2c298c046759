// EventPlane: the KV-event subscribers of the gateway, on one thread that owns every ZMQ socket
// and is the KV index's only writer.
//
// One source per worker event address (`host:port`, the key shared by every rule that names it),
// one ZMQ SUB per data-parallel rank at port + rank (engines.md §1.2), subscribed to the rule's
// topic prefix. Each rank is its own inventory in the index (its own sequence, clears and
// restarts: ranks are separate engines); slotsOf() gives the source's worker bits, and a
// worker's overlap is the best of its ranks'. A spec with an empty host, a port range past 65535
// or more than kMaxRanks ranks is refused (logged) and not followed. Each message must be three
// frames [topic, seq (8 bytes big-endian), msgpack batch]; anything else is counted as malformed
// and dropped. Batches go through the source's SequenceTracker (events/sequence.h) and the vLLM
// decoder; a batch that does not decode changes nothing. ZMQ reconnects by itself with backoff (100
// ms doubling to 5 s); a message is at most max_message_bytes (ZMQ_MAXMSGSIZE: a larger one drops
// the connection) and at most rcv_hwm messages wait per socket (ZMQ_RCVHWM: beyond, ZMQ drops, and
// the sequence gap shows it).
//
// Replay (engines.md §1.4), when the source has a replay port (kvReplayPort; rank r at port + r):
// each rank keeps a DEALER connected to the engine's ROUTER. A gap (or a restart whose first batch
// is not 0) sends ["", first missing seq (8 bytes BE)]; while the replay runs, live batches of
// that rank are held (at most kMaxHeldBatches / kMaxHeldBytes, else the replay is abandoned as
// "overflow"); replayed batches inside the gap are applied in order, others ignored; the end
// marker (last frame empty) finishes it, and the held live batches are then processed in order.
// The inventory is cleared only when the replay cannot cover the gap: its first batch is past the
// first missing one ("partial"), it ends short, or it times out (replay_timeout_ms; the DEALER is
// then closed and reopened so a late answer cannot be taken for the next one). At most
// max_replays run at once; a gap meanwhile follows the no-replay rule (SequenceTracker). When a
// replay request cannot be queued (the DEALER's queue is full: outcome unsent), or a replay times
// out, overflows or finds history lost, that rank's gaps follow the no-replay rule for
// replay_cooldown_ms (30 s): a wrong or dead replay port costs one timed-out replay (live batches
// held for replay_timeout_ms, then a clear) per cooldown, not one per gap. (A request is queued
// while the DEALER connects, so a replay asked right after a reconnect still reaches the engine.)
//
// Threads: setSources() and the readers (slotOf, stats) run on any thread; the event thread applies
// source changes at its next poll (at most poll_ms later).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "config/rule.h"
#include "engines/trtllm.h"
#include "kv/kv_index.h"
#include "kv/worker_lookup.h"

namespace zmq {
class context_t;
}
namespace kvgate::http {
class TlsFiles;  // http/tls.h
}

namespace kvgate::events {

constexpr int kMaxRanks = 16;

struct SourceSpec {
  std::string host;          // the worker's event address
  uint16_t port = 5557;      // kvZmqPort; rank r publishes on port + r
  int dp_ranks = 1;          // kvDpRankCount
  std::string topic;         // SUB prefix filter ("" = everything)
  uint16_t replay_port = 0;  // kvReplayPort: the engine's replay ROUTER (rank r: + r); 0 = none
  std::string hash_algo = "sha256_cbor";  // kvHashAlgo (the declared hash contract's algorithm)
  // TensorRT-LLM: events drained with POST http://host:port/kv_cache_events (port = the serving
  // port) instead of a ZMQ SUB; attention_dp_rank selects the rank.
  bool http_drain = false;
  // kvBlockSize: the tokens per block Tier 1.5 cuts prompts into. Stores of another size can
  // never match a prompt's chain: they are skipped and counted (reason block_size), and logged.
  uint32_t block_size = 16;
  // TensorRT-LLM drained over TLS (a security 2 rule): the rule's mtls_backend fields (identity:
  // a change reopens the source), the client context built from them (set by the data plane's
  // TLS plan; a reload replaces it without reopening) and the name checked (the endpoint's
  // domainName, else its IP). Unset: plain HTTP.
  std::optional<http::ClientTlsOptions> tls{};
  std::shared_ptr<http::TlsFiles> tls_files{};
  std::string tls_name{};
  std::string key() const { return host + ":" + std::to_string(port); }
  bool operator==(const SourceSpec& o) const {  // tls_files: not identity (see above)
    return host == o.host && port == o.port && dp_ranks == o.dp_ranks && topic == o.topic &&
           replay_port == o.replay_port && hash_algo == o.hash_algo &&
           http_drain == o.http_drain && block_size == o.block_size && tls == o.tls &&
           tls_name == o.tls_name;
  }
};

struct EventPlaneOptions {
  int poll_ms = 50;
  // A subscriber socket queues at most rcv_hwm messages of at most max_message_bytes each
  // (LOXILB_KV_RCV_HWM, LOXILB_KV_MAX_MESSAGE_BYTES): 2 GiB worst case per socket by default,
  // reached only when the event thread falls behind a publisher sending maximal batches. A
  // vLLM batch is one engine step (8k new tokens: ~100 KiB), so 8 MiB leaves a wide margin.
  int64_t max_message_bytes = 8 << 20;
  int rcv_hwm = 256;
  int replay_timeout_ms = 5000;    // a replay must end within this
  int max_replays = 4;             // replays running at once (all sources)
  int replay_cooldown_ms = 30000;  // after a failed replay, gaps of that rank are not replayed
  // LLB_KV_NONE_HASH_SEED: the engines' declared PYTHONHASHSEED; when set, sources whose
  // hash_algo is sha256_cbor or xxhash_cbor have their block hashes checked (hash_contract.h).
  std::string none_hash_seed;
  int drain_poll_ms = 100;      // HTTP-drain sources (TensorRT-LLM): POST /kv_cache_events period
  int drain_timeout_ms = 2000;  // and its timeout
};

constexpr size_t kMaxHeldBatches = 4096;    // live batches held per rank during a replay
constexpr size_t kMaxHeldBytes = 64 << 20;  // and their bytes

// Counters of one source (all ranks), monotonic.
struct SourceStats {
  uint64_t batches = 0;  // applied
  uint64_t duplicate_batches = 0;
  uint64_t lost_batches = 0;    // sequence gaps
  uint64_t restarts = 0;        // sequence went back
  uint64_t clears = 0;          // inventory cleared by the sequence rules (restart, large gap);
                                // AllBlocksCleared events are apply.clears
  uint64_t malformed = 0;       // wrong frame count or seq size; replay answers nobody asked for
  uint64_t errors = 0;          // ZMQ or allocation errors on the event thread (survived)
  uint64_t decode_errors = 0;   // payloads that failed to decode (not applied)
  uint64_t unknown_events = 0;  // events with unknown tags (skipped)
  uint64_t block_size_mismatch = 0;  // stores whose block size is not the rule's kvBlockSize
  // Replays by outcome: ok (the gap covered), partial (history lost: cleared), timeout, overflow
  // (too many live batches held meanwhile), busy (max_replays running, or the rank cooling down
  // after a failed replay: the no-replay rule), unsent (the replay request could not be queued:
  // the no-replay rule, then a cooldown).
  uint64_t replays_ok = 0, replays_partial = 0, replays_timeout = 0, replays_overflow = 0,
           replays_busy = 0, replays_unsent = 0;
  uint64_t replayed_batches = 0;  // batches applied from replays
  // The declared hash contract (LLB_KV_NONE_HASH_SEED), in blocks: recomputed and equal,
  // different, or not recomputable; broken = the last verdict was a mismatch.
  uint64_t hash_ok = 0, hash_mismatch = 0, hash_unverifiable = 0;
  bool contract_checked = false, contract_broken = false;
  bool connected = false;   // every rank's subscriber is connected (ZMQ socket monitor)
  uint64_t reconnects = 0;  // connections made after a rank's first
  double lag_seconds = 0;   // wall clock minus the last applied batch's timestamp
  kv::ApplyStats apply;
};

class EventPlane : public kv::WorkerLookup {
 public:
  // `clock` stamps when subscribers connect (kv::Publisher::connected_ns): the routing stages
  // compare it with their own clock, so both must be the same clock.
  EventPlane(kv::KvIndex& index, EventPlaneOptions opts = {},
             const common::Clock& clock = common::SteadyClock::instance());
  ~EventPlane();
  EventPlane(const EventPlane&) = delete;
  EventPlane& operator=(const EventPlane&) = delete;

  void start();
  void stop();
  // The sources to follow from now on (sources no longer named are closed and their inventory
  // freed; a source named again starts empty).
  void setSources(std::vector<SourceSpec> specs);
  // The index worker bits of a source key (one per rank), when the event thread has opened it.
  std::optional<uint64_t> slotsOf(const std::string& key) const;
  // kv::WorkerLookup, for the request path: no mutex, one std::atomic<shared_ptr> load of a
  // snapshot the event thread publishes whenever its sources change.
  std::shared_ptr<const kv::WorkerMap> snapshot() const override;
  // LoRA names seen in stored events (at most kMaxAdapters), republished when one is new.
  std::shared_ptr<const kv::AdapterSet> adapters() const override;
  static constexpr size_t kMaxAdapters = 1024;
  std::optional<SourceStats> stats(const std::string& key) const;
  std::vector<std::string> sourceKeys() const;
  // Prometheus text of the kvgate_kv_* families (any thread).
  std::string renderMetrics() const;
  // loxilb_pd_kv_blocks{service,ep_idx} for the endpoints of `rules` (any thread).
  std::string renderRuleBlocks(const std::vector<config::RuleSpec>& rules) const;
  // The engine block hashes one rank of a source holds, in store order ([offset, offset+limit)
  // of `total`). Asked of the event thread (the index's writer) and waited for up to `wait`:
  // call it off any event loop. Errors: 404 the source is not followed, 503 the event thread did
  // not answer in time or too many requests are waiting.
  struct Inventory {
    std::vector<uint64_t> hashes;
    size_t total = 0;
  };
  Result<Inventory> inventory(const std::string& key, int rank, size_t offset, size_t limit,
                              std::chrono::milliseconds wait = std::chrono::milliseconds(5000));

 private:
  struct Source;
  void run();
  void loop();  // until stop_; throws on ZMQ or allocation errors (run() survives them)
  void applySpecs();
  bool onMessage(Source& src, size_t rank);  // false when no message was waiting
  void processLive(Source& src, size_t rank, uint64_t seq, std::string_view payload);
  bool onReplayMessage(Source& src, size_t rank);  // false when no message was waiting
  void finishReplay(Source& src, size_t rank, const char* outcome);
  void skipOtherBlockSizes(Source& src);
  void checkReplayTimeouts();
  bool applyPayload(Source& src, size_t rank, std::string_view payload);
  void clearRank(Source& src, size_t rank);
  void applyBatch(Source& src, size_t rank);     // src.batch into the rank's inventory
  void noteDecodeError(Source& src);             // src.error: a payload that did not decode
  void checkContract(Source& src, size_t rank);  // src.batch against the declared contract
  void openDealer(Source& src, size_t rank);
  static constexpr size_t kDealer = 1000;   // poll owners: rank + kDealer = that rank's DEALER
  static constexpr size_t kMonitor = 2000;  // rank + kMonitor = that rank's socket monitor
  bool onMonitorEvent(Source& src, size_t rank);  // false when no event was waiting
  void publishStats(const Source& src);
  void openSource(const std::string& key, const SourceSpec& spec);
  void closeSource(std::map<std::string, std::unique_ptr<Source>>::iterator it);

  kv::KvIndex& index_;
  EventPlaneOptions opts_;
  const common::Clock& clock_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // guards pending_, slots_, stats_ (never held across I/O)
  std::optional<std::vector<SourceSpec>> pending_;
  kv::WorkerMap slots_;  // key -> workers and connection time (published as lookup_)
  std::atomic<std::shared_ptr<const kv::WorkerMap>> lookup_{
      std::make_shared<const kv::WorkerMap>()};
  void publishLookup();  // with mu_ held: slots_ -> lookup_
  std::atomic<std::shared_ptr<const kv::AdapterSet>> adapters_{
      std::make_shared<const kv::AdapterSet>()};
  void noteAdapters(Source& src);  // event thread
  void publishAdapters();          // event thread
  std::map<std::string, SourceStats> stats_;
  // Event thread only.
  std::unique_ptr<zmq::context_t> ctx_;
  std::map<std::string, std::unique_ptr<Source>> sources_;
  int replays_running_ = 0;
  struct InventoryRequest;
  // The HTTP drain (TensorRT-LLM): a thread polls, the event thread applies.
  struct DrainResult {
    std::string key;
    bool reachable = true, decoded = true, lost = false;
    size_t bytes = 0;  // what its events hold (the queue's byte bound)
    std::vector<engines::TrtllmEvent> events;
    std::string error;
  };
  static constexpr size_t kMaxDrainResults = 256;
  static constexpr size_t kMaxDrainQueuedBytes = 256u << 20;  // decoded events waiting
  static constexpr int kMaxDrainsInFlight = 4;                // exchanges at once
  std::map<std::string, SourceSpec> drain_specs_;             // under mu_
  std::deque<DrainResult> drain_results_;                     // under mu_, at most kMaxDrainResults
  std::set<std::string> drain_lost_;  // under mu_: sources whose answers were lost
  size_t drain_queued_bytes_ = 0;     // under mu_
  std::thread drain_thread_;
  void drainLoop();
  void serveDrainResults();
  std::deque<std::shared_ptr<InventoryRequest>> inventory_requests_;  // under mu_
  void serveInventoryRequests();
};

}  // namespace kvgate::events
