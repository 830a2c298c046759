#include "hints/lookup.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "common/prefetch.h"
#include "hints/pd_topology.h"
#include "kv/fingerprint.h"

namespace kvgate::hints {

const char* reasonName(Reason r) {
  switch (r) {
    case Reason::kPrefixMatch: return "PREFIX_MATCH";
    case Reason::kTenantHot: return "TENANT_HOT";
    case Reason::kAffinityHint: return "AFFINITY_HINT";
    case Reason::kNoHint: return "NO_HINT";
    case Reason::kPolicyRequiresChain: return "POLICY_REQUIRES_CHAIN";
    case Reason::kTimeout: return "TIMEOUT";
    case Reason::kUnknownTenant: return "UNKNOWN_TENANT";
    case Reason::kUnknownModel: return "UNKNOWN_MODEL";
    case Reason::kUnknownHashScheme: return "UNKNOWN_HASH_SCHEME";
  }
  return "NO_HINT";
}

namespace {

constexpr int64_t kTenantHotMaxAgeNs = 5LL * 60 * 1'000'000'000;
constexpr float kTenantHotMinHitRate = 0.1f;
constexpr int32_t kSloTightTtftMs = 200;

// The prefix the request names once its inputs are resolved.
struct Resolved {
  std::vector<uint64_t> keys;      // the chain's block keys (empty: an exact lookup)
  std::vector<int32_t> counts;     // tokens per block
  const std::string_view* chain_bytes = nullptr;  // the explicit chain's bytes (affinity seed)
  std::vector<uint64_t> derived;   // prefix fingerprints computed here (token_ids, prompt_text)
  std::string exact_bytes;         // the exact key's bytes
  int32_t exact_tokens = 0;
  bool fail_open = false;
};

float freshness(int64_t now, int64_t seen, int64_t ttl_ns) {
  int64_t age = now - seen;
  if (age <= 0) return 1.0f;
  if (age >= ttl_ns) return 0.0f;
  return static_cast<float>(1.0 - static_cast<double>(age) / static_cast<double>(ttl_ns));
}

float pressureFactor(float p) {
  float f = 1.0f - 1.0f * p;
  return f < 0 ? 0.0f : (f > 1 ? 1.0f : f);
}

double distinguishingPower(size_t m, size_t total) {
  if (total <= 1) return 1.0;
  if (m >= total) return 0.0;
  return 1.0 - static_cast<double>(m) / static_cast<double>(total);
}

void sortScores(std::vector<ScoreOut>& s) {
  std::sort(s.begin(), s.end(), [](const ScoreOut& a, const ScoreOut& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.replica < b.replica;
  });
}

std::string be8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) s[size_t(i)] = static_cast<char>(v & 0xff);
  return s;
}

}  // namespace

// Everything that reads the index's private state, under one shared lock.
class Lookup {
 public:
  static LookupOutcome run(const HintIndex& ix, const LookupRequest& q,
                           const PromptTokenizer& tokenize, int64_t deadline_ns,
                           const LookupLimits& lim);

 private:
  using Entry = HintIndex::Entry;
  // What a chain match needs to credit LFU counts: the matched entries in chain order and each
  // scored replica's depth in it.
  struct ChainCredit {
    std::vector<const Entry*> path;
    std::vector<std::pair<uint32_t, size_t>> depth;  // (replica, blocks matched)
  };
  using Members = std::vector<EventFeed::Member>;
  static void chainMatch(const HintIndex& ix, int64_t pid, const Resolved& r, int64_t now,
                         const CachePolicy& pol, int32_t ttft_ms, size_t serving,
                         const Members& members, LookupOutcome& out, ChainCredit* credit);
  static void exactMatch(const HintIndex& ix, const Entry* e, uint64_t key, int32_t tokens,
                         int64_t now, const CachePolicy& pol, int32_t ttft_ms, size_t serving,
                         const Members& members, LookupOutcome& out);
  static void tenantHot(const HintIndex& ix, const HintIndex::SchemeRec& scope, int64_t now,
                        int32_t ttft_ms, LookupOutcome& out);
  static float pressureOf(const HintIndex& ix, uint32_t replica, int64_t now, int64_t ttl_ns) {
    const auto& r = ix.replicas_[replica];
    if (!r.has_stats || now - r.stats_at_ns >= ttl_ns) return pressureFactor(0);
    return pressureFactor(r.stats.pressure);
  }
};

void Lookup::exactMatch(const HintIndex& ix, const Entry* e, uint64_t key, int32_t tokens,
                        int64_t now, const CachePolicy& pol, int32_t ttft_ms, size_t serving,
                        const Members& members, LookupOutcome& out) {
  int64_t ttl = pol.eviction_ttl_ms * 1'000'000;
  float c = (ttft_ms > 0 && ttft_ms < kSloTightTtftMs) ? 1.0f : 0.0f;
  std::vector<uint32_t> scored;
  if (e)
    for (const auto& h : e->holders) {
      float fresh = freshness(now, h.last_seen_ns, ttl);
      if (fresh <= 0) continue;
      float score = static_cast<float>(e->token_count) * fresh *
                    pressureOf(ix, h.replica, now, ttl) * (1.0f + fresh * c);
      out.scores.push_back({ix.replicas_[h.replica].id, score, e->token_count, fresh, h.tier});
      scored.push_back(h.replica);
    }
  // Event-fed replicas holding the key (fresh; the request's token count, as nothing else
  // says how deep the key is).
  if (!members.empty()) {
    std::vector<uint32_t> depth;
    ix.feed_->runs(&key, 1, members, depth);
    for (size_t i = 0; i < members.size(); ++i) {
      if (depth[i] == 0 ||
          std::find(scored.begin(), scored.end(), members[i].replica) != scored.end())
        continue;
      float score = static_cast<float>(tokens) * pressureOf(ix, members[i].replica, now, ttl) *
                    (1.0f + c);
      out.scores.push_back({ix.replicas_[members[i].replica].id, score, tokens, 1.0f, 1});
    }
  }
  double dp = distinguishingPower(out.scores.size(), serving);
  if (dp != 1.0)
    for (auto& s : out.scores) s.score *= static_cast<float>(dp);
}

// LFU access counts saturate (a hot system prompt must not wrap to the coldest entry).
static void creditHit(uint32_t& hits) {
  std::atomic_ref<uint32_t> a(hits);
  uint32_t v = a.load(std::memory_order_relaxed);
  while (v != UINT32_MAX && !a.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) {
  }
}

void Lookup::chainMatch(const HintIndex& ix, int64_t pid, const Resolved& r, int64_t now,
                        const CachePolicy& pol, int32_t ttft_ms, size_t serving,
                        const Members& members, LookupOutcome& out, ChainCredit* credit) {
  int64_t ttl = pol.eviction_ttl_ms * 1'000'000;
  int64_t cutoff = now - ttl;  // a holding seen at or before this is stale
  struct Run {
    uint32_t replica;
    int64_t tokens;
    int64_t oldest;
    uint8_t tier;
    size_t depth;  // blocks matched
  };
  std::vector<Run> running, done;
  const size_t n = r.keys.size();
  // A block costs one cache miss when one replica holds it (its table slot describes the
  // holding) and three otherwise (slot, entry, holders): a software pipeline starts them 16, 8
  // and 4 blocks ahead so they overlap.
  constexpr size_t kSlotAhead = 32, kEntryAhead = 16, kHoldersAhead = 8;
  using Slot = HintIndex::Slot;
  thread_local std::vector<Slot> sl;
  thread_local std::vector<uint8_t> found;
  thread_local std::vector<const Entry*> ent;
  auto slot = [&](size_t j) { return HintIndex::slotKey(uint32_t(pid), r.keys[j]); };
  auto stageSlot = [&](size_t j) {
    const Slot* v = const_cast<HintIndex::Table&>(ix.table_).find(slot(j));
    found[j] = v != nullptr;
    if (!v) return;
    sl[j] = *v;
    if (!v->single) common::prefetchRead(&ix.entries_[v->entry]);
  };
  auto stageEntry = [&](size_t j) {
    ent[j] = nullptr;
    if (!found[j]) return;
    const Entry& e = ix.entries_[sl[j].entry];
    if (sl[j].single) {  // (not read: only its address, for the LFU credit)
      ent[j] = &e;
      return;
    }
    if (e.key != r.keys[j] || e.partition != uint32_t(pid)) return;
    ent[j] = &e;
    common::prefetchRead(e.holders.data());
  };
  if (pid >= 0) {
    sl.resize(n);
    found.assign(n, 0);
    ent.assign(n, nullptr);
    for (size_t j = 0; j < std::min(n, kSlotAhead); ++j) ix.table_.prefetch(slot(j));
    for (size_t j = 0; j < std::min(n, kEntryAhead); ++j) stageSlot(j);
    for (size_t j = 0; j < std::min(n, kHoldersAhead); ++j) stageEntry(j);
  }
  std::vector<const Entry*> path;  // the entry of each matched block (LFU credit)
  for (size_t i = 0; pid >= 0 && i < n; ++i) {
    if (i + kSlotAhead < n) ix.table_.prefetch(slot(i + kSlotAhead));
    if (i + kEntryAhead < n) stageSlot(i + kEntryAhead);
    if (i + kHoldersAhead < n) stageEntry(i + kHoldersAhead);
    const Entry* e = ent[i];
    // This block's holders, sorted by replica: the slot's one, or the entry's.
    HintIndex::Holding one;
    const HintIndex::Holding* hs = nullptr;
    size_t nh = 0;
    if (e && sl[i].single) {
      one = {sl[i].replica, sl[i].tier, 0, sl[i].seen};
      hs = &one;
      nh = 1;
    } else if (e) {
      hs = e->holders.data();
      nh = e->holders.size();
    }
    if (i == 0) {
      if (nh == 0) break;
      for (size_t k = 0; k < nh; ++k)
        if (hs[k].last_seen_ns > cutoff)
          running.push_back({hs[k].replica, r.counts[0], hs[k].last_seen_ns, hs[k].tier, 1});
    } else {
      // Both sorted by replica: keep the running replicas that hold this block too.
      size_t keep = 0, j = 0;
      for (size_t k = 0; k < running.size(); ++k) {
        Run& run = running[k];
        const HintIndex::Holding* h = nullptr;
        while (j < nh && hs[j].replica < run.replica) ++j;
        if (j < nh && hs[j].replica == run.replica && hs[j].last_seen_ns > cutoff) h = &hs[j];
        if (h) {
          run.tokens += r.counts[i];
          run.oldest = std::min(run.oldest, h->last_seen_ns);
          run.tier = std::max(run.tier, h->tier);
          run.depth = i + 1;
          running[keep++] = run;
        } else {
          done.push_back(run);  // leading-run semantics: out for good
        }
      }
      running.resize(keep);
    }
    if (running.empty()) break;
    path.push_back(e);
  }
  done.insert(done.end(), running.begin(), running.end());
  // Event-fed replicas: their leading run in the KV index, fresh; the deeper run wins when a
  // replica also reports.
  if (!members.empty()) {
    std::vector<uint32_t> depth;
    ix.feed_->runs(r.keys.data(), n, members, depth);
    for (size_t i = 0; i < members.size(); ++i) {
      if (depth[i] == 0) continue;
      int64_t tokens = 0;
      for (size_t b = 0; b < depth[i]; ++b) tokens += r.counts[b];
      Run ev{members[i].replica, tokens, now, 1, depth[i]};
      auto it = std::find_if(done.begin(), done.end(),
                             [&](const Run& x) { return x.replica == ev.replica; });
      if (it == done.end()) done.push_back(ev);
      else if (it->depth < ev.depth) *it = ev;
    }
  }
  float c = (ttft_ms > 0 && ttft_ms < kSloTightTtftMs) ? 1.0f : 0.0f;
  for (const Run& run : done) {
    if (run.tokens <= 0) continue;
    float fresh = freshness(now, run.oldest, ttl);
    if (fresh <= 0) continue;
    int32_t tokens = static_cast<int32_t>(std::min<int64_t>(run.tokens, INT32_MAX));
    float score = static_cast<float>(tokens) * fresh * pressureOf(ix, run.replica, now, ttl) *
                  (1.0f + fresh * c);
    out.scores.push_back({ix.replicas_[run.replica].id, score, tokens, fresh, run.tier});
  }
  // Distinguishing power per replica: how many scored replicas match at least as deep.
  for (size_t a = 0; a < out.scores.size(); ++a) {
    size_t m = 0;
    for (const auto& b : out.scores) m += b.matched_tokens >= out.scores[a].matched_tokens;
    double dp = distinguishingPower(m, serving);
    if (dp != 1.0) out.scores[a].score *= static_cast<float>(dp);
  }
  if (credit) {  // (an event-fed run has no entries to credit: the path is the reported one's)
    for (const Run& run : done)
      credit->depth.emplace_back(run.replica, std::min(run.depth, path.size()));
    credit->path = std::move(path);
  }
}

void Lookup::tenantHot(const HintIndex& ix, const HintIndex::SchemeRec& scope, int64_t now,
                       int32_t ttft_ms, LookupOutcome& out) {
  float c = (ttft_ms > 0 && ttft_ms < kSloTightTtftMs) ? 1.0f : 0.0f;
  for (const auto& [replica, n] : scope.replica_holdings) {
    const auto& r = ix.replicas_[replica];
    if (n == 0 || !r.has_stats) continue;
    int64_t age = now - r.stats_at_ns;
    if (age >= kTenantHotMaxAgeNs || r.stats.hit_rate < kTenantHotMinHitRate) continue;
    float recency = freshness(now, r.stats_at_ns, kTenantHotMaxAgeNs);
    float score = r.stats.hit_rate * recency * pressureFactor(r.stats.pressure) *
                  (1.0f + recency * c);
    out.scores.push_back({r.id, score, 0, r.stats.hit_rate, 0});
  }
}

LookupOutcome Lookup::run(const HintIndex& ix, const LookupRequest& q,
                          const PromptTokenizer& tokenize, int64_t deadline_ns,
                          const LookupLimits& lim) {
  LookupOutcome out;
  auto answer = [&](Reason r) {
    out.reason = r;
    if (r != Reason::kPrefixMatch && r != Reason::kTenantHot && r != Reason::kAffinityHint)
      out.scores.clear();
    return std::move(out);
  };
  if (q.tenant == kProbeTenant || q.scheme.empty()) return answer(Reason::kNoHint);
  const CachePolicy pol = ix.policy();
  bool raw_chain = q.n_blocks > 0 || q.n_counts > 0;
  bool valid_chain = q.n_blocks > 0 && q.n_blocks == q.n_counts;
  if (pol.require_chain && !valid_chain) return answer(Reason::kPolicyRequiresChain);
  const common::Clock& clock = ix.clock();
  if (deadline_ns != 0 && clock.nowNs() >= deadline_ns) return answer(Reason::kTimeout);

  // Input resolution.
  Resolved r;
  auto fromTokens = [&](const uint32_t* toks, size_t n) {
    r.derived.resize(n / pol.block_size);
    size_t blocks = kv::prefixChain(toks, n, pol.block_size, std::nullopt, r.derived.data(),
                                    r.derived.size());
    r.derived.resize(blocks);
    if (blocks == 0) {
      r.fail_open = true;
      return;
    }
    r.exact_bytes = be8(r.derived.back());
    r.exact_tokens = static_cast<int32_t>(std::min<uint64_t>(blocks * pol.block_size, INT32_MAX));
    if (pol.enable_chain_matching) {
      r.keys = r.derived;  // 8-byte keys are their own big-endian value
      r.counts.assign(blocks, static_cast<int32_t>(pol.block_size));
    }
  };
  auto fromPrompt = [&]() {
    if (q.prompt_text.size() > lim.max_prompt_bytes || !tokenize) {
      r.fail_open = true;
      return;
    }
    auto toks = tokenize(q.model, q.prompt_text);
    if (!toks || toks->empty() || toks->size() > lim.max_tokens) {
      r.fail_open = true;
      return;
    }
    out.echoed_tokens = std::move(*toks);
    fromTokens(out.echoed_tokens.data(), out.echoed_tokens.size());
  };
  // token_ids, else prompt_text (after an explicit key or chain); false when neither is given.
  auto fromIdsOrText = [&]() {
    if (q.n_tokens > 0) {
      if (q.n_tokens > lim.max_tokens) r.fail_open = true;
      else fromTokens(q.token_ids, q.n_tokens);
    } else if (!q.prompt_text.empty()) {
      fromPrompt();
    } else {
      return false;
    }
    return true;
  };
  if (!pol.enable_chain_matching) {
    if (!q.prefix_hash.empty()) {
      r.exact_bytes = std::string(q.prefix_hash);
      r.exact_tokens = q.prefix_token_count;
    } else if (!fromIdsOrText() && raw_chain) {
      r.fail_open = true;  // only a chain, and chains are off
    }
  } else if (raw_chain || !q.prefix_hash.empty()) {
    if (q.n_blocks != q.n_counts || q.n_blocks > lim.max_blocks) {
      r.fail_open = true;
    } else {
      r.keys.reserve(q.n_blocks);
      for (size_t i = 0; i < q.n_blocks; ++i) r.keys.push_back(HintIndex::keyOf(q.block_hashes[i]));
      r.counts.assign(q.block_token_counts, q.block_token_counts + q.n_counts);
      // (ingest refuses counts <= 0; a lookup with one cannot be scored: fail open)
      for (int32_t c : r.counts) r.fail_open = r.fail_open || c <= 0;
      r.chain_bytes = q.block_hashes;
      r.exact_bytes = std::string(q.prefix_hash);
      r.exact_tokens = q.prefix_token_count;
    }
  } else {
    fromIdsOrText();
  }
  if (deadline_ns != 0 && clock.nowNs() >= deadline_ns) {
    out.echoed_tokens.clear();
    return answer(Reason::kTimeout);
  }
  if (r.fail_open) return answer(Reason::kNoHint);
  out.echo_adapter = true;

  int64_t effective = 0;
  if (!r.keys.empty())
    for (int32_t c : r.counts) effective += c;
  else
    effective = r.exact_tokens;
  // (downgraded after the classifier, step 7: a short prompt for an unknown tenant still
  // hears UNKNOWN_TENANT)
  bool short_prefix = pol.minimum_prefix_tokens > 0 && effective < pol.minimum_prefix_tokens;

  std::shared_lock lock(ix.mu_);
  int64_t now = clock.nowNs();
  ChainCredit chain_credit;
  bool credit_lfu = pol.eviction == Eviction::kLfu;
  const Entry* exact_entry = nullptr;
  Reason reason = Reason::kNoHint;  // "None": falls to affinity below
  const HintIndex::SchemeRec* scope = ix.scope(q.tenant, q.model, q.scheme);
  // The replicas serving (tenant, model, scheme): reporters with entries there, and event-fed
  // replicas of that scope holding blocks.
  Members members;
  if (ix.feed_) ix.feed_->members(q.tenant, q.model, q.scheme, members);
  std::vector<uint32_t> serving_ids;
  if (scope)
    for (const auto& [replica, n] : scope->replica_holdings) serving_ids.push_back(replica);
  for (const auto& mb : members)
    if (!scope || !scope->replica_holdings.count(mb.replica)) serving_ids.push_back(mb.replica);
  const size_t serving = serving_ids.size();
  auto classify = [&]() {
    const bool feed_empty = !ix.feed_ || ix.feed_->empty();
    if (ix.holdings_ == 0 && feed_empty) return Reason::kNoHint;  // a cold index: no mismatch
    int level = 0;  // 1 tenant known, 2 model, 3 scheme
    if (auto t = ix.tenants_.find(q.tenant); t != ix.tenants_.end()) {
      level = 1;
      if (auto m = t->second.models.find(q.model); m != t->second.models.end())
        level = m->second.schemes.count(q.scheme) ? 3 : 2;
    }
    if (!feed_empty) level = std::max(level, ix.feed_->known(q.tenant, q.model, q.scheme));
    return level == 0   ? Reason::kUnknownTenant
           : level == 1 ? Reason::kUnknownModel
           : level == 2 ? Reason::kUnknownHashScheme
                        : Reason::kNoHint;
  };
  // Step 4's floors, on the match's survivors: minimumMatchedTokens, then routingFloorScore
  // against the best. Nothing left: the lookup goes on as a miss (TENANT_HOT, the classifier).
  auto floors = [&]() {
    sortScores(out.scores);
    if (pol.minimum_matched_tokens > 0)
      std::erase_if(out.scores, [&](const ScoreOut& s) {
        return s.matched_tokens < pol.minimum_matched_tokens;
      });
    if (!out.scores.empty() && pol.routing_floor_score > 0 &&
        out.scores.front().score < static_cast<float>(pol.routing_floor_score))
      out.scores.clear();
  };
  int64_t pid = ix.findPartition(q.tenant, q.model, q.scheme, q.adapter);
  if (q.tenant.empty() || q.model.empty()) {
    reason = Reason::kNoHint;
  } else if (!r.keys.empty()) {
    if (pid >= 0 || !members.empty())
      chainMatch(ix, pid, r, now, pol, q.ttft_ms, serving, members, out,
                 credit_lfu ? &chain_credit : nullptr);
    floors();
    reason = out.scores.empty() ? classify() : Reason::kPrefixMatch;
  } else {
    const uint64_t key = HintIndex::keyOf(r.exact_bytes);
    if (pid >= 0) exact_entry = ix.findEntry(uint32_t(pid), key);
    if (exact_entry || !members.empty())
      exactMatch(ix, exact_entry, key, r.exact_tokens > 0 ? r.exact_tokens : int32_t(pol.block_size),
                 now, pol, q.ttft_ms, serving, members, out);
    floors();
    if (!out.scores.empty()) {
      reason = Reason::kPrefixMatch;
    } else {
      if (scope) tenantHot(ix, *scope, now, q.ttft_ms, out);
      if (!out.scores.empty()) {
        reason = pol.enable_tenant_hot ? Reason::kTenantHot : Reason::kNoHint;
        if (!pol.enable_tenant_hot) out.scores.clear();
      } else {
        reason = classify();
      }
    }
  }
  sortScores(out.scores);
  bool delivered = reason == Reason::kPrefixMatch || reason == Reason::kTenantHot;
  // Step 7: the minimumPrefixTokens downgrade (a classifier's answer stands).
  if (delivered && short_prefix) delivered = false;
  if (!delivered && (reason == Reason::kPrefixMatch || reason == Reason::kTenantHot ||
                     reason == Reason::kNoHint)) {
    out.scores.clear();
    reason = Reason::kNoHint;
    // AFFINITY_HINT: one stable replica from the scope's serving set.
    bool eligible = pol.affinity_routing && !q.tenant.empty() && !q.model.empty() &&
                    (!raw_chain || q.n_blocks == q.n_counts) && serving > 0;
    std::string seed;
    if (eligible) {
      if (!r.keys.empty()) {
        for (size_t i = 0; i < r.keys.size(); ++i) {
          std::string b = r.chain_bytes ? std::string(r.chain_bytes[i]) : be8(r.keys[i]);
          uint32_t len = static_cast<uint32_t>(b.size());
          char l[4] = {char(len >> 24), char(len >> 16), char(len >> 8), char(len)};
          seed.append(l, 4).append(b);
        }
      } else {
        seed = r.exact_bytes;
      }
    }
    if (eligible && !seed.empty()) {
      std::vector<std::string> ids;
      for (uint32_t replica : serving_ids) ids.push_back(ix.replicas_[replica].id);
      out.scores.push_back({affinityPick(std::move(ids), seed), 0, 0, 0, 0});
      reason = Reason::kAffinityHint;
    }
  }
  if (deadline_ns != 0 && clock.nowNs() > deadline_ns) {
    out.echoed_tokens.clear();
    out.echo_adapter = false;
    return answer(Reason::kTimeout);
  }
  // A delivered hit credits the LFU counts of what it matched.
  if (credit_lfu && reason == Reason::kPrefixMatch) {
    if (exact_entry && exact_entry->token_count > 0) {
      for (const auto& h : exact_entry->holders)
        for (const auto& s : out.scores)
          if (ix.replicas_[h.replica].id == s.replica)
            creditHit(h.hits);
    } else {
      // Every entry of each surviving replica's matched run.
      for (const auto& [replica, depth] : chain_credit.depth) {
        const std::string& id = ix.replicas_[replica].id;
        bool survived = false;
        for (const auto& s : out.scores) survived = survived || s.replica == id;
        if (!survived) continue;
        for (size_t i = 0; i < depth && i < chain_credit.path.size(); ++i)
          for (const auto& h : chain_credit.path[i]->holders)
            if (h.replica == replica)
              creditHit(h.hits);
      }
    }
  }
  return answer(reason);
}

LookupOutcome lookupRoute(const HintIndex& index, const LookupRequest& req,
                          const PromptTokenizer& tokenize, int64_t deadline_ns,
                          const LookupLimits& limits) {
  return Lookup::run(index, req, tokenize, deadline_ns, limits);
}

}  // namespace kvgate::hints
