// vLLM-style automatic prefix cache for the engine simulator (bookkeeping only, no KV data).
//
// Semantics (vLLM v1 KVCacheManager, simplified):
//   * The prompt is cut into blocks of `block_size` tokens; only FULL blocks are cached, a
//     partial tail block never is.
//   * Block identity is chained: key(i) = XXH3_64bits_withSeed(bytes of the block's token ids as
//     uint32 in native (little-endian) order, seed = key(i-1)), with key(-1) = kRootKey. The same
//     tokens after a different prefix therefore form a different block.
//   * acquire() reports the cached prefix: the longest run of leading blocks already present,
//     times block_size. It then takes one reference on every full prompt block, inserting the
//     missing ones. Inserting into a full cache evicts the least-recently-released unreferenced
//     block; if every block is referenced, the remaining blocks of the prompt are neither cached
//     nor referenced (the request still runs).
//   * Blocks a request holds outside the cache (its partial tail and the blocks its decode grows
//     into) are reserved: they count against the capacity like cached blocks, and reserving
//     evicts unreferenced cached blocks to make room.
//   * Referenced blocks are never evicted. release() drops the references; a block whose count
//     reaches zero stays cached and becomes evictable. As in vLLM, a request's blocks are freed
//     tail-first, so the tail of a prompt is evicted before its head.
// Everything is deterministic: no clocks, no randomness.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

namespace kvgate::sim {

class PrefixCache {
 public:
  static constexpr uint64_t kRootKey = 0x6b76676174652d31ULL;  // "kvgate-1"

  struct Allocation {
    size_t cached_tokens = 0;    // tokens of the leading blocks that were already present
    std::vector<uint64_t> keys;  // blocks this allocation references, in prompt order
  };

  PrefixCache(size_t block_size, size_t capacity_blocks);

  Allocation acquire(const std::vector<uint32_t>& tokens);
  Allocation acquireKeys(const std::vector<uint64_t>& keys);  // keys = blockKeys(tokens)
  void release(const Allocation& alloc);
  // Drops every unreferenced block; returns how many were dropped.
  size_t clearUnreferenced();
  // Called with the key of every block that leaves the cache (eviction or clear), before it goes.
  void onEvict(std::function<void(uint64_t)> f) { on_evict_ = std::move(f); }

  // Blocks acquire() of these keys (a chain from blockKeys()) would take from the free pool:
  // those absent and those cached but unreferenced.
  size_t blocksNeeded(const std::vector<uint64_t>& keys) const;
  // Leading blocks of the chain present in the cache (the true cache state of a prompt).
  size_t leadingBlocks(const std::vector<uint64_t>& keys) const;
  // Blocks held outside the cache; false (nothing reserved) when even evicting every
  // unreferenced block would not make room.
  bool reserve(size_t n);
  void unreserve(size_t n) { reserved_ -= n < reserved_ ? n : reserved_; }
  // Blocks not referenced and not reserved (unreferenced cached blocks can be evicted).
  size_t freeBlocks() const { return capacity_ - used_ - reserved_; }
  size_t reservedBlocks() const { return reserved_; }

  size_t usedBlocks() const { return used_; }             // blocks with references
  size_t cachedBlocks() const { return blocks_.size(); }  // all blocks present
  size_t capacity() const { return capacity_; }
  size_t blockSize() const { return block_size_; }
  bool contains(uint64_t key) const { return blocks_.count(key) != 0; }

  // Chained key of one block of `block_size` tokens following the block keyed `parent`.
  static uint64_t blockKey(uint64_t parent, const uint32_t* tokens, size_t n);
  // Keys of all full blocks of `tokens`.
  std::vector<uint64_t> blockKeys(const std::vector<uint32_t>& tokens) const;

 private:
  struct Block {
    uint32_t refs = 0;
    bool in_lru = false;                    // refs == 0 and not just inserted
    std::list<uint64_t>::iterator lru_pos;  // valid only while in_lru
  };
  bool makeRoom();  // evicts one unreferenced block; false when none

  size_t block_size_;
  size_t capacity_;
  size_t used_ = 0;
  size_t reserved_ = 0;
  std::unordered_map<uint64_t, Block> blocks_;
  std::list<uint64_t> lru_;  // unreferenced blocks, front = evicted first
  std::function<void(uint64_t)> on_evict_;
};

}  // namespace kvgate::sim
