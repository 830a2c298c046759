#include "hints/hint_metrics.h"

#include <map>

#include "metrics/text.h"

namespace kvgate::hints {

namespace {
using metrics::Family;
using metrics::Type;
// clang-format off
const Family kCalls{"inferencecache_lookup_route_calls_total", Type::kCounter,
    "LookupRoute calls by model, reason code and whether the answer carried a replica.",
    {"model", "reason_code", "hint_used"}};
const Family kLatency{"inferencecache_lookup_route_latency_seconds", Type::kHistogram,
    "LookupRoute time from the call's arrival to its answer (tokenization included).", {"model"}};
const Family kEntries{"inferencecache_index_entries", Type::kGauge,
    "Distinct prefix keys indexed, by model (each chain block counts).", {"model"}};
const Family kEvictions{"inferencecache_index_evictions_total", Type::kCounter,
    "(prefix, replica) entries evicted by policy: reason ttl (age past evictionTTL) or cap "
    "(maxEntries reached), algorithm lru or lfu.", {"algorithm", "reason"}};
const Family kRemoved{"kvgate_index_removed_total", Type::kCounter,
    "(prefix, replica) entries removed by PublishEvent: reason prefix_evicted or all_cleared.",
    {"reason"}};
const Family kHoldings{"kvgate_index_holdings", Type::kGauge,
    "(prefix, replica) entries held (bounded by the policy's maxEntries).", {}};
const Family kMemory{"kvgate_index_memory_bytes", Type::kGauge,
    "Approximate bytes of the index's tables.", {}};
const Family kIngest{"kvgate_index_ingest_total", Type::kCounter,
    "Ingest: kind updates (CacheStateUpdate messages applied), entries (holdings added or "
    "refreshed), dropped (malformed prefix entries), refused (updates refused whole), events, "
    "events_refused, undecodable (messages protobuf could not decode).", {"kind"}};
const Family kIngestRefused{"kvgate_index_ingest_refused_total", Type::kCounter,
    "Ingest calls (ReportCacheState, PublishEvent) refused by the ingest policy: reason "
    "unauthenticated (no or a wrong bearer token with --ingest-token-file), not_loopback (a "
    "non-loopback client with neither a token file nor client certificates).", {"reason"}};
const Family kPolicy{"kvgate_index_policy_reloads_total", Type::kCounter,
    "Policy file loads: result ok or error (an error keeps the previous policy).", {"result"}};
// clang-format on
}  // namespace

HintMetrics::HintMetrics() = default;

HintMetrics::PerModel& HintMetrics::slot(std::string_view model) {
  {
    std::shared_lock r(mu_);
    auto it = models_.find(std::string(model));
    if (it != models_.end()) return *it->second;
    if (models_.size() >= kMaxModels) {
      auto other = models_.find("other");
      if (other != models_.end()) return *other->second;
    }
  }
  std::unique_lock w(mu_);
  std::string key(model);
  if (models_.size() >= kMaxModels && !models_.count(key)) key = "other";
  auto& p = models_[key];
  if (!p) p = std::make_unique<PerModel>();
  return *p;
}

void HintMetrics::lookup(std::string_view model, Reason reason, bool hint_used, double seconds) {
  PerModel& m = slot(model);
  m.calls[static_cast<size_t>(reason)][hint_used ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
  m.latency.observe(seconds);
}

std::string HintMetrics::render(const HintIndex& index) const {
  metrics::TextWriter w;
  {
    std::shared_lock r(mu_);
    std::map<std::string, const PerModel*> sorted;
    for (const auto& [k, v] : models_) sorted[k] = v.get();
    w.header(kCalls);
    for (const auto& [model, m] : sorted)
      for (int r = 0; r < kReasonCount; ++r)
        for (int used = 0; used < 2; ++used) {
          uint64_t n = m->calls[size_t(r)][size_t(used)].load(std::memory_order_relaxed);
          if (n == 0) continue;
          w.sample(kCalls,
                   {{"model", model},
                    {"reason_code", reasonName(static_cast<Reason>(r))},
                    {"hint_used", used ? "true" : "false"}},
                   double(n));
        }
    w.header(kLatency);
    for (const auto& [model, m] : sorted) w.histogram(kLatency, {{"model", model}}, m->latency);
  }
  w.header(kEntries);
  for (const auto& [model, n] : index.entriesByModel())
    w.sample(kEntries, {{"model", model}}, double(n));
  const auto& c = index.counters();
  w.header(kEvictions);
  for (int a = 0; a < 2; ++a) {
    const char* alg = evictionName(static_cast<Eviction>(a));
    w.sample(kEvictions, {{"algorithm", alg}, {"reason", "ttl"}}, double(c.evicted_ttl[a].load()));
    w.sample(kEvictions, {{"algorithm", alg}, {"reason", "cap"}},
             double(c.evicted_capacity[a].load()));
  }
  w.header(kRemoved);
  w.sample(kRemoved, {{"reason", "prefix_evicted"}}, double(c.evicted_event.load()));
  w.sample(kRemoved, {{"reason", "all_cleared"}}, double(c.evicted_cleared.load()));
  w.header(kHoldings);
  w.sample(kHoldings, {}, double(index.holdings()));
  w.header(kMemory);
  w.sample(kMemory, {}, double(index.memoryBytes()));
  w.header(kIngest);
  w.sample(kIngest, {{"kind", "updates"}}, double(updates.load()));
  w.sample(kIngest, {{"kind", "entries"}}, double(update_entries.load()));
  w.sample(kIngest, {{"kind", "dropped"}}, double(update_dropped.load()));
  w.sample(kIngest, {{"kind", "refused"}}, double(updates_refused.load()));
  w.sample(kIngest, {{"kind", "events"}}, double(events.load()));
  w.sample(kIngest, {{"kind", "events_refused"}}, double(events_refused.load()));
  w.sample(kIngest, {{"kind", "undecodable"}}, double(proto_errors.load()));
  w.header(kIngestRefused);
  w.sample(kIngestRefused, {{"reason", "unauthenticated"}},
           double(ingest_unauthenticated.load()));
  w.sample(kIngestRefused, {{"reason", "not_loopback"}}, double(ingest_not_loopback.load()));
  w.header(kPolicy);
  w.sample(kPolicy, {{"result", "ok"}}, double(policy_reloads.load()));
  w.sample(kPolicy, {{"result", "error"}}, double(policy_errors.load()));
  return w.str();
}

}  // namespace kvgate::hints
