#include "hints/hint_index.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvgate::hints {

namespace {
constexpr size_t kMaxKeyBytes = 64;  // longer prefix keys are refused (a hash, not a prompt)
std::string scopeKey(std::string_view t, std::string_view m, std::string_view s,
                     std::string_view a) {
  std::string k;
  k.reserve(t.size() + m.size() + s.size() + a.size() + 3);
  k.append(t).push_back('\0');
  k.append(m).push_back('\0');
  k.append(s).push_back('\0');
  k.append(a);
  return k;
}
}  // namespace

HintIndex::HintIndex(const common::Clock& clock, CachePolicy policy)
    : clock_(clock), policy_(std::move(policy)) {}
HintIndex::~HintIndex() = default;

uint64_t HintIndex::keyOf(std::string_view b) {
  if (b.size() == 8) {
    uint64_t v = 0;
    for (unsigned char c : b) v = (v << 8) | c;
    return v;
  }
  return XXH3_64bits(b.data(), b.size());
}

uint64_t HintIndex::slotKey(uint32_t partition, uint64_t key) {
  uint64_t buf[2] = {key, partition};
  return XXH3_64bits(buf, sizeof buf);
}

HintIndex::Entry* HintIndex::findEntry(uint32_t partition, uint64_t key) {
  Slot* v = table_.find(slotKey(partition, key));
  if (!v) return nullptr;
  Entry& e = entries_[v->entry];
  return (e.key == key && e.partition == partition) ? &e : nullptr;
}
const HintIndex::Entry* HintIndex::findEntry(uint32_t partition, uint64_t key) const {
  return const_cast<HintIndex*>(this)->findEntry(partition, key);
}

int64_t HintIndex::replicaIdx(std::string_view id) {
  auto it = replica_ids_.find(std::string(id));
  if (it != replica_ids_.end()) return it->second;
  uint32_t idx;
  if (replicas_.size() < kMaxReplicas) {
    idx = static_cast<uint32_t>(replicas_.size());
    replicas_.emplace_back();
  } else {
    // Full: reuse a record nothing refers to (no holding, so in no scope, no slot and no
    // entry; not event-fed). Ids that came and went (pods replaced, a client's junk ids) do
    // not lock new replicas out for the life of the process.
    size_t i = 0;
    while (i < replicas_.size() && (replicas_[i].holdings != 0 || replicas_[i].pinned)) ++i;
    if (i == replicas_.size()) return -1;
    idx = static_cast<uint32_t>(i);
    replica_ids_.erase(replicas_[idx].id);
    replicas_[idx] = ReplicaRec{};
  }
  replicas_[idx].id = std::string(id);
  replica_ids_.emplace(std::string(id), idx);
  return idx;
}

bool HintIndex::knowsModel(std::string_view model) const {
  std::shared_lock lock(mu_);
  return model_refs_.count(std::string(model)) != 0;
}

int64_t HintIndex::findReplica(std::string_view id) const {
  auto it = replica_ids_.find(std::string(id));
  return it == replica_ids_.end() ? -1 : int64_t(it->second);
}

int64_t HintIndex::partitionId(std::string_view t, std::string_view m, std::string_view s,
                               std::string_view a) {
  std::string k = scopeKey(t, m, s, a);
  auto it = partition_ids_.find(k);
  if (it != partition_ids_.end()) return it->second;
  if (partition_ids_.size() >= kMaxPartitions) return -1;
  uint32_t id;
  if (!free_partitions_.empty()) {
    id = free_partitions_.back();
    free_partitions_.pop_back();
  } else {
    id = static_cast<uint32_t>(partitions_.size());
    partitions_.emplace_back();
  }
  partitions_[id] = Partition{std::string(t), std::string(m), std::string(s), std::string(a)};
  partition_ids_.emplace(std::move(k), id);
  ++model_refs_[std::string(m)];
  return id;
}

void HintIndex::freePartition(uint32_t pid) {
  Partition& p = partitions_[pid];
  partition_ids_.erase(scopeKey(p.tenant, p.model, p.scheme, p.adapter));
  if (auto m = model_refs_.find(p.model); m != model_refs_.end() && --m->second == 0)
    model_refs_.erase(m);
  if (const SchemeRec* s = scope(p.tenant, p.model, p.scheme))
    const_cast<SchemeRec*>(s)->adapters.erase(p.adapter);
  p = Partition{};
  p.live = false;
  free_partitions_.push_back(pid);
}

int64_t HintIndex::findPartition(std::string_view t, std::string_view m, std::string_view s,
                                 std::string_view a) const {
  auto it = partition_ids_.find(scopeKey(t, m, s, a));
  return it == partition_ids_.end() ? -1 : int64_t(it->second);
}

const HintIndex::SchemeRec* HintIndex::scope(std::string_view t, std::string_view m,
                                             std::string_view s) const {
  auto ti = tenants_.find(t);
  if (ti == tenants_.end()) return nullptr;
  auto mi = ti->second.models.find(m);
  if (mi == ti->second.models.end()) return nullptr;
  auto si = mi->second.schemes.find(s);
  return si == mi->second.schemes.end() ? nullptr : &si->second;
}

void HintIndex::countHolding(uint32_t pid, uint32_t replica, int delta) {
  Partition& p = partitions_[pid];
  TenantRec& t = tenants_[p.tenant];
  ModelRec& m = t.models[p.model];
  SchemeRec& s = m.schemes[p.scheme];
  if (delta > 0) {
    ++t.count, ++m.count, ++s.count, ++holdings_, ++replicas_[replica].holdings;
    ++s.replica_holdings[replica];
    s.adapters.emplace(p.adapter, pid);
    return;
  }
  --t.count, --m.count, --s.count, --holdings_, --replicas_[replica].holdings;
  auto ri = s.replica_holdings.find(replica);
  if (ri != s.replica_holdings.end() && --ri->second == 0) s.replica_holdings.erase(ri);
  // Free what lost its last holding: scopes first, so the classifier never sees an empty one.
  if (s.count == 0) m.schemes.erase(p.scheme);
  if (m.count == 0) t.models.erase(p.model);
  if (t.count == 0) tenants_.erase(p.tenant);
}

void HintIndex::upsert(uint32_t pid, uint64_t key, uint32_t replica, Tier tier, int32_t tokens,
                       int64_t now) {
  uint8_t t = static_cast<uint8_t>(tier == Tier::kUnspecified ? Tier::kT1 : tier);
  uint64_t sk = slotKey(pid, key);
  Slot* slot = table_.find(sk);
  Entry* e = nullptr;
  if (slot) {
    e = &entries_[slot->entry];
    if (e->key != key || e->partition != pid) return;  // a 2^-64 slot collision: keep the first
  } else {
    uint32_t idx;
    if (!free_.empty()) {
      idx = free_.back();
      free_.pop_back();
    } else {
      idx = static_cast<uint32_t>(entries_.size());
      entries_.emplace_back();
    }
    e = &entries_[idx];
    e->key = key;
    e->partition = pid;
    e->token_count = 0;
    e->holders.clear();
    slot = table_.insert(sk, Slot{idx, 0, 0, 0, 0}).first;
    ++partitions_[pid].entries;
  }
  if (tokens > 0) e->token_count = tokens;
  auto it = std::lower_bound(e->holders.begin(), e->holders.end(), replica,
                             [](const Holding& h, uint32_t r) { return h.replica < r; });
  if (it != e->holders.end() && it->replica == replica) {
    it->last_seen_ns = now;
    it->tier = t;  // a re-report with another tier moves the entry (last write wins)
    syncSlot(*slot, *e);
    return;
  }
  e->holders.insert(it, Holding{replica, t, 0, now});
  syncSlot(*slot, *e);
  countHolding(pid, replica, +1);
}

void HintIndex::syncSlot(Slot& s, const Entry& e) {
  s.single = e.holders.size() == 1;
  if (!s.single) return;
  s.replica = static_cast<uint16_t>(e.holders[0].replica);
  s.tier = e.holders[0].tier;
  s.seen = e.holders[0].last_seen_ns;
}

void HintIndex::dropHolding(Entry& e, size_t i) {
  uint32_t replica = e.holders[i].replica;
  e.holders.erase(e.holders.begin() + static_cast<ptrdiff_t>(i));
  countHolding(e.partition, replica, -1);
  if (!e.holders.empty()) {
    if (Slot* slot = table_.find(slotKey(e.partition, e.key))) syncSlot(*slot, e);
  } else {
    uint64_t sk = slotKey(e.partition, e.key);
    Slot* slot = table_.find(sk);
    if (slot) {
      uint32_t idx = slot->entry;
      table_.erase(sk);
      free_.push_back(idx);
    }
    Partition& p = partitions_[e.partition];
    if (--p.entries == 0) freePartition(e.partition);
    e.holders.shrink_to_fit();
  }
}

IngestResult HintIndex::report(const UpdateIn& u) {
  IngestResult r;
  if (u.replica_id.empty()) return {false, "EMPTY_REPLICA_ID"};
  if (u.model_id.empty()) return {false, "EMPTY_MODEL_ID"};
  if (u.hash_scheme.empty()) return {false, "EMPTY_HASH_SCHEME"};
  if (u.replica_id.size() > 256 || u.model_id.size() > 256 || u.tenant_id.size() > 256 ||
      u.hash_scheme.size() > 64 || u.adapter_id.size() > 256)
    return {false, "KEY_TOO_LONG"};
  // Which prefixes are well formed, before any state is touched: an update that carries none
  // (and no stats) creates no replica record.
  std::vector<uint8_t> ok(u.prefixes.size(), 0);
  size_t n_ok = 0;
  for (size_t k = 0; k < u.prefixes.size(); ++k) {
    const PrefixIn& p = u.prefixes[k];
    const std::string& adapter = p.adapter_id.empty() ? u.adapter_id : p.adapter_id;
    bool has_chain = !p.block_hashes.empty();
    bool bad = adapter.size() > 256 ||
               (has_chain && p.block_hashes.size() != p.block_token_counts.size()) ||
               (!has_chain && p.prefix_hash.empty()) || p.prefix_hash.size() > kMaxKeyBytes;
    for (const auto& b : p.block_hashes) bad = bad || b.empty() || b.size() > kMaxKeyBytes;
    for (int32_t c : p.block_token_counts) bad = bad || c <= 0;
    if (bad) {
      ++r.dropped;  // a malformed chain is dropped whole
      continue;
    }
    ok[k] = 1;
    ++n_ok;
  }
  if (n_ok == 0 && !u.has_stats) {
    r.accepted = true;
    return r;
  }
  std::unique_lock lock(mu_);
  int64_t now = clock_.nowNs() - std::max<int64_t>(0, u.age_ns);
  int64_t ri = replicaIdx(u.replica_id);
  if (ri < 0) return {false, "TOO_MANY_REPLICAS"};
  uint32_t replica = uint32_t(ri);
  if (u.has_stats) {
    replicas_[replica].has_stats = true;
    replicas_[replica].stats = u.stats;
    auto finite = [](float v) { return std::isfinite(v) ? v : 0.0f; };  // NaN, Inf: 0
    replicas_[replica].stats.hit_rate = finite(u.stats.hit_rate);
    replicas_[replica].stats.pressure = finite(u.stats.pressure);
    replicas_[replica].stats_at_ns = now;
  }
  for (size_t k = 0; k < u.prefixes.size(); ++k) {
    if (!ok[k]) continue;
    const PrefixIn& p = u.prefixes[k];
    const std::string& adapter = p.adapter_id.empty() ? u.adapter_id : p.adapter_id;
    int64_t part = partitionId(u.tenant_id, u.model_id, u.hash_scheme, adapter);
    if (part < 0) {
      ++r.dropped;  // too many partitions: refuse rather than grow without bound
      continue;
    }
    uint32_t pid = uint32_t(part);
    int64_t cum = 0;
    for (size_t i = 0; i < p.block_hashes.size(); ++i) {
      cum += p.block_token_counts[i];
      upsert(pid, keyOf(p.block_hashes[i]), replica, p.tier,
             static_cast<int32_t>(std::min<int64_t>(cum, INT32_MAX)), now);
      ++r.added;
    }
    if (!p.prefix_hash.empty()) {
      upsert(pid, keyOf(p.prefix_hash), replica, p.tier,
             p.token_count > 0 ? p.token_count : static_cast<int32_t>(std::min<int64_t>(cum, INT32_MAX)),
             now);
      ++r.added;
    }
  }
  if (holdings_ > policy_.max_entries) evictForCapacity();
  r.accepted = true;
  return r;
}

IngestResult HintIndex::event(EventType type, std::string_view replica_id, std::string_view model,
                              std::string_view tenant, std::string_view prefix_hash,
                              std::string_view adapter, bool adapter_set) {
  if (replica_id.empty()) return {false, "EMPTY_REPLICA_ID"};
  std::unique_lock lock(mu_);
  IngestResult r{true, "", 0, 0};
  int64_t ri = findReplica(replica_id);
  switch (type) {
    case EventType::kAllCleared:
      if (ri >= 0 && holdsIn(uint32_t(ri), tenant, model)) {
        // (a full pass over the slab: only when the replica holds something in this tenant and
        // model, so a repeated clear costs a map lookup, not another pass)
        for (Entry& e : entries_) {
          if (!e.live()) continue;
          const Partition& p = partitions_[e.partition];
          if (p.tenant != tenant || p.model != model) continue;
          for (size_t i = 0; i < e.holders.size(); ++i)
            if (e.holders[i].replica == uint32_t(ri)) {
              dropHolding(e, i);
              counters_.evicted_cleared.fetch_add(1, std::memory_order_relaxed);
              break;
            }
        }
      }
      if (ri >= 0) replicas_[size_t(ri)].has_stats = false;
      return r;
    case EventType::kReplicaUpdated:
      // A liveness note only: holdings keep their own lastSeen (a heartbeat must not keep stale
      // entries alive), stats keep their report time.
      if (ri < 0) return {false, "UNKNOWN_REPLICA"};
      return r;
    case EventType::kAdded:
      // No scheme and no token count on the wire: an addition comes through ReportCacheState.
      return {true, "IGNORED"};
    case EventType::kEvicted: {
      if (prefix_hash.empty()) return {false, "INVALID_PREFIX_HASH"};
      if (ri < 0) return r;
      uint64_t key = keyOf(prefix_hash);
      // With an adapter: that partition only; without: every partition of this tenant and model.
      for (uint32_t pid = 0; pid < partitions_.size(); ++pid) {
        const Partition& p = partitions_[pid];
        if (p.tenant != tenant || p.model != model) continue;
        if (adapter_set && !adapter.empty() && p.adapter != adapter) continue;
        Entry* e = findEntry(pid, key);
        if (!e) continue;
        for (size_t i = 0; i < e->holders.size(); ++i)
          if (e->holders[i].replica == uint32_t(ri)) {
            dropHolding(*e, i);
            counters_.evicted_event.fetch_add(1, std::memory_order_relaxed);
            ++r.added;
            break;
          }
      }
      return r;
    }
  }
  return {false, "UNKNOWN_EVENT_TYPE"};
}

bool HintIndex::sweep(size_t budget) {
  std::unique_lock lock(mu_);
  int64_t cutoff = clock_.nowNs() - policy_.eviction_ttl_ms * 1'000'000;
  size_t end = std::min(entries_.size(), sweep_cursor_ + budget);
  for (; sweep_cursor_ < end; ++sweep_cursor_) {
    Entry& e = entries_[sweep_cursor_];
    for (size_t i = e.holders.size(); i-- > 0;)
      if (e.holders[i].last_seen_ns <= cutoff) {
        dropHolding(e, i);
        counters_.evicted_ttl[int(policy_.eviction)].fetch_add(1, std::memory_order_relaxed);
      }
  }
  if (sweep_cursor_ >= entries_.size()) {
    sweep_cursor_ = 0;
    return true;
  }
  return false;
}

void HintIndex::evictForCapacity() {
  // Incremental (issue 28 §1.5): an insert over the bound evicts only the excess, each victim
  // the worst of kEvictSample holdings drawn at random (one random holding of each of
  // kEvictSample random slab entries: Redis's approximated LRU/LFU); a slab of at most
  // kEvictSample entries is scanned whole, so small indexes evict exactly. When no sample lands
  // on a live entry (a sparse slab), a clock hand that persists across calls takes the next
  // live one, so the bound always holds. An excess larger than kBatchExcess (a policy change
  // that lowers maxEntries) takes one batch pass instead: nth_element over every holding, O(n)
  // once rather than O(excess x samples).
  const bool lfu = policy_.eviction == Eviction::kLfu;
  struct Victim {
    uint32_t hits = 0;
    int64_t seen = 0;
    uint32_t entry = 0, replica = 0;
  };
  auto worse = [](const Victim& a, const Victim& b) {
    if (a.hits != b.hits) return a.hits < b.hits;
    if (a.seen != b.seen) return a.seen < b.seen;
    return a.entry < b.entry;
  };
  auto victimOf = [&](uint32_t i, const Holding& x) {
    return Victim{lfu ? x.hits : 0, x.last_seen_ns, i, x.replica};
  };
  auto drop = [&](const Victim& v) {
    Entry& e = entries_[v.entry];
    for (size_t h = 0; h < e.holders.size(); ++h)
      if (e.holders[h].replica == v.replica) {
        dropHolding(e, h);
        counters_.evicted_capacity[int(policy_.eviction)].fetch_add(1, std::memory_order_relaxed);
        return;
      }
  };
  if (holdings_ <= policy_.max_entries) return;
  if (holdings_ - policy_.max_entries > kBatchExcess) {
    const uint64_t excess = holdings_ - policy_.max_entries;
    std::vector<Victim> all;
    all.reserve(holdings_);
    for (uint32_t i = 0; i < entries_.size(); ++i)
      for (const Holding& h : entries_[i].holders) all.push_back(victimOf(i, h));
    std::nth_element(all.begin(), all.begin() + static_cast<ptrdiff_t>(excess - 1), all.end(),
                     worse);
    for (size_t k = 0; k < excess; ++k) drop(all[k]);
    return;
  }
  while (holdings_ > policy_.max_entries && !entries_.empty()) {
    Victim v;
    bool have = false;
    auto consider = [&](uint32_t i, const Holding& x) {
      const Victim c = victimOf(i, x);
      if (!have || worse(c, v)) v = c, have = true;
    };
    const size_t n = entries_.size();
    if (n <= kEvictSample) {
      for (uint32_t i = 0; i < n; ++i)
        for (const Holding& x : entries_[i].holders) consider(i, x);
    } else {
      for (size_t s = 0; s < kEvictSample; ++s) {
        const auto i = static_cast<uint32_t>(evict_rng_.next() % n);
        const Entry& e = entries_[i];
        if (e.live()) consider(i, e.holders[evict_rng_.next() % e.holders.size()]);
      }
      // The clock hand: the next live entry after the last one it found.
      for (size_t k = 0; !have && k < n; ++k) {
        evict_hand_ = (evict_hand_ + 1) % n;
        const Entry& e = entries_[evict_hand_];
        if (e.live()) consider(static_cast<uint32_t>(evict_hand_), e.holders.front());
      }
    }
    if (!have) break;  // (no live entry at all: holdings_ is 0)
    drop(v);
  }
}

uint32_t HintIndex::ensureReplica(std::string_view id) {
  std::unique_lock lock(mu_);
  int64_t r = replicaIdx(id);
  if (r < 0) return 0;
  replicas_[size_t(r)].pinned = true;  // the feed keeps this index: never recycled
  return uint32_t(r);
}

void HintIndex::setPolicy(const CachePolicy& p) {
  std::unique_lock lock(mu_);
  policy_ = p;
  if (holdings_ > policy_.max_entries) evictForCapacity();
}

CachePolicy HintIndex::policy() const {
  std::shared_lock lock(mu_);
  return policy_;
}

uint64_t HintIndex::holdings() const {
  std::shared_lock lock(mu_);
  return holdings_;
}

std::vector<ReplicaView> HintIndex::replicas(std::string_view model,
                                             std::string_view tenant) const {
  std::shared_lock lock(mu_);
  int64_t now = clock_.nowNs();
  std::vector<ReplicaView> out;
  std::vector<bool> wanted(replicas_.size(), model.empty() && tenant.empty());
  if (!model.empty() || !tenant.empty())
    for (const auto& [tname, t] : tenants_) {
      if (!tenant.empty() && tname != tenant) continue;
      for (const auto& [mname, m] : t.models) {
        if (!model.empty() && mname != model) continue;
        for (const auto& [sname, s] : m.schemes)
          for (const auto& [r, n] : s.replica_holdings) wanted[r] = true;
      }
    }
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (!wanted[i]) continue;
    const ReplicaRec& r = replicas_[i];
    out.push_back({r.id, r.has_stats, r.stats, r.has_stats ? (now - r.stats_at_ns) / 1'000'000 : 0});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.id < b.id; });
  return out;
}

bool HintIndex::holdsIn(uint32_t replica, std::string_view tenant, std::string_view model) const {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return false;
  auto m = t->second.models.find(model);
  if (m == t->second.models.end()) return false;
  for (const auto& [name, sc] : m->second.schemes)
    if (sc.replica_holdings.count(replica)) return true;
  return false;
}

HintIndex::Summary HintIndex::summary(std::string_view model, std::string_view tenant) const {
  std::shared_lock lock(mu_);
  Summary s;
  auto wanted = [&](const Partition& p) {
    return p.live && (model.empty() || p.model == model) && (tenant.empty() || p.tenant == tenant);
  };
  // Distinct keys: the partitions' live-entry counts (no pass over the entries).
  for (const Partition& p : partitions_)
    if (wanted(p)) s.total_prefixes += static_cast<int64_t>(p.entries);
  // Keys some replica reported in the last 5 minutes: every entry up to kSummaryScan, else an
  // evenly strided sample of kSummaryScan entries scaled to the total (a GetCacheState call
  // must not hold the lock for a pass over millions of entries).
  const int64_t hot_after = clock_.nowNs() - 5LL * 60 * 1'000'000'000;
  const size_t step = std::max<size_t>(1, entries_.size() / kSummaryScan);
  int64_t seen = 0, hot = 0;
  // Counts matching (seen) and hot entries among every `stride`-th below `limit`, stopping at
  // `cap` matching ones.
  auto scan = [&](size_t stride, size_t limit, int64_t cap) {
    seen = hot = 0;
    for (size_t i = 0; i < limit && seen < cap; i += stride) {
      const Entry& e = entries_[i];
      if (!e.live() || !wanted(partitions_[e.partition])) continue;
      ++seen;
      hot += std::any_of(e.holders.begin(), e.holders.end(),
                         [&](const Holding& h) { return h.last_seen_ns > hot_after; });
    }
  };
  scan(step, entries_.size(), INT64_MAX);
  // A narrow filter may leave the stride sample (nearly) empty: then walk the slab in order,
  // up to kSummaryScan matching entries or 64 x kSummaryScan visited, and estimate from that.
  if (step > 1 && seen < 256 && s.total_prefixes > 0)
    scan(1, std::min(entries_.size(), 64 * kSummaryScan), int64_t(kSummaryScan));
  s.hot_prefixes = step == 1 || seen == 0
                       ? hot
                       : static_cast<int64_t>(double(hot) / double(seen) * double(s.total_prefixes) + 0.5);
  return s;
}

std::vector<std::pair<std::string, uint64_t>> HintIndex::entriesByModel() const {
  std::shared_lock lock(mu_);
  std::map<std::string, uint64_t> by;
  for (const Partition& p : partitions_)
    if (p.live && p.entries > 0) by[p.model] += p.entries;
  return {by.begin(), by.end()};
}

size_t HintIndex::memoryBytes() const {
  std::shared_lock lock(mu_);
  size_t b = table_.bytes() + entries_.capacity() * sizeof(Entry) + free_.capacity() * 4;
  for (const Entry& e : entries_) b += e.holders.capacity() * sizeof(Holding);
  return b;
}

}  // namespace kvgate::hints
