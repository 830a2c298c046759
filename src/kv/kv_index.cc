#include "kv/kv_index.h"

#include <bit>

#include "kv/fingerprint.h"

namespace kvgate::kv {

using engines::KvEvent;

// True when an event of this medium and KV-cache group belongs in the index. Stores teach the
// worker which group numbers are full attention; removals (which carry only the number) follow.
bool KvIndex::keeps(Worker& inv, const KvEvent& e) {
  if (!(e.medium.empty() || e.medium == "GPU" || e.medium == "gpu")) return false;
  if (e.group_idx < 0 || e.group_idx >= 64) return false;
  const uint64_t bit = uint64_t{1} << e.group_idx;
  if (e.kind == KvEvent::Kind::kStored && e.spec_kind == "full_attention")
    inv.full_attention_groups |= bit;
  if (!e.spec_kind.empty()) return e.spec_kind == "full_attention";
  // No kind given: a learned full-attention group, or group 0 while nothing was learned.
  return inv.full_attention_groups ? (inv.full_attention_groups & bit) != 0 : e.group_idx == 0;
}

void KvIndex::publish(std::shared_ptr<BlockTable> next) {
  retired_.push_back(std::move(table_));
  table_ = std::move(next);
  published_.store(table_, std::memory_order_release);
}

void KvIndex::freeRetired() {
  std::erase_if(retired_, [](const std::shared_ptr<BlockTable>& t) { return t.use_count() == 1; });
}

KvIndex::KvIndex(size_t max_blocks_per_worker)
    : max_blocks_(max_blocks_per_worker), table_(std::make_shared<BlockTable>(1024)) {
  published_.store(table_, std::memory_order_release);
  updateBytes();
}

int KvIndex::addWorker() {
  for (size_t i = 0; i < kMaxWorkers; ++i)
    if (!inv_[i].used) {
      inv_[i].used = true;
      return static_cast<int>(i);
    }
  return -1;
}

void KvIndex::removeWorker(int w) {
  ApplyStats st;
  clear(w, st);
  inv_[static_cast<size_t>(w)].used = false;
  inv_[static_cast<size_t>(w)].full_attention_groups = 0;
}

bool KvIndex::setBits(uint64_t fp, uint64_t bits, ApplyStats& st) {
  using Set = BlockTable::Set;
  Set r = table_->needsRebuild() ? Set::kFull : table_->setBits(fp, bits);
  // Past half full, random keys alone can make a probe over the bound (1 in about 2^20 at the
  // 0.7 the table grows at): a rebuild (back to half full or less) is tried before refusing.
  if (r == Set::kFull ||
      (r == Set::kProbeLimit && table_->used() * 2 > table_->capacity())) {
    size_t dropped = 0;
    std::shared_ptr<BlockTable> next = table_->rebuilt(1, &dropped);
    st.probe_limited_blocks += dropped;
    r = next->setBits(fp, bits);
    publish(std::move(next));
  }
  return r == Set::kOk;
}

void KvIndex::apply(int w, const engines::KvEventBatch& batch, ApplyStats& st) {
  for (const KvEvent& e : batch.events) {
    switch (e.kind) {
      case KvEvent::Kind::kStored:
        storeEvent(w, e, st);
        break;
      case KvEvent::Kind::kRemoved:
        removeEvent(w, e, st);
        break;
      case KvEvent::Kind::kCleared:
        clear(w, st);
        break;
    }
  }
  freeRetired();
  updateBytes();
}

void KvIndex::storeEvent(int w, const KvEvent& e, ApplyStats& st) {
  Worker& inv = inv_[static_cast<size_t>(w)];
  const size_t n = e.block_hashes.size();
  if (!keeps(inv, e) || (e.token_ids.empty() && n > 0)) {
    ++st.skipped_events;
    return;
  }
  if (e.block_size == 0 || e.token_ids.size() != n * e.block_size) {
    ++st.misfit_events;
    return;
  }
  std::optional<uint64_t> prev;
  if (e.has_parent) {
    const uint64_t* p = inv.engine_to_fp.find(e.parent);
    if (!p) {
      ++st.orphan_events;
      return;
    }
    prev = *p;
  } else {
    prev = partitionRoot(e.lora_name, e.cache_salt);
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t c = contentHash(e.token_ids.data() + i * e.block_size, e.block_size);
    if (i < e.extras.size()) c = mixContent(c, e.extras[i].content_mix);
    const uint64_t fp = prev ? chainHash(*prev, c) : c;
    prev = fp;
    addBlock(w, e.block_hashes[i], fp, st);
  }
}

void KvIndex::addBlock(int w, uint64_t engine_hash, uint64_t fp, ApplyStats& st) {
  Worker& inv = inv_[static_cast<size_t>(w)];
  if (uint64_t* old = inv.engine_to_fp.find(engine_hash)) {
    if (*old == fp) {
      ++st.duplicate_blocks;  // vLLM re-sends stored blocks: idempotent
      return;
    }
    dropEngineHash(w, engine_hash);  // the engine reused a hash for other content
    markStale(inv, engine_hash);
  }
  inv.engine_to_fp.insert(engine_hash, fp);
  inv.fifo.push_back(engine_hash);
  auto [refs, inserted] = inv.fp_refs.insert(fp, 0);
  if ((*refs)++ == 0) {
    if (!setBits(fp, uint64_t{1} << w, st)) ++st.probe_limited_blocks;
    inv.blocks.store(inv.fp_refs.size(), std::memory_order_relaxed);
  }
  ++st.stored_blocks;
  // The cap bounds both maps: many engine hashes may name one fingerprint.
  while ((inv.fp_refs.size() > max_blocks_ || inv.engine_to_fp.size() > max_blocks_) &&
         !inv.fifo.empty()) {
    const uint64_t oldest = inv.fifo.front();
    inv.fifo.pop_front();
    // An entry a removal left behind is not the hash's live one (a block removed and stored
    // again is live at its later entry, so it goes in its new store order).
    if (uint64_t* n = inv.stale.find(oldest)) {
      if (--*n == 0) inv.stale.erase(oldest);
      continue;
    }
    if (dropEngineHash(w, oldest)) ++st.evicted_blocks;
  }
  if (inv.fifo.size() > 2 * inv.engine_to_fp.size() + 1024) compactFifo(inv);
}

bool KvIndex::dropEngineHash(int w, uint64_t engine_hash) {
  Worker& inv = inv_[static_cast<size_t>(w)];
  uint64_t* p = inv.engine_to_fp.find(engine_hash);
  if (!p) return false;
  const uint64_t fp = *p;
  inv.engine_to_fp.erase(engine_hash);
  uint64_t* refs = inv.fp_refs.find(fp);
  if (refs && --*refs == 0) {
    inv.fp_refs.erase(fp);
    table_->clearBits(fp, uint64_t{1} << w);
    inv.blocks.store(inv.fp_refs.size(), std::memory_order_relaxed);
  }
  return true;
}

void KvIndex::removeEvent(int w, const KvEvent& e, ApplyStats& st) {
  if (!keeps(inv_[static_cast<size_t>(w)], e)) {
    ++st.skipped_events;
    return;
  }
  for (uint64_t h : e.block_hashes) {
    if (dropEngineHash(w, h)) {
      markStale(inv_[static_cast<size_t>(w)], h);  // its fifo entry stays behind, not live
      ++st.removed_blocks;
    } else {
      ++st.unknown_removals;
    }
  }
}

void KvIndex::clear(int w, ApplyStats& st) {
  Worker& inv = inv_[static_cast<size_t>(w)];
  const uint64_t bit = uint64_t{1} << w;
  inv.fp_refs.forEach([&](uint64_t fp, uint64_t) { table_->clearBits(fp, bit); });
  inv.engine_to_fp.clear();
  inv.fp_refs.clear();
  std::deque<uint64_t>().swap(inv.fifo);
  inv.stale.clear();
  inv.blocks.store(0, std::memory_order_relaxed);
  if (overlay_) overlay_->forget(w);  // what was credited there is gone with the rest
  ++st.clears;
  if (table_->needsRebuild()) publish(table_->rebuilt());
  freeRetired();
  updateBytes();
}

// Drops fifo entries whose engine hash is gone, keeping the order of the rest.
size_t KvIndex::engineHashes(int w, size_t offset, size_t limit, std::vector<uint64_t>& out) const {
  const Worker& inv = inv_[static_cast<size_t>(w)];
  // Forward in store order, stopping once the page is full: a live hash's earlier entries are
  // the stale ones its removals left (counted in `stale`), its live entry comes after them.
  U64Map passed;  // live hashes with stale entries: how many of those were passed so far
  size_t n = 0;
  for (uint64_t h : inv.fifo) {
    if (out.size() >= limit) break;
    if (!inv.engine_to_fp.contains(h)) continue;
    if (const uint64_t stale = inv.stale.valueOr(h, 0)) {
      uint64_t* p = passed.insert(h, 0).first;
      if (*p < stale) {
        ++*p;
        continue;
      }
    }
    if (n++ >= offset) out.push_back(h);
  }
  return inv.engine_to_fp.size();
}

void KvIndex::markStale(Worker& inv, uint64_t engine_hash) {
  auto [n, fresh] = inv.stale.insert(engine_hash, 0);
  ++*n;
}

// Keeps one entry per live engine hash, its last (the live one), in order; no stale entries are
// left.
void KvIndex::compactFifo(Worker& inv) {
  std::deque<uint64_t> kept;
  U64Map seen;
  for (auto it = inv.fifo.rbegin(); it != inv.fifo.rend(); ++it)
    if (inv.engine_to_fp.find(*it) && seen.insert(*it, 0).second) kept.push_front(*it);
  inv.fifo.swap(kept);
  inv.stale.clear();
}

void KvIndex::updateBytes() {
  size_t b = table_->bytes();
  for (const Worker& inv : inv_)
    if (inv.used)
      b += inv.engine_to_fp.bytes() + inv.fp_refs.bytes() + inv.stale.bytes() +
           inv.fifo.size() * sizeof(uint64_t);
  bytes_.store(b, std::memory_order_relaxed);
}

size_t KvIndex::score(const uint64_t* chain, size_t n, uint64_t candidates,
                      std::array<uint32_t, kMaxWorkers>& overlap) const {
  std::shared_ptr<const BlockTable> t = published_.load(std::memory_order_acquire);
  uint64_t alive = candidates;
  constexpr size_t kAhead = 48;  // lookups in flight
  for (size_t i = 0; i < n && i < kAhead; ++i) t->prefetch(chain[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) t->prefetch(chain[i + kAhead]);
    const uint64_t held = t->lookup(chain[i]) & alive;
    for (uint64_t dropped = alive & ~held; dropped != 0; dropped &= dropped - 1)
      overlap[static_cast<size_t>(std::countr_zero(dropped))] = static_cast<uint32_t>(i);
    alive = held;
    if (alive == 0) return i;
  }
  for (uint64_t rest = alive; rest != 0; rest &= rest - 1)
    overlap[static_cast<size_t>(std::countr_zero(rest))] = static_cast<uint32_t>(n);
  return alive ? n : 0;
}

}  // namespace kvgate::kv

namespace kvgate::kv {

uint64_t KvIndex::scoreWithOverlay(const uint64_t* chain, size_t n, uint64_t candidates,
                                   const SpeculativeOverlay& overlay, int64_t now_ns,
                                   std::array<uint32_t, kMaxWorkers>& overlap) const {
  score(chain, n, candidates, overlap);
  std::shared_ptr<const BlockTable> t = published_.load(std::memory_order_acquire);
  uint64_t via_overlay = 0;
  for (uint64_t m = candidates; m; m &= m - 1) {
    const int w = std::countr_zero(m);
    size_t k = overlap[static_cast<size_t>(w)];
    while (k < n) {
      // The overlay first (a 1 MiB table, warm), the index (cold, ~100 MiB) only where it has no
      // credit: a long credited run costs one cached read a block.
      if (overlay.credited(chain[k], w, now_ns)) {
        ++via_overlay;
        ++k;
        continue;
      }
      if ((t->lookup(chain[k]) >> w) & 1) {  // confirmed again after the run
        ++k;
        continue;
      }
      // A credit covers its whole prefix (a chain's hash commits to every block before it), so
      // a lost credit is skipped when one of the next kOverlayLookahead blocks is credited.
      size_t j = k + 1;
      while (j < n && j - k <= kOverlayLookahead && !overlay.credited(chain[j], w, now_ns)) ++j;
      if (j == n || j - k > kOverlayLookahead) break;
      via_overlay += j + 1 - k;
      k = j + 1;
    }
    overlap[static_cast<size_t>(w)] = static_cast<uint32_t>(k);
  }
  return via_overlay;
}

}  // namespace kvgate::kv
