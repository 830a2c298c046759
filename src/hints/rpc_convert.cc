#include "hints/rpc_convert.h"

namespace kvgate::hints {

namespace pb = inferencecache::v1alpha1;

namespace {

Tier tierOf(int t) {
  return (t >= 1 && t <= 3) ? static_cast<Tier>(t) : Tier::kUnspecified;  // unknown: unspecified
}

}  // namespace

UpdateIn toUpdate(const pb::CacheStateUpdate& m, int64_t wall_now_us, uint64_t& dropped) {
  UpdateIn u;
  u.replica_id = m.replica_id();
  u.model_id = m.model_id();
  u.tenant_id = m.tenant_id();
  u.hash_scheme = m.hash_scheme();
  u.adapter_id = m.adapter_id();
  // The producer's timestamp_us as an age on the index's clock (0 or less: now; the future
  // counts as now).
  const int64_t ts = m.timestamp_us();
  u.age_ns = (ts > 0 && wall_now_us > ts) ? (wall_now_us - ts) * 1000 : 0;
  size_t blocks = 0;
  for (const auto& p : m.prefixes()) {
    blocks += static_cast<size_t>(p.block_hashes_size()) + 1;
    if (blocks > kMaxBlocksPerUpdate) {
      ++dropped;
      continue;
    }
    PrefixIn in;
    in.prefix_hash = p.prefix_hash();
    in.token_count = p.token_count();
    in.block_hashes.assign(p.block_hashes().begin(), p.block_hashes().end());
    in.block_token_counts.assign(p.block_token_counts().begin(), p.block_token_counts().end());
    in.tier = tierOf(p.tier());
    in.adapter_id = p.adapter_id();
    u.prefixes.push_back(std::move(in));
  }
  if (m.has_stats()) {
    u.has_stats = true;
    u.stats.hit_rate = m.stats().hit_rate();
    u.stats.pressure = m.stats().pressure();
    u.stats.cache_memory_bytes = m.stats().cache_memory_bytes();
    u.stats.client_version = m.stats().client_version().substr(0, 128);
    u.stats.t2_hit_tokens = m.stats().t2_hit_tokens();
    u.stats.t2_query_tokens = m.stats().t2_query_tokens();
  }
  return u;
}

bool toLookup(const pb::LookupRouteRequest& req, std::vector<std::string_view>& blocks,
              LookupRequest& q) {
  q.model = req.model_id();
  q.tenant = req.tenant_id();
  q.scheme = req.hash_scheme();
  q.adapter = req.adapter_id();
  q.prefix_hash = req.prefix_hash();
  q.prefix_token_count = req.prefix_token_count();
  const LookupLimits limits;
  if (static_cast<size_t>(req.block_hashes_size()) > limits.max_blocks) return false;
  blocks.assign(req.block_hashes().begin(), req.block_hashes().end());
  q.block_hashes = blocks.data();
  q.n_blocks = blocks.size();
  q.block_token_counts = req.block_token_counts().data();
  q.n_counts = static_cast<size_t>(req.block_token_counts_size());
  q.token_ids = req.token_ids().data();
  q.n_tokens = static_cast<size_t>(req.token_ids_size());
  q.prompt_text = req.prompt_text();
  q.ttft_ms = req.has_slo() ? req.slo().ttft_ms() : 0;
  return true;
}

IngestResult applyEvent(HintIndex& index, const pb::CacheEvent& ev) {
  if (ev.tenant_id() == kProbeTenant) return {true, "IGNORED", 0, 0};
  const int type = ev.type();
  if (type < 1 || type > 4) return {false, "UNKNOWN_EVENT_TYPE", 0, 0};
  return index.event(static_cast<HintIndex::EventType>(type), ev.replica_id(), ev.model_id(),
                     ev.tenant_id(), ev.prefix_hash(), ev.adapter_id(), !ev.adapter_id().empty());
}

}  // namespace kvgate::hints
