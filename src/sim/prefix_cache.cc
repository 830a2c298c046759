#include "sim/prefix_cache.h"

#include <xxhash.h>

namespace kvgate::sim {

PrefixCache::PrefixCache(size_t block_size, size_t capacity_blocks)
    : block_size_(block_size == 0 ? 1 : block_size), capacity_(capacity_blocks) {
  blocks_.reserve(capacity_ < (1u << 20) ? capacity_ : (1u << 20));
}

uint64_t PrefixCache::blockKey(uint64_t parent, const uint32_t* tokens, size_t n) {
  return XXH3_64bits_withSeed(tokens, n * sizeof(uint32_t), parent);
}

std::vector<uint64_t> PrefixCache::blockKeys(const std::vector<uint32_t>& tokens) const {
  std::vector<uint64_t> keys;
  size_t full = tokens.size() / block_size_;
  keys.reserve(full);
  uint64_t parent = kRootKey;
  for (size_t i = 0; i < full; ++i) {
    parent = blockKey(parent, tokens.data() + i * block_size_, block_size_);
    keys.push_back(parent);
  }
  return keys;
}

bool PrefixCache::makeRoom() {
  if (lru_.empty()) return false;
  uint64_t victim = lru_.front();
  lru_.pop_front();
  if (on_evict_) on_evict_(victim);
  blocks_.erase(victim);
  return true;
}

size_t PrefixCache::blocksNeeded(const std::vector<uint64_t>& keys) const {
  size_t n = 0;
  for (uint64_t key : keys) {
    auto it = blocks_.find(key);
    if (it == blocks_.end() || it->second.refs == 0) ++n;
  }
  return n;
}

size_t PrefixCache::leadingBlocks(const std::vector<uint64_t>& keys) const {
  size_t n = 0;
  while (n < keys.size() && blocks_.count(keys[n]) != 0) ++n;
  return n;
}

bool PrefixCache::reserve(size_t n) {
  if (n > freeBlocks()) return false;
  while (blocks_.size() + reserved_ + n > capacity_)
    if (!makeRoom()) return false;  // unreachable: freeBlocks() counted the evictable ones
  reserved_ += n;
  return true;
}

PrefixCache::Allocation PrefixCache::acquire(const std::vector<uint32_t>& tokens) {
  return acquireKeys(blockKeys(tokens));
}

PrefixCache::Allocation PrefixCache::acquireKeys(const std::vector<uint64_t>& keys) {
  Allocation a;
  a.keys.reserve(keys.size());
  bool prefix = true;
  for (uint64_t key : keys) {
    auto it = blocks_.find(key);
    if (it != blocks_.end()) {
      if (prefix) a.cached_tokens += block_size_;
    } else {
      prefix = false;
      if (blocks_.size() + reserved_ >= capacity_ && !makeRoom())
        break;  // all referenced: stop caching
      it = blocks_.emplace(key, Block{}).first;
    }
    Block& b = it->second;
    if (b.refs == 0) {
      if (b.in_lru) lru_.erase(b.lru_pos);
      b.in_lru = false;
      ++used_;
    }
    ++b.refs;
    a.keys.push_back(key);
  }
  return a;
}

void PrefixCache::release(const Allocation& alloc) {
  // Tail first, as vLLM frees a request's blocks: the tail becomes the older LRU entry.
  for (auto k = alloc.keys.rbegin(); k != alloc.keys.rend(); ++k) {
    auto it = blocks_.find(*k);
    if (it == blocks_.end() || it->second.refs == 0) continue;
    if (--it->second.refs == 0) {
      --used_;
      it->second.lru_pos = lru_.insert(lru_.end(), *k);
      it->second.in_lru = true;
    }
  }
}

size_t PrefixCache::clearUnreferenced() {
  size_t n = lru_.size();
  for (uint64_t k : lru_) {
    if (on_evict_) on_evict_(k);
    blocks_.erase(k);
  }
  lru_.clear();
  return n;
}

}  // namespace kvgate::sim
