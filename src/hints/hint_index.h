// HintIndex: the cache-state index behind LookupRoute (`kvgate index`).
//
// What it holds: for each partition (tenant, model, hash_scheme, adapter) and each prefix key
// (an engine-opaque prefix hash or block hash, matched only within its partition), the replicas
// that reported holding it, each with when it was last reported (the server's clock), its cache
// tier and an LFU access count. Beside that: each replica's last stats (hit rate, pressure) and,
// per scope, how many entries each replica holds, so the miss classifier and the "replicas
// serving this scope" count are O(1) map probes.
//
// Keys: a prefix key of 8 bytes is read big-endian (the wire form of the XXH3 fingerprint);
// any other length is folded with XXH3-64. The table is keyed by XXH3(partition, key) and the
// entry keeps both to verify, so two partitions never share an entry.
//
// Bounds: every (entry, replica) pair ("holding") ages out after evictionTTL (an incremental
// sweep), and the index holds at most maxEntries holdings: past that the least recently
// reported (LRU) or least used (LFU: fewest delivered hits, then oldest) holding goes, one per
// insert over the bound, approximated as Redis does (the worst of kEvictSample holdings drawn at
// random; exact while the slab has at most kEvictSample entries; a clock hand when no sample is
// live), so no insert holds the lock for a pass over the index; an excess over kBatchExcess (a
// lowered maxEntries) takes one batch pass. Scopes and entries that lose their last holding are
// freed.
//
// Threads: one writer-preferring reader-writer lock (common::RwLock). Lookups (lookup.cc) take it
// shared and never change membership; the one thing they write is the LFU access count of the
// holdings a delivered hit matched (relaxed atomics, saturating). Ingest, events, the sweep and
// policy changes take it exclusive. Replica records are created only for an update that carries
// a well-formed prefix or stats, and at kMaxReplicas a record with no holding is reused.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/rwlock.h"
#include "common/splitmix.h"
#include "hints/event_feed.h"
#include "hints/policy.h"
#include "kv/u64_map.h"

namespace kvgate::hints {

enum class Tier : uint8_t { kUnspecified = 0, kT1 = 1, kT2 = 2, kT3 = 3 };

struct ReplicaStatsIn {
  float hit_rate = 0;
  float pressure = 0;
  int64_t cache_memory_bytes = 0;
  std::string client_version;
  int64_t t2_hit_tokens = 0, t2_query_tokens = 0;
};

// One entry of a CacheStateUpdate (PrefixEntry): an exact prefix key, a block chain, or both.
struct PrefixIn {
  std::string prefix_hash;
  int32_t token_count = 0;
  std::vector<std::string> block_hashes;
  std::vector<int32_t> block_token_counts;
  Tier tier = Tier::kUnspecified;
  std::string adapter_id;  // empty: the update's adapter
};

struct UpdateIn {
  std::string replica_id, model_id, tenant_id, hash_scheme, adapter_id;
  int64_t age_ns = 0;  // how old the producer says the state is (timestamp_us); lastSeen = now - age
  std::vector<PrefixIn> prefixes;
  bool has_stats = false;
  ReplicaStatsIn stats;
};

inline UpdateIn makeUpdate(std::string replica, std::string model, std::string tenant,
                           std::string scheme, std::string adapter = {}) {
  UpdateIn u;
  u.replica_id = std::move(replica);
  u.model_id = std::move(model);
  u.tenant_id = std::move(tenant);
  u.hash_scheme = std::move(scheme);
  u.adapter_id = std::move(adapter);
  return u;
}

struct IngestResult {
  bool accepted = false;
  std::string reason;  // why refused, or "" ; partial drops are counted in `dropped`
  uint64_t added = 0;  // holdings added or refreshed
  uint64_t dropped = 0;  // prefix entries refused (malformed chain, empty key)
};

struct ReplicaView {
  std::string id;
  bool has_stats = false;
  ReplicaStatsIn stats;
  int64_t stats_age_ms = 0;
};

struct IndexCounters {
  // Policy evictions by the algorithm in force ([Eviction]); removals asked for by events.
  std::atomic<uint64_t> evicted_ttl[2] = {}, evicted_capacity[2] = {};
  std::atomic<uint64_t> evicted_event{0}, evicted_cleared{0};
};

class HintIndex {
 public:
  HintIndex(const common::Clock& clock, CachePolicy policy);
  ~HintIndex();

  // --- writers (exclusive) ---
  IngestResult report(const UpdateIn& u);
  // PublishEvent. PREFIX_EVICTED drops the replica's holding of the key in every scheme of
  // (tenant, model), in one adapter's partition or, without one, in all; REPLICA_UPDATED
  // is acknowledged for a known replica and changes nothing (a heartbeat keeps no entry alive); ALL_CLEARED drops the replica's holdings in
  // (tenant, model) and its stats;
  // PREFIX_ADDED is acknowledged and ignored ("IGNORED": it has no scheme or token count).
  enum class EventType { kAdded = 1, kEvicted = 2, kReplicaUpdated = 3, kAllCleared = 4 };
  IngestResult event(EventType type, std::string_view replica, std::string_view model,
                     std::string_view tenant, std::string_view prefix_hash,
                     std::string_view adapter, bool adapter_set);
  // Drops holdings older than the TTL, at most `budget` entries per call (the caller loops).
  // Returns true when a full pass ended.
  bool sweep(size_t budget = 16384);
  void setPolicy(const CachePolicy& p);
  // Event-fed replicas (set once at startup, before lookups): their ids get replica indices here.
  uint32_t ensureReplica(std::string_view id);
  void attachFeed(const EventFeed* feed) { feed_ = feed; }

  // --- readers (shared) ---
  CachePolicy policy() const;
  std::vector<ReplicaView> replicas(std::string_view model, std::string_view tenant) const;
  struct Summary {
    int64_t total_prefixes = 0, hot_prefixes = 0;
  };
  Summary summary(std::string_view model, std::string_view tenant) const;
  uint64_t holdings() const;
  // Whether some partition of this model exists (metric labels: a client's model id is a label
  // only when the index knows it).
  bool knowsModel(std::string_view model) const;
  // Distinct prefix keys per model (each chain block counts), for inferencecache_index_entries.
  std::vector<std::pair<std::string, uint64_t>> entriesByModel() const;
  size_t memoryBytes() const;  // approximate, for memory per indexed block
  const IndexCounters& counters() const { return counters_; }
  const common::Clock& clock() const { return clock_; }

  // Key folding (exposed for lookup.cc and the tests).
  static uint64_t keyOf(std::string_view bytes);

 private:
  friend class Lookup;
  struct Holding {
    uint32_t replica;
    uint8_t tier;
    mutable uint32_t hits;  // LFU access count (atomic_ref under the shared lock)
    int64_t last_seen_ns;
  };
  // The table's value: the entry's index in the slab and, when exactly one replica holds it,
  // that holding (a chain walk then reads one cache line per block). Kept in step with the
  // entry by syncSlot on every change of its holders. (A single-holder slot is trusted without
  // re-checking the entry's key: a 2^-64 collision of slot keys, the fingerprints' own odds.)
  struct Slot {
    uint32_t entry = 0;
    uint16_t replica = 0;
    uint8_t tier = 0;
    uint8_t single = 0;
    int64_t seen = 0;
  };
  using Table = kv::BasicU64Map<Slot>;
  struct Entry {
    uint64_t key = 0;  // prefix key within the partition
    uint32_t partition = 0;
    int32_t token_count = 0;  // the reported prefix token count (exact keys)
    std::vector<Holding> holders;  // sorted by replica
    bool live() const { return !holders.empty(); }
  };
  // Scope tree: tenant -> model -> scheme; per scheme the holdings of each replica and the
  // partitions (adapters). Counts are holdings.
  struct SchemeRec {
    uint64_t count = 0;
    std::map<uint32_t, uint64_t> replica_holdings;  // replicas serving this scope
    std::map<std::string, uint32_t, std::less<>> adapters;  // adapter -> partition id
  };
  struct ModelRec {
    uint64_t count = 0;
    std::map<std::string, SchemeRec, std::less<>> schemes;
  };
  struct TenantRec {
    uint64_t count = 0;
    std::map<std::string, ModelRec, std::less<>> models;
  };
  struct Partition {
    std::string tenant, model, scheme, adapter;
    uint64_t entries = 0;  // live entries
    bool live = true;
  };
  struct ReplicaRec {
    std::string id;
    bool has_stats = false;
    ReplicaStatsIn stats;
    int64_t stats_at_ns = 0;
    uint64_t holdings = 0;
    bool pinned = false;  // event-fed: its index is held by the feed
  };

  // Find or create; -1 past kMaxReplicas / kMaxPartitions (a hostile reporter cannot grow them).
  int64_t replicaIdx(std::string_view id);
  int64_t findReplica(std::string_view id) const;
  int64_t partitionId(std::string_view tenant, std::string_view model, std::string_view scheme,
                      std::string_view adapter);
  void freePartition(uint32_t pid);
  int64_t findPartition(std::string_view tenant, std::string_view model, std::string_view scheme,
                        std::string_view adapter) const;
  const SchemeRec* scope(std::string_view tenant, std::string_view model,
                         std::string_view scheme) const;
  static uint64_t slotKey(uint32_t partition, uint64_t key);
  Entry* findEntry(uint32_t partition, uint64_t key);
  const Entry* findEntry(uint32_t partition, uint64_t key) const;
  // Adds or refreshes one holding; returns false when refused (capacity cannot be made).
  void upsert(uint32_t partition, uint64_t key, uint32_t replica, Tier tier, int32_t tokens,
              int64_t now);
  void dropHolding(Entry& e, size_t idx);  // keeps counts; frees empty entries lazily
  static void syncSlot(Slot& s, const Entry& e);
  void removeEntryIfEmpty(uint32_t slot_index);
  void countHolding(uint32_t partition, uint32_t replica, int delta);
  void evictForCapacity();
  // Whether the replica holds anything in (tenant, model), any scheme.
  bool holdsIn(uint32_t replica, std::string_view tenant, std::string_view model) const;
  static constexpr size_t kSummaryScan = 65536;
  static constexpr size_t kEvictSample = 16;  // holdings' entries sampled per capacity victim
  static constexpr uint64_t kBatchExcess = 65536;  // larger excess: one batch pass
  size_t evict_hand_ = 0;  // the clock hand of capacity eviction (a sparse slab)

  const common::Clock& clock_;
  // Writer-preferring: a steady stream of lookups cannot starve ingest, events and the sweep.
  mutable common::RwLock mu_;
  CachePolicy policy_;
  Table table_;                  // slotKey -> the entry's index (and its one holding)
  std::vector<Entry> entries_;   // slab; free slots on free_
  std::vector<uint32_t> free_;
  static constexpr size_t kMaxReplicas = 4096, kMaxPartitions = 65536;
  std::vector<Partition> partitions_;
  std::vector<uint32_t> free_partitions_;
  std::unordered_map<std::string, uint32_t> partition_ids_;  // tenant\0model\0scheme\0adapter
  std::map<std::string, TenantRec, std::less<>> tenants_;
  std::vector<ReplicaRec> replicas_;
  std::unordered_map<std::string, uint32_t> replica_ids_;
  std::unordered_map<std::string, uint32_t> model_refs_;  // model -> live partitions
  uint64_t holdings_ = 0;
  size_t sweep_cursor_ = 0;
  // Capacity eviction's samples, seeded from the process's secret (clients cannot predict which
  // holdings a sample visits).
  common::SplitMix64 evict_rng_{kv::tableKey().a ^ 0x6576696374ULL};
  IndexCounters counters_;
  const EventFeed* feed_ = nullptr;
};

}  // namespace kvgate::hints
