// KvIndex: which worker holds which KV block, mirrored from the engines' KV events.
//
// A library with no gateway or I/O dependency (the gateway's Tier 1.5 and the LookupRoute hint
// service both use it). Blocks are keyed by content fingerprints (kv/fingerprint.h) computed from
// the token ids the events carry, so routing works whatever hash algorithm and seed the engines
// run. Each worker is a bit (at most kMaxWorkers per index); per worker the writer keeps the map
// engine hash -> fingerprint (removals carry engine hashes only) and the store order (the memory
// cap evicts oldest first).
//
// Threads: one writer (the event plane) calls apply/clear/addWorker/removeWorker; any number of
// readers call score/blocks concurrently. A reader loads the current BlockTable through an
// std::atomic<shared_ptr> (libstdc++ 12 guards that pointer with a brief internal spinlock: one
// load per decision) and reads its slots with plain acquire loads, no lock (see block_table.h). A
// table the writer replaced stays alive until its last reader drops it; the writer frees it.
//
// Rules for events (shared/reference/engines.md §1.6, §0b): only the GPU medium (absent medium
// counts as GPU) and the full-attention KV-cache group are kept: a store names its group's kind
// ("full_attention"; absent means group 0 is it), and the worker learns which group numbers are
// full attention, because removals carry only the number; stores are idempotent (vLLM re-sends
// stored blocks from block 0); a store whose parent is unknown (an orphan) or whose token_ids do
// not fit block_hashes x block_size is counted and skipped; a removal of an unknown hash is counted
// and ignored.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engines/kv_event.h"
#include "kv/block_table.h"
#include "kv/speculative.h"
#include "kv/u64_map.h"

namespace kvgate::kv {

constexpr size_t kMaxWorkers = 64;

// What applying events did (added to by apply(); the caller keeps totals for metrics).
struct ApplyStats {
  uint64_t stored_blocks = 0;     // blocks added to a worker
  uint64_t duplicate_blocks = 0;  // stores of blocks the worker already held
  uint64_t removed_blocks = 0;
  uint64_t unknown_removals = 0;  // removals of hashes the worker does not hold
  uint64_t orphan_events = 0;     // stores whose parent hash is unknown
  uint64_t misfit_events = 0;     // token_ids not equal to block_hashes x block_size
  uint64_t skipped_events = 0;    // another medium or KV-cache group, or no token ids
  uint64_t clears = 0;            // AllBlocksCleared applied
  uint64_t evicted_blocks = 0;    // dropped by the memory cap
  uint64_t probe_limited_blocks = 0;  // not indexed: the block table's probe bound (flooding)
};

class KvIndex {
 public:
  explicit KvIndex(size_t max_blocks_per_worker = 1'000'000);

  // Writer side.
  // A worker slot (0..kMaxWorkers-1) for a new worker; -1 when the index is full.
  int addWorker();
  void removeWorker(int w);  // frees the slot and the worker's blocks
  void apply(int w, const engines::KvEventBatch& batch, ApplyStats& st);
  void clear(int w, ApplyStats& st);  // (and forgets the attached overlay's credits of w)
  // The speculative overlay whose credits of a worker are dropped when its blocks are cleared
  // (AllBlocksCleared, a restart, removeWorker); set once, before any event is applied.
  void attachOverlay(SpeculativeOverlay* o) { overlay_ = o; }
  // The worker's engine block hashes in store order, entries [offset, offset + limit) into `out`;
  // returns how many it holds. Writer thread only (the inventory REST route asks the writer).
  size_t engineHashes(int w, size_t offset, size_t limit, std::vector<uint64_t>& out) const;

  // Reader side (any thread).
  size_t blocks(int w) const {
    return inv_[static_cast<size_t>(w)].blocks.load(std::memory_order_relaxed);
  }
  // For each worker bit in `candidates`, the length of the longest leading run of `chain` that
  // worker holds (the seed's overlap count), written to overlap[bit]. Stops as soon as no
  // candidate holds the next block. Returns the longest run. No allocation.
  size_t score(const uint64_t* chain, size_t n, uint64_t candidates,
               std::array<uint32_t, kMaxWorkers>& overlap) const;
  // score(), then each candidate's run extended over blocks `overlay` credits to it at `now_ns`
  // (speculative insert) and blocks the index holds after those. The overlay is lossy (a credit
  // sharing a slot with a later one is overwritten) and a chain's block hash commits to every
  // block before it, so a credit at block j stands for blocks up to j: a run goes on over up to
  // kOverlayLookahead uncredited blocks when a later one within them is credited. (Stopping at
  // the first lost credit cut GSP's 128-block system prompt short for most siblings within
  // ~100 ms at 80 requests/s: 3-4 needless spills of a full prompt per 300 requests and a 1.22x
  // worse TTFT p90 near saturation; docs/benchmarks.md.) Returns the blocks matched through the
  // overlay only.
  static constexpr size_t kOverlayLookahead = 16;
  uint64_t scoreWithOverlay(const uint64_t* chain, size_t n, uint64_t candidates,
                            const SpeculativeOverlay& overlay, int64_t now_ns,
                            std::array<uint32_t, kMaxWorkers>& overlap) const;
  // Bytes held by the index (table and per-worker maps), for the memory metric.
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  struct Worker {
    bool used = false;
    uint64_t full_attention_groups = 0;  // group numbers (< 64) seen with kind full_attention
    U64Map engine_to_fp;                 // engine hash -> fingerprint
    U64Map fp_refs;             // fingerprint -> engine hashes of this worker that map to it
    std::deque<uint64_t> fifo;  // engine hashes in store order (eviction; may hold stale ones)
    U64Map stale;               // engine hash -> its entries in fifo left by removals (not live)
    std::atomic<size_t> blocks{0};
  };
  void storeEvent(int w, const engines::KvEvent& e, ApplyStats& st);
  void removeEvent(int w, const engines::KvEvent& e, ApplyStats& st);
  void addBlock(int w, uint64_t engine_hash, uint64_t fp, ApplyStats& st);
  bool dropEngineHash(int w, uint64_t engine_hash);
  bool setBits(uint64_t fp, uint64_t bits, ApplyStats& st);  // false: not stored (probe bound)
  void compactFifo(Worker& inv);
  void markStale(Worker& inv, uint64_t engine_hash);
  void updateBytes();
  void publish(std::shared_ptr<BlockTable> next);
  void freeRetired();
  bool keeps(Worker& inv, const engines::KvEvent& e);

  size_t max_blocks_;
  std::array<Worker, kMaxWorkers> inv_;
  std::shared_ptr<BlockTable> table_;  // the writer's handle
  // Tables replaced while readers may still hold them: freed by the writer once it holds the
  // last reference (a reader never frees a table of hundreds of MiB on the request path).
  std::vector<std::shared_ptr<BlockTable>> retired_;
  std::atomic<std::shared_ptr<const BlockTable>> published_;
  std::atomic<size_t> bytes_{0};
  SpeculativeOverlay* overlay_ = nullptr;
};

}  // namespace kvgate::kv
